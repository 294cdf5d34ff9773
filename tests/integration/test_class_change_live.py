"""`gpuledger update --class` against a real nats-server with authentication on (issue 42):
the operator (its real credential) moves a pending job to another class and its status shows
the class's value; a placed job is refused at once with the reason (exit 1, nothing
published); a tenant moving its job above its class is refused by the fold and nothing
changes; two of --priority/--nice/--class is one line, exit 2."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.client_requests import ask_status
from tests.integration.cluster import Processes, cli
from tests.integration.test_maintenance_live import register_node_1
from tests.integration.test_security import CONFIG, A, job_file, one_line_error, stored

pytestmark = pytest.mark.integration


async def status(bus: Bus, job: str, until):
    return await ask_status(bus, A, job, until=until, wait_for_service=True, timeout=30)


async def test_the_operator_changes_a_pending_jobs_class_and_a_placed_one_is_refused(
    server, bus, tmp_path
):
    server.add_principals(f"ci:{A}")
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    await register_node_1(bus)  # 4 GPUs
    creds = str(server.creds(f"ci:{A}"))

    def gl(*args: str, ci: bool = False):
        more = ("--creds", creds) if ci else ()
        return cli(*args, "--nats-url", server.url, *more, timeout=90)

    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        # given `run` placed (1 GPU of 4) and `wide` pending (it needs all 4)
        done = await asyncio.to_thread(gl, "submit", str(job_file(tmp_path, "run", A)), "--wait")
        assert done.returncode == 0, (done.stderr, procs.logs())
        await status(bus, "run", lambda s: s.state == "running")
        wide = tmp_path / "wide.yaml"
        wide.write_text(json.dumps({"id": "wide", "tenant": A, "gpus": 4, "duration": "1h"}))
        done = await asyncio.to_thread(gl, "submit", str(wide), "--wait")
        assert done.returncode == 0, done.stderr
        await status(bus, "wide", lambda s: s.state == "pending")
        # two of --priority / --nice / --class: one line, exit 2
        both = await asyncio.to_thread(gl, "update", "wide", "--nice", "1", "--class", "train")
        assert both.returncode == 2 and "exactly one of" in one_line_error(both)
        # the placed job: refused at once with the reason, nothing published
        placed = await asyncio.to_thread(gl, "update", "run", "--class", "interactive")
        assert placed.returncode == 1
        assert "only a pending job's class can change" in one_line_error(placed)
        assert not await stored(bus, f"gl.admin.ctl.{A}.run.>")
        # when the operator moves `wide` to interactive
        done = await asyncio.to_thread(
            gl, "update", "wide", "--class", "interactive", "--reason", "demo"
        )
        assert done.returncode == 0, done.stderr
        st = await status(bus, "wide", lambda s: s.priority_class == "interactive")
        assert (st.state, st.priority, st.class_priority) == ("pending", 75, 75)
        # a tenant moving it above its (new) class: the fold refuses, nothing changes
        done = await asyncio.to_thread(gl, "update", "wide", "--class", "build", ci=True)
        assert done.returncode == 0, done.stderr  # published through the intake
        seq = await bus.last_seq()
        st = await ask_status(bus, A, "wide", after_seq=seq, timeout=30)
        assert (st.priority_class, st.priority) == ("interactive", 75)
    finally:
        procs.stop()
