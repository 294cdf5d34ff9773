"""Issue 30, credential changes are live, against a real nats-server with real keys.

Given a running server that serves an auth directory (as `gpuledger up` does: services/runtime/
nats_server.py watches its auth.conf), when `gpuledger auth add-tenant | add-node | rotate |
remove` edits that directory, then the server reloads by itself, without a restart: an added
identity is admitted, a removed or rotated-out key is refused (a new connection with it fails
with `Authorization Violation`), and a service whose key was rotated while it runs reconnects
with its new seed and goes on deciding.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
from types import SimpleNamespace

import nats
import nats.errors
import pytest

from gpuledger.projections.nats_source import ProjectorStatus, run_projector
from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime.auth import CREDS_ENV, TLS_ENV, AuthDir, client_options
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.cluster import _sample_projector
from gpuledger.services.runtime.processes import ROOT, run_command
from gpuledger.services.runtime.supervisor import host_condition
from tests.integration.cluster import EXAMPLES, cli, start_up, submission
from tests.waiting import eventually, eventually_async

pytestmark = pytest.mark.integration

A = "team-a"
THREE = EXAMPLES / "three-jobs.yaml"
CONFIG = {
    "cluster": {"nodes": [{"name": "node-1", "gpus": 4, "model": "A100-80GB"}]},
    "tenants": [{"name": A, "guaranteed": 4}, {"name": "team-new", "guaranteed": 4}],
}
RELOAD_S = 5.0
"""The issue's bound for a credential change to take effect (scaled like every wait)."""


async def connect_with(server, seed_file) -> tuple[nats.NATS | None, list[str]]:
    """A plain nats-py connection with the key in `seed_file` (None when the server refused
    it), and the errors the server sent."""
    errors: list[str] = []

    async def error_cb(err: Exception) -> None:
        errors.append(str(err))

    try:
        nc = await nats.connect(
            server.url,
            error_cb=error_cb,
            allow_reconnect=False,
            connect_timeout=3,
            max_reconnect_attempts=0,
            **client_options(seed_file),
        )
    except (TimeoutError, nats.errors.Error, OSError) as err:
        errors.append(str(err))
        return None, errors
    return nc, errors


async def refused(server, seed_file) -> bool:
    """The server refuses a new connection with this key, saying it is not authorized."""
    nc, errors = await connect_with(server, seed_file)
    if nc is not None:
        await nc.close()
        return False
    return any("authorization" in e.lower() for e in errors)


async def admitted(server, seed_file) -> bool:
    nc, _ = await connect_with(server, seed_file)
    if nc is None:
        return False
    await nc.close()
    return True


def auth(*args: str) -> subprocess.CompletedProcess:
    done = cli("auth", *args)
    assert done.returncode == 0, done.stderr
    return done


async def test_a_service_key_rotated_while_it_runs_is_refused_and_the_service_goes_on(
    server, tmp_path
):
    # given: admission running as its own process with its own key, admitting jobs
    server.add_principals(f"ci:{A}")
    access = server.access("admin")
    bus = await Bus.connect(server.url, connect_attempts=1, quiet=True, **access.options())
    await bus.ensure_stream()
    await publish_config(access, CONFIG)
    old_seed = tmp_path / "old-admission.nk"
    shutil.copy(server.creds("admission"), old_seed)
    env = {k: v for k, v in os.environ.items() if k not in (CREDS_ENV, *TLS_ENV.values())}
    env[CREDS_ENV] = str(server.creds("admission"))
    log_path = tmp_path / "admission.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        run_command("admission", server.url), cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        await bus.publish_raw(f"gl.submit.{A}.before", submission("before", A))
        await eventually_async(
            lambda: bus.last_message("gl.admission.before.JobAdmitted"), 30, "admitted before"
        )

        # when: its key is rotated while it runs
        done = auth("rotate", str(server.auth.path), "admission")
        assert "rotated admission" in done.stdout

        # then: the old key is refused, with no restart of the server
        await eventually_async(lambda: refused(server, old_seed), RELOAD_S, "old key refused")
        assert await admitted(server, server.creds("admission"))  # the new key is not
        # and the service was dropped, came back with its new seed and goes on admitting
        await eventually_async(
            lambda: b"bus.reconnected" in log_path.read_bytes(), 30, "admission reconnected"
        )
        await bus.publish_raw(f"gl.submit.{A}.after", submission("after", A))
        await eventually_async(
            lambda: bus.last_message("gl.admission.after.JobAdmitted"),
            30,
            f"admitted after the rotation: {log_path.read_text()[-2000:]}",
        )
        assert proc.poll() is None
        assert (
            b"Authorization Violation" not in log_path.read_bytes().split(b"bus.reconnected")[-1]
        )  # not refused again once it reconnected
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        await bus.close()


