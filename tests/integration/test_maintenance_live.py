"""Maintenance windows against a real nats-server with authentication on (issue 42): only the
operator plans one (`gpuledger node maintenance`, with its real credential); bad input is one
line, exit 2, and nothing is published; a job without a time limit (its duration hint and
margin reaching the window) waits with `Maintenance` naming the window; `--list` shows it,
`--cancel` ends it and the job is placed."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

import pytest

from gpuledger import events as ev
from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.client_requests import ask_status
from tests.integration.cluster import Processes, cli
from tests.integration.test_security import CONFIG, A, job_file, one_line_error, stored
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def status(bus: Bus, job: str, until):
    return await ask_status(bus, A, job, until=until, wait_for_service=True, timeout=30)


async def register_node_1(bus: Bus) -> None:
    from gpuledger.services.domain.tooling.stamp import stamp

    gpus = tuple(
        ev.GpuInfo(index=i, uuid=f"GPU-{i}", model="A100-80GB", memory_mib=81920, clique="c0")
        for i in range(4)
    )
    info = ev.NodeInfo(name="node-1", cpu_milli=64000, memory_mib=512000, gpus=gpus)
    await bus.publish(
        stamp(
            ev.NodeRegistered,
            key="node-1",
            producer="node-agent/node-1",
            now_ms=0,
            correlation_id="node-1",
            node=info,
            heartbeat_s=0,
        )
    )


async def test_the_operator_plans_a_window_and_a_job_without_a_limit_waits_for_it(
    server, bus, tmp_path
):
    server.add_principals(f"ci:{A}")
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    await register_node_1(bus)
    now = time.time_ns() // 1_000_000
    start, end = iso(now + 3_600_000), iso(now + 3 * 3_600_000)

    def gl(*args: str, creds: str | None = None):
        more = ("--creds", creds) if creds else ()
        return cli("node", "maintenance", *args, "--nats-url", server.url, *more, timeout=90)

    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        # a CI key cannot plan a window: one line, exit 1, nothing published
        ci = await asyncio.to_thread(
            gl, "node-1", "--start", start, "--end", end, creds=str(server.creds(f"ci:{A}"))
        )
        assert ci.returncode == 1 and "only the operator" in one_line_error(ci)
        # bad input from the operator: one line, exit 2, nothing published
        bad = {
            "has no zone": ("node-1", "--start", start.rstrip("Z"), "--end", end),
            "is not after --start": ("node-1", "--start", end, "--end", start),
            "no node 'node-2'": ("node-[1-2]", "--start", start, "--end", end),
            "is in the past": ("node-1", "--start", iso(now - 7200_000), "--end", iso(now - 1)),
        }
        for problem, args in bad.items():
            done = await asyncio.to_thread(gl, *args)
            assert done.returncode == 2 and problem in one_line_error(done), (problem, done)
        assert not await stored(bus, "gl.admin.maint.>")
        # the operator plans a window on node-1 an hour from now
        done = await asyncio.to_thread(
            gl, "node-1", "--start", start, "--end", end, "--name", "fw", "--reason", "firmware"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("maintenance window fw on node-1 from ")
        # a second window overlapping it on node-1 is refused
        again = await asyncio.to_thread(gl, "node-1", "--start", start, "--end", end)
        assert again.returncode == 2 and "overlaps window 'fw' on node-1" in one_line_error(again)
        # then a job without a time limit waits, told which window
        done = await asyncio.to_thread(
            cli, "submit", str(job_file(tmp_path, "open", A)), "--wait", "--nats-url", server.url
        )
        assert done.returncode == 0, done.stderr
        st = await status(bus, "open", lambda s: s.reason == "Maintenance")
        assert st.message.startswith("fits only on nodes of maintenance window fw (node-1, ")
        # (its 1 h duration hint with the 50 % margin reaches the window)
        assert st.message.endswith(
            ": its duration hint with a 50% margin, 1h30m, would reach into it (firmware)"
        )
        # --list shows it, scheduled
        listed = await asyncio.to_thread(gl, "--list", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        (row,) = json.loads(listed.stdout)
        assert (row["window"], row["nodes"], row["phase"]) == ("fw", ["node-1"], "scheduled")
        # when the operator cancels it, the job is placed
        done = await asyncio.to_thread(gl, "--cancel", "fw", "--reason", "postponed")
        assert done.returncode == 0, done.stderr
        await status(bus, "open", lambda s: s.state not in ("submitted", "pending"))
        unknown = await asyncio.to_thread(gl, "--cancel", "fw")
        assert unknown.returncode == 2 and "UnknownWindow" in one_line_error(unknown)
    finally:
        procs.stop()


async def test_the_work_running_on_a_windows_nodes_is_drained_when_it_starts(server, bus, tmp_path):
    """Given a job running on node-1, when the operator plans a window on node-1 that is
    already in force, then the preemption service asks the run to leave at once, reason
    `Drain`, naming the window (what the nodes' agents then checkpoint and evict)."""
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    await register_node_1(bus)
    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        done = await asyncio.to_thread(
            cli, "submit", str(job_file(tmp_path, "open", A)), "--wait", "--nats-url", server.url
        )
        assert done.returncode == 0, done.stderr
        await status(bus, "open", lambda s: s.state not in ("submitted", "pending"))
        assert not await stored(bus, "gl.preempt.open.PreemptionRequested")
        # when a window on node-1 starts (a minute ago) while open runs there
        now = time.time_ns() // 1_000_000
        start, end = iso(now - 60_000), iso(now + 3_600_000)
        done = await asyncio.to_thread(
            cli,
            *("node", "maintenance", "node-1", "--start", start, "--end", end),
            *("--name", "fw", "--reason", "firmware", "--nats-url", server.url),
            timeout=90,
        )
        assert done.returncode == 0, done.stderr

        # then open is asked to checkpoint and leave, for no other job, naming the window
        async def asked():
            raw = await bus.last_message("gl.preempt.open.PreemptionRequested")
            return None if raw is None else ev.decode(raw.data)

        req = await eventually_async(asked, 30, "the drain's request")
        assert (req.job_id, req.reason, req.beneficiary) == ("open", "Drain", "")
        assert req.message == "node node-1 is in maintenance window fw (firmware)"
    finally:
        procs.stop()


async def test_a_reservation_of_the_configuration_is_published_once_and_listed(
    server, bus, tmp_path
):
    """Given a configuration with a reservation on node-1 (not registered yet), when it is
    applied twice, then the log holds one `MaintenanceScheduled` (`origin: config`) and
    `gpuledger node maintenance --list` shows the window, scheduled."""
    now = time.time_ns() // 1_000_000
    start, end = iso(now + 3_600_000), iso(now + 7_200_000)
    doc = {
        **CONFIG,
        "reservations": [{"name": "fw", "nodes": "node-1", "start": start, "end": end}],
    }
    await publish_config(server.access(), doc)
    await publish_config(server.access(), doc)
    windows = [
        ev.decode(rec.data)
        async for rec in bus.read_all()
        if rec.subject == "gl.admin.maint.fw.MaintenanceScheduled"
    ]
    assert [(w.window_id, w.nodes, w.origin) for w in windows] == [("fw", ("node-1",), "config")]
    listed = await asyncio.to_thread(
        cli, "node", "maintenance", "--list", "-o", "json", "--nats-url", server.url, timeout=90
    )
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["window"], row["nodes"], row["phase"]) == ("fw", ["node-1"], "scheduled")


