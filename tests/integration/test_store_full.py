"""A full store never wedges the cluster, against a real embedded nats-server.

Given `gpuledger up` with its store capped (`--nats-max-store`: JetStream's `max_file_store`,
refused writes answered `insufficient resources`, as a full disk's are), when another stream
fills the store, then a submit fails with one line saying the store is full (exit 5) and
`gpuledger status` says `store full` (and never that `up` is not running); when the filler is
deleted (space comes back), then with no restart of `up` a later submit is accepted and
scheduled, and the job refused while full was never half-stored. And a credential reload the
server refuses is shown by `status`, not silently ignored.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
from pathlib import Path

import nats.js.errors
import pytest
from nats.js import api

from gpuledger.services.cli.connect import STORE_FULL_EXIT, resolve_access
from gpuledger.services.roles import CONTROL_PLANE
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from gpuledger.services.runtime.storefull import store_write_error
from tests.integration.cluster import EXAMPLES, cli, start_up, status
from tests.waiting import eventually

pytestmark = pytest.mark.integration

JOB = "id: {id}\ntenant: team-a\ngpus: 1\nduration: 600\n"
RECOVERY_S = 30.0
"""The bound for the cluster to work again once space is back (scaled like every wait)."""
wait_for = functools.partial(eventually, interval_s=0.3)


def all_running(cwd: Path) -> dict | None:
    doc = status(cwd)
    rows = doc.get("services", [])
    ok = rows and all(s["state"] == "running" for s in rows)
    return doc if ok and (doc.get("store") or {}).get("state") == "ok" else None


def every_role_leads(cwd: Path) -> bool:
    """Each control-plane role has a leader (none stays standby after the store recovers)."""
    rows = status(cwd).get("services", [])
    return {r["role"] for r in rows if r.get("lease") == "leader"} >= set(CONTROL_PLANE)


def submit(cwd: Path, job_id: str) -> subprocess.CompletedProcess:
    path = cwd / f"{job_id}.yaml"
    path.write_text(JOB.format(id=job_id))
    return cli("submit", str(path), cwd=cwd)


async def fill(data: Path, url: str | None = None) -> int:
    """Fill the store with a filler stream (as the operator) until NATS refuses a write as
    full; returns the messages stored. `url`: the server's (else the one `up` started)."""
    access = resolve_access(url, None, data)
    bus = await Bus.connect(access.url, connect_attempts=1, quiet=True, **access.options())
    try:
        await bus.js.add_stream(
            api.StreamConfig(name="FILLER", subjects=["filler.>"], storage=api.StorageType.FILE)
        )
        n = 0
        while True:
            try:
                await bus.js.publish("filler.x", b"x" * 256 * 1024)
            except nats.js.errors.APIError as err:
                assert store_write_error(err) is not None, err
                return n
            n += 1
    finally:
        await bus.close()


async def free(data: Path, url: str | None = None) -> None:
    access = resolve_access(url, None, data)
    bus = await Bus.connect(access.url, connect_attempts=1, quiet=True, **access.options())
    try:
        await bus.js.delete_stream("FILLER")
    finally:
        await bus.close()


def stop_up(up: subprocess.Popen) -> str:
    up.send_signal(signal.SIGTERM)
    out = up.communicate(timeout=60)[0]
    assert up.returncode == 0, out[-3000:]
    return out