async def test_a_tenant_added_while_the_server_runs_can_submit(server, bus, admission):
    # given: a running server without the tenant
    d = AuthDir(server.auth.path)
    assert "ci:team-new" not in d.principals()

    # when
    done = auth("add-tenant", str(d.path), "team-new")
    assert "added ci:team-new" in done.stdout

    # then: its CI key connects and its submission is stored, without a restart
    seed = d.creds("ci:team-new")
    await eventually_async(lambda: admitted(server, seed), RELOAD_S, "tenant key admitted")
    nc, errors = await connect_with(server, seed)
    assert nc is not None, errors
    try:  # through the admission service's intake, as every CI key (issue 44)

        async def ask():
            try:
                return await nc.request(
                    "glr.submit.team-new.first", submission("first", "team-new"), timeout=10
                )
            except nats.errors.NoRespondersError:
                return None  # admission has not subscribed yet

        reply = await eventually_async(ask, 30, "the intake to answer")
        assert json.loads(reply.data)["seq"] > 0, reply.data
    finally:
        await nc.close()
    assert await bus.last_message("gl.submit.team-new.first") is not None
    assert bus.nc.stats["reconnects"] == 0  # the reload left other connections alone


async def test_a_removed_node_key_is_refused_and_its_connection_dropped(server):
    # given: a node added while the server runs, connected with its key
    auth("add-node", str(server.auth.path), "node-9")
    seed = server.auth.creds("node:node-9")
    kept = server.auth.path.parent / "kept-node-9.nk"  # what a removed node still holds
    shutil.copy(seed, kept)
    try:
        await eventually_async(lambda: admitted(server, seed), RELOAD_S, "node key admitted")
        nc, errors = await connect_with(server, seed)
        assert nc is not None, errors

        # when
        done = auth("remove", str(server.auth.path), "node:node-9")
        assert "removed node:node-9" in done.stdout

        # then: its key file is gone, its live connection is closed, its key is refused
        assert not seed.exists()
        assert "node:node-9" not in server.auth.principals()
        await eventually_async(lambda: not nc.is_connected, RELOAD_S, "connection dropped")
        assert await refused(server, kept)
        await nc.close()
    finally:
        kept.unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("remove", "{d}", "admission"), "rotate its key instead"),
        (("remove", "{d}", "node:ghost"), "no identity 'node:ghost' to remove"),
        (("rotate", "{d}", "node:ghost"), "no identity 'node:ghost' to rotate"),
        (("remove", "{d}", "node:a.b"), "principal 'node:a.b'"),
    ],
)
def test_bad_credential_changes_are_one_line_and_change_nothing(tmp_path, args, says):
    d = tmp_path / "auth"
    auth("init", str(d), "--nodes", "node-1")
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    done = cli("auth", *(a.format(d=d) for a in args))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


async def test_a_service_whose_key_the_server_refuses_shows_unauthorized_until_it_has_its_seed(
    server, tmp_path
):
    # given: the scheduler's bus, its seed a copy held apart from the auth directory (a host
    # whose seed file the operator did not update)
    held = tmp_path / "scheduler.nk"
    shutil.copy(server.creds("scheduler"), held)
    bus = await Bus.connect(server.url, name="scheduler", **client_options(held))
    host = SimpleNamespace(bus=bus, gap=None, lease=SimpleNamespace(held=True), folded_seq=0)
    try:
        assert host_condition(host) == ("running", None, "leader")

        # when: its key is rotated on the server only
        auth("rotate", str(server.auth.path), "scheduler")

        # then: the server drops it and refuses every reconnect; status says so, not "leader"
        await eventually_async(lambda: bus.auth_failure, RELOAD_S, "an authorization failure")
        state, detail, lease = host_condition(host)
        assert (state, lease) == ("unauthorized", None) and "Authorization Violation" in detail

        # when: its seed file gets the new key, then: it reconnects with it by itself
        shutil.copy(server.creds("scheduler"), held)
        await eventually_async(lambda: bus.nc.is_connected and not bus.auth_failure, 30)
        assert host_condition(host) == ("running", None, "leader")
    finally:
        await bus.close()