async def test_a_window_held_for_a_tenant_lets_its_jobs_start_there(server, bus, tmp_path):
    """Given node-1, when the operator holds it for tenant A from an hour from now (an
    unknown tenant is one line, exit 2, nothing published), then A's job without a time
    limit is placed there and `--list` names the tenant."""
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    await register_node_1(bus)
    now = time.time_ns() // 1_000_000
    span = ("--start", iso(now + 3_600_000), "--end", iso(now + 7_200_000))

    def gl(*args: str):
        return cli("node", "maintenance", *args, "--nats-url", server.url, timeout=90)

    try:
        for role in ("admission", "quota", "scheduler", "preemption"):
            procs.start(role)
        bad = await asyncio.to_thread(gl, "node-1", *span, "--tenant", "nobody")
        assert bad.returncode == 2 and "no tenant 'nobody'" in one_line_error(bad)
        assert not await stored(bus, "gl.admin.maint.>")
        done = await asyncio.to_thread(gl, "node-1", *span, "--name", "a-day", "--tenant", A)
        assert done.returncode == 0, done.stderr
        assert done.stdout.rstrip().endswith(f", held for tenant {A}")
        done = await asyncio.to_thread(
            cli, "submit", str(job_file(tmp_path, "open", A)), "--wait", "--nats-url", server.url
        )
        assert done.returncode == 0, done.stderr
        await status(bus, "open", lambda s: s.state not in ("submitted", "pending"))
        listed = await asyncio.to_thread(gl, "--list", "-o", "json")
        (row,) = json.loads(listed.stdout)
        assert (row["window"], row["tenant"], row["phase"]) == ("a-day", A, "scheduled")
    finally:
        procs.stop()