@pytest.mark.parametrize("mode", [(), ("--processes",)], ids=["in-process", "processes"])
def test_a_full_store_refuses_writes_clearly_and_the_cluster_recovers_by_itself(tmp_path, mode):
    up = start_up(
        tmp_path, "--config", str(EXAMPLES / "three-jobs.yaml"), "--nats-max-store", "4MB", *mode
    )
    out = ""
    data = tmp_path / ".gpuledger"
    try:
        wait_for(lambda: all_running(tmp_path), 60, "every service running, the store ok")
        done = submit(tmp_path, "before")
        assert done.returncode == 0, done.stderr
        running = cli("status", "before", "--wait-for", "running", "--timeout", "60", cwd=tmp_path)
        assert running.returncode == 0, running.stderr

        # when: another stream fills the store
        assert asyncio.run(fill(data)) > 0

        # then: a submit fails in one line, saying the store is full, and nothing is stored
        refused = submit(tmp_path, "while-full")
        assert refused.returncode == STORE_FULL_EXIT, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: the event store is full"), lines
        # and `status` says so (and that `up` runs)
        doc = wait_for(
            lambda: (d := status(tmp_path)).get("store", {}).get("state") == "full" and d,
            30,
            "status says the store is full",
        )
        assert "insufficient resources" in doc["store"]["error"]
        shown = cli("status", cwd=tmp_path)
        assert shown.returncode == 1
        assert "store full: the event store is full" in shown.stderr
        assert "not running" not in shown.stderr

        # when: space comes back
        asyncio.run(free(data))

        # then: with no restart of `up`, the store is writable and a later job is scheduled
        wait_for(lambda: all_running(tmp_path), RECOVERY_S, "the store writable again")
        done = wait_for(
            lambda: (d := submit(tmp_path, "after")).returncode == 0 and d,
            RECOVERY_S,
            "a submit accepted",
        )
        running = cli(
            "status", "after", "--wait-for", "running", "--timeout", str(RECOVERY_S), cwd=tmp_path
        )
        assert running.returncode == 0, running.stderr + running.stdout
        # nothing lost, nothing half-stored: the refused job was never submitted
        unknown = cli("status", "while-full", cwd=tmp_path)
        assert unknown.returncode == 1 and "UnknownJob" in unknown.stderr, unknown.stderr
        assert cli("status", "before", cwd=tmp_path).returncode == 0
        assert up.poll() is None  # the same `up` throughout
    finally:
        if up.poll() is None:
            out = stop_up(up)
        else:
            out = up.communicate()[0]
    assert "store.full" in out and "store.writable" in out, out[-3000:]


def test_a_refused_credential_reload_is_shown_by_status_until_fixed(tmp_path):
    """A broken auth.conf (the server refuses to reload it) is not silently ignored: `status`
    names the failure and exits 1; the server keeps admitting what it loaded before; a fixed
    file is reloaded and `status` is clean again."""
    up = start_up(tmp_path, "--config", str(EXAMPLES / "three-jobs.yaml"))
    conf = tmp_path / ".gpuledger" / "auth" / "auth.conf"
    try:
        wait_for(lambda: all_running(tmp_path), 60, "every service running")
        good = conf.read_text()

        # when: the auth file is broken (a half-edited user list)
        conf.write_text(good.replace("users = [", "users = [ {", 1))

        # then: status shows the refused reload, and exits 1
        shown = wait_for(
            lambda: (
                (d := cli("status", cwd=tmp_path)).returncode == 1
                and "NATS credential reload failed" in d.stderr
                and d
            ),
            30,
            "status showing the refused reload",
        )
        assert "nats-server refused to reload its config" in shown.stderr, shown.stderr
        assert "not running" not in shown.stderr
        assert status(tmp_path)["nats_reload_error"]
        # the identities loaded before still work
        done = submit(tmp_path, "during")
        assert done.returncode == 0, done.stderr

        # when: it is fixed, then the reload succeeds and status is clean
        conf.write_text(good + "\n")
        wait_for(
            lambda: cli("status", cwd=tmp_path).returncode == 0, 30, "status clean after the fix"
        )
        assert status(tmp_path)["nats_reload_error"] is None
    finally:
        if up.poll() is None:
            stop_up(up)
        else:
            up.communicate()


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (root with the right to mount only; skipped elsewhere): a disk that
    really fills up, so NATS latches its write error as on a production host."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill_disk(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"x" * (1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


def test_a_really_full_disk_latches_nats_and_up_recovers_when_space_is_back(small_disk, tmp_path):
    up = start_up(small_disk, "--config", str(EXAMPLES / "three-jobs.yaml"))
    jobs = tmp_path / "jobs"
    jobs.mkdir()

    def submit_job(job_id: str) -> subprocess.CompletedProcess:
        path = jobs / f"{job_id}.yaml"
        path.write_text(JOB.format(id=job_id))
        return cli("submit", str(path), cwd=small_disk)

    try:
        wait_for(lambda: all_running(small_disk), 60, "every service running, the store ok")
        assert submit_job("before").returncode == 0
        filler = fill_disk(small_disk)
        # then: NATS latches a write error; `status` says store full (never `not running`)
        tries = iter(range(1000))
        doc = wait_for(
            lambda: (
                submit_job(f"while-{next(tries)}"),
                (d := status(small_disk)).get("store", {}).get("state") == "full" and d,
            )[1],
            60,
            "status saying the store is full",
        )
        assert "no space left on device" in doc["store"]["error"]
        shown = cli("status", cwd=small_disk)
        assert "store full:" in shown.stderr and "not running" not in shown.stderr
        # when: space comes back, then with no restart of `up` a new job is scheduled
        filler.unlink()
        wait_for(lambda: all_running(small_disk), RECOVERY_S, "the store writable again")
        wait_for(lambda: submit_job("after").returncode == 0, RECOVERY_S, "a submit accepted")
        running = cli(
            "status",
            "after",
            "--wait-for",
            "running",
            "--timeout",
            str(RECOVERY_S),
            cwd=small_disk,
        )
        assert running.returncode == 0, running.stderr + running.stdout
        assert status(small_disk)["store"]["restarts"] >= 1  # the latch was cleared in place
        assert up.poll() is None
    finally:
        if up.poll() is None:
            stop_up(up)
        else:
            up.communicate()