def test_credential_changes_against_a_running_up(tmp_path):
    """The same on `gpuledger up` itself: its services run in-process, each with its own key
    in `.gpuledger/auth`, and nothing is restarted."""
    up = start_up(tmp_path, "--config", str(THREE), level="warning", stdout=subprocess.DEVNULL)
    data = tmp_path / ".gpuledger"
    auth_dir = data / "auth"
    try:
        eventually((data / "nats-url").exists, 30, "up to record its NATS URL", interval_s=0.2)
        server = SimpleNamespace(url=(data / "nats-url").read_text().strip())
        old_scheduler = tmp_path / "old-scheduler.nk"
        old_ci = tmp_path / "old-ci.nk"
        shutil.copy(auth_dir / "scheduler.nk", old_scheduler)
        shutil.copy(auth_dir / "ci-team-a.nk", old_ci)
        (tmp_path / "one.yaml").write_text("id: one\ntenant: team-a\ngpus: 1\nduration: 1\n")
        (tmp_path / "two.yaml").write_text("id: two\ntenant: team-a\ngpus: 1\nduration: 1\n")

        # when: the scheduler's key is rotated, team-a's CI key removed and added anew
        auth("rotate", str(auth_dir), "scheduler")
        auth("remove", str(auth_dir), "ci:team-a")

        # then: the old keys are refused ...
        for seed in (old_scheduler, old_ci):
            eventually(lambda seed=seed: asyncio.run(refused(server, seed)), RELOAD_S, str(seed))
        gone = cli("submit", "one.yaml", "--wait", "--creds", str(old_ci), cwd=tmp_path)
        # the server answers 'Authorization Violation' and closes; the client may see the
        # close first (a reset): refused either way, exit 3 as for an unreachable server
        refusal = "uthorization" in gone.stderr or "reset by peer" in gone.stderr
        assert gone.returncode == 3 and refusal, gone.stderr

        # ... the tenant's new key submits, and the rotated scheduler still places its job
        auth("add-tenant", str(auth_dir), "team-a")
        new_ci = str(auth_dir / "ci-team-a.nk")
        eventually(lambda: asyncio.run(admitted(server, new_ci)), RELOAD_S, "new CI key")
        ok = cli("submit", "one.yaml", "--wait", "--creds", new_ci, cwd=tmp_path)
        assert ok.returncode == 0 and "admitted one" in ok.stdout, ok.stderr

        def completed() -> bool:
            out = cli("jobs", "-o", "json", cwd=tmp_path)
            rows = {j["job_id"]: j["state"] for j in json.loads(out.stdout or "[]")}
            return rows.get("one") == "completed"

        eventually(completed, 60, "one placed by the rotated scheduler, and completed")

        def scheduler_row() -> dict | None:
            out = cli("status", "-o", "json", cwd=tmp_path)
            rows = {r["name"]: r for r in json.loads(out.stdout)["services"]}
            assert rows["scheduler"]["state"] == "running", rows[
                "scheduler"
            ]  # shown if it times out
            return rows["scheduler"]

        assert eventually(scheduler_row, 30, "the scheduler running in status")["lease"]
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


async def test_a_projector_whose_key_the_server_refuses_shows_unauthorized(server, tmp_path):
    # given: the projector running with a seed held apart from the auth directory
    held = tmp_path / "projector.nk"
    shutil.copy(server.creds("projector"), held)
    admin = await Bus.connect(server.url, quiet=True, **server.client_options("admin"))
    await admin.ensure_stream()
    stop, ps, st = asyncio.Event(), ProjectorStatus(), SimpleNamespace(state="running")
    task = asyncio.create_task(
        run_projector(
            server.url,
            tmp_path / "p.duckdb",
            stop=stop,
            status=ps,
            connect_options=client_options(held),
        )
    )
    try:
        await eventually_async(lambda: ps.ready, 30, "the projector ready")
        # when: its key is rotated on the server only
        auth("rotate", str(server.auth.path), "projector")
        # then: status shows it unauthorized, with the reason
        await eventually_async(lambda: ps.auth_failure, RELOAD_S, "an authorization failure")
        _sample_projector(st, ps)
        assert st.state == "unauthorized" and "Authorization Violation" in st.detail
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await admin.close()
