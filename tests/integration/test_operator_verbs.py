"""Issue 42 against a real nats-server with authentication on: a tenant's CI credential holds
and releases its own jobs with `gpuledger hold` / `release`; acting on another tenant's job
gets the same one-line answer as an id nobody has, and nothing is published; a CI credential
cannot act as the operator (the server refuses `gl.admin.ctl.>`); a hold that cannot apply is
refused at once with its reason."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from gpuledger import events as ev
from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.client_requests import ask_status
from tests.integration.cluster import Processes, cli
from tests.integration.test_security import (
    CONFIG,
    A,
    B,
    Client,
    job_file,
    one_line_error,
    stored,
)
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration


async def status(bus: Bus, tenant: str, job: str, until):
    return await ask_status(bus, tenant, job, until=until, wait_for_service=True, timeout=30)


async def test_a_tenant_holds_and_releases_its_own_job_and_not_another_tenants(
    server, bus, tmp_path
):
    server.add_principals(f"ci:{A}", f"ci:{B}")
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)

        def gl(tenant: str, *args: str) -> subprocess.CompletedProcess:
            creds = str(server.creds(f"ci:{tenant}"))
            return cli(*args, "--nats-url", server.url, "--creds", creds, timeout=90)

        # given team-a's job `mine`, admitted (no node: it stays pending)
        done = await asyncio.to_thread(
            gl, A, "submit", str(job_file(tmp_path, "mine", A)), "--wait"
        )
        assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())

        # when team-b's CI holds `mine`: the same answer as for an id nobody has, nothing stored
        theirs = await asyncio.to_thread(gl, B, "hold", "mine", "--reason", "x")
        nobody = await asyncio.to_thread(gl, B, "hold", "nobody-has", "--reason", "x")
        assert theirs.returncode == nobody.returncode == 1
        assert one_line_error(theirs).replace("mine", "J") == one_line_error(nobody).replace(
            "nobody-has", "J"
        )
        assert "UnknownJob" in one_line_error(theirs)
        assert not await stored(bus, "gl.ctl.*.mine.>")

        # and team-a's CI cannot act as the operator: the server refuses the subject
        ci = await Client.connect(server, f"ci:{A}")
        try:
            forged = ev.encode(ev.JobHeld(job_id="mine", tenant=A, actor="operator"))
            subject = f"gl.admin.ctl.{A}.mine.JobHeld"
            await ci.refused(ci.js.publish(subject, forged), subject)
        finally:
            await ci.close()
        assert not await stored(bus, "gl.admin.ctl.>")

        # when team-a's CI holds its own job
        done = await asyncio.to_thread(gl, A, "hold", "mine", "--reason", "dataset not landed")
        assert done.returncode == 0 and "hold requested for mine" in done.stdout, done.stderr
        # then it is held by the tenant, and a second hold is refused at once
        st = await status(bus, A, "mine", lambda s: s.held_by == "tenant")
        assert st.state == "pending"
        again = await asyncio.to_thread(gl, A, "hold", "mine")
        assert again.returncode == 1 and "already held" in one_line_error(again)

        # when team-a releases it, it is no longer held
        done = await asyncio.to_thread(gl, A, "release", "mine")
        assert done.returncode == 0, done.stderr
        await status(bus, A, "mine", lambda s: s.held_by is None)
        released = await bus.last_message(f"gl.ctl.{A}.mine.JobReleased")
        assert released is not None

        # bad input: a malformed id is exit 2, one line
        bad = await asyncio.to_thread(gl, A, "hold", "a.b")
        assert bad.returncode == 2 and one_line_error(bad)
    finally:
        procs.stop()


async def test_the_operators_hold_says_held_and_only_the_operator_releases_it(
    server, bus, tmp_path
):
    server.add_principals(f"ci:{A}")
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        creds = str(server.creds(f"ci:{A}"))
        done = await asyncio.to_thread(
            cli, "submit", str(job_file(tmp_path, "later", A)), "--wait", "--nats-url", server.url
        )
        assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
        # when the operator (the admin credential) holds it
        op = await asyncio.to_thread(
            cli, "hold", "later", "--reason", "firmware", "--nats-url", server.url
        )
        assert op.returncode == 0, op.stderr
        assert await stored(bus, f"gl.admin.ctl.{A}.later.JobHeld")
        # then its status says Held, by the operator, and why
        st = await status(bus, A, "later", lambda s: s.reason == "Held")
        assert (st.state, st.held_by, st.message) == (
            "pending",
            "operator",
            "held by operator: firmware",
        )
        # and the tenant's release is refused at once, nothing published
        mine = await asyncio.to_thread(
            cli, "release", "later", "--nats-url", server.url, "--creds", creds
        )
        assert mine.returncode == 1 and "only the operator" in one_line_error(mine)
        assert not await stored(bus, f"gl.ctl.{A}.later.>")
    finally:
        procs.stop()


async def test_only_the_operator_cordons_and_drains_and_a_cordoned_node_takes_no_new_job(
    server, bus, tmp_path
):
    from tests.integration.test_maintenance_live import register_node_1

    server.add_principals(f"ci:{A}")
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    await register_node_1(bus)  # 4 GPUs
    creds = str(server.creds(f"ci:{A}"))
    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        # a CI key cannot cordon: the CLI refuses at once, the server refuses the subject
        ci = await asyncio.to_thread(
            cli, "node", "cordon", "node-1", "--nats-url", server.url, "--creds", creds
        )
        assert ci.returncode == 1 and "only the operator" in one_line_error(ci)
        client = await Client.connect(server, f"ci:{A}")
        try:
            subject = "gl.admin.node.node-1.NodeCordoned"
            raw = ev.encode(ev.NodeCordoned(node="node-1"))
            await client.refused(client.js.publish(subject, raw), subject)
        finally:
            await client.close()
        assert not await stored(bus, "gl.admin.node.>")
        # an unknown node (in a range): one line, exit 1, nothing published
        unknown = await asyncio.to_thread(
            cli, "node", "cordon", "node-[1-2]", "--nats-url", server.url
        )
        assert unknown.returncode == 1 and "'node-2'" in one_line_error(unknown)
        assert not await stored(bus, "gl.admin.node.>")
        # the operator cordons node-1
        done = await asyncio.to_thread(
            cli, "node", "cordon", "node-[1]", "--reason", "firmware", "--nats-url", server.url
        )
        assert done.returncode == 0 and "cordon requested for node-1" in done.stdout, done.stderr
        # then a job that fits only there waits with NodeCordoned
        done = await asyncio.to_thread(
            cli, "submit", str(job_file(tmp_path, "next", A)), "--wait", "--nats-url", server.url
        )
        assert done.returncode == 0, done.stderr
        st = await status(bus, A, "next", lambda s: s.reason == "NodeCordoned")
        assert st.message == "fits only on cordoned nodes: node-1 (firmware)"
        # a drain of a node with nothing running: --wait says drained at once, exit 0
        done = await asyncio.to_thread(
            cli, "node", "drain", "node-1", "--wait", "--timeout", "30", "--nats-url", server.url
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "drained node-1"
        assert await stored(bus, "gl.admin.node.node-1.NodeCordoned")
    finally:
        procs.stop()


async def test_a_drain_waits_for_a_gangs_disruption_budget_and_says_so(server, bus, tmp_path):
    """Given a gang with min_available 1 running on node-1 (no minimum runtime), when the
    operator drains node-1 with --wait, then nothing is asked to leave and the command exits
    4 at its timeout naming the run left and why; with --force it is asked to leave."""
    from tests.integration.test_maintenance_live import register_node_1

    config = {**CONFIG, "policy": {"min_runtime_s": 0}}
    await publish_config(server.access(), config)
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    await register_node_1(bus)
    job = tmp_path / "ring.yaml"
    job.write_text(json.dumps({"id": "ring", "tenant": A, "gpus": 2, "min_available": 1}))
    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        done = await asyncio.to_thread(cli, "submit", str(job), "--wait", "--nats-url", server.url)
        assert done.returncode == 0, done.stderr
        await status(bus, A, "ring", lambda s: s.state not in ("submitted", "pending"))
        # when node-1 is drained: the drain waits and says why
        done = await asyncio.to_thread(
            cli, "node", "drain", "node-1", "--wait", "--timeout", "3", "--nats-url", server.url
        )
        assert done.returncode == 4, done.stderr
        assert one_line_error(done) == (
            "error: not drained within 3s: node-1 (ring: gang ring keeps min_available 1 of 1 "
            "members: evicting it would leave 0 running)"
        )
        assert not await stored(bus, "gl.preempt.ring.PreemptionRequested")
        # when it is forced: ring is asked to leave
        done = await asyncio.to_thread(
            cli, "node", "drain", "node-1", "--force", "--nats-url", server.url
        )
        assert done.returncode == 0, done.stderr

        async def asked():
            raw = await bus.last_message("gl.preempt.ring.PreemptionRequested")
            return None if raw is None else ev.decode(raw.data)

        req = await eventually_async(asked, 30, "the forced drain's request")
        assert (req.job_id, req.reason) == ("ring", "Drain")
    finally:
        procs.stop()