@pytest.fixture
def external(tmp_path, monkeypatch):
    """A nats-server `up` did not start (`--nats-url`), its store capped at 4 MB, its identities
    in `<tmp>/.gpuledger/auth` (where `up` and the CLI find the operator's)."""
    server = EmbeddedNats(
        tmp_path / "nats" / "store", auth=tmp_path / ".gpuledger" / "auth", max_file_store="4MB"
    ).start()
    monkeypatch.setenv("GPULEDGER_NATS_URL", server.url)
    try:
        yield server
    finally:
        server.stop()


def works_again(tmp_path) -> None:
    """Every service runs, a submission is accepted and placed, and every role has a leader
    again (after the store had room again)."""
    wait_for(lambda: all_running(tmp_path), RECOVERY_S, "the store writable again")
    wait_for(lambda: submit(tmp_path, "after").returncode == 0, RECOVERY_S, "a submit accepted")
    running = cli(
        "status", "after", "--wait-for", "running", "--timeout", str(RECOVERY_S), cwd=tmp_path
    )
    assert running.returncode == 0, running.stderr + running.stdout
    wait_for(lambda: every_role_leads(tmp_path), RECOVERY_S, "a leader of every role")


def test_an_external_nats_with_a_full_store_is_shown_and_the_cluster_recovers_by_itself(
    tmp_path, external
):
    # given `up` on an external NATS (the store probe runs there as on the embedded one)
    up = start_up(
        tmp_path, "--config", str(EXAMPLES / "three-jobs.yaml"), "--nats-url", external.url
    )
    data = tmp_path / ".gpuledger"
    try:
        wait_for(lambda: all_running(tmp_path), 60, "every service running, the store ok")
        assert submit(tmp_path, "before").returncode == 0

        # when: another stream fills the store
        assert asyncio.run(fill(data, external.url)) > 0

        # then: `status` says store full, that it resumes by itself, and exits 1
        shown = wait_for(
            lambda: "store full:" in (d := cli("status", cwd=tmp_path)).stderr and d,
            30,
            "status saying the store is full",
        )
        assert shown.returncode == 1
        line = next(ln for ln in shown.stderr.splitlines() if ln.startswith("store full:"))
        assert "insufficient resources" in line, line
        assert line.endswith(
            "writes are refused until space is freed, then everything resumes by itself"
        )
        refused = submit(tmp_path, "while-full")
        assert refused.returncode == STORE_FULL_EXIT, refused.stderr

        # when: space comes back, then with no restart of anything every role works again
        asyncio.run(free(data, external.url))
        works_again(tmp_path)
        assert external.running and up.poll() is None  # nobody restarted either
    finally:
        if up.poll() is None:
            stop_up(up)
        else:
            up.communicate()


def test_an_external_nats_whose_full_disk_latched_says_to_restart_it(
    small_disk, tmp_path, monkeypatch
):
    """A full disk latches the external server's write error: `up` cannot restart a server it
    did not start, so `status` names what to do; done, every role works again."""
    server = EmbeddedNats(small_disk / "store", auth=tmp_path / ".gpuledger" / "auth").start()
    monkeypatch.setenv("GPULEDGER_NATS_URL", server.url)
    up = start_up(tmp_path, "--config", str(EXAMPLES / "three-jobs.yaml"), "--nats-url", server.url)
    try:
        wait_for(lambda: all_running(tmp_path), 60, "every service running, the store ok")
        filler = fill_disk(small_disk)
        # then: `status` says store full with the one-line instruction naming the server
        shown = wait_for(
            lambda: "restart that server" in (d := cli("status", cwd=tmp_path)).stderr and d,
            60,
            "status saying to restart the server",
        )
        line = next(ln for ln in shown.stderr.splitlines() if ln.startswith("store full:"))
        assert f"once the disk of nats-server at {server.url} has room, restart that server" in line
        assert shown.returncode == 1
        # when: the operator frees space and restarts the server as told
        filler.unlink()
        server.restart()
        # then: every role works again, with no restart of `up`
        works_again(tmp_path)
        assert up.poll() is None
    finally:
        if up.poll() is None:
            stop_up(up)
        else:
            up.communicate()
        server.stop()
