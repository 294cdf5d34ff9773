"""Issue 11, case 6, against a real nats-server: what the services refuse never reaches the
projection as a fact. A GangPlaced over busy GPUs is dead-lettered by a service host and shows
up in the projection only as a refusal (with its reason, in `why`), as does a submission on
another tenant's subject; a lost node that
heartbeats again is `ready` in `nodes`, as the scheduler sees it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import typer
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.projections.nats_source import run_projector
from gpuledger.projections.queries import jobs_rows, nodes_rows, why_report
from gpuledger.projections.store import connect_readonly
from gpuledger.services.cli.audit import register
from gpuledger.services.cli.why import render_why
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.host import Host
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.natsauth import as_admin
from tests.services.test_acceptance import gpu, job, placed
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration


class Observer(LedgerService):
    """Folds the log with the services' ledger; decides nothing."""

    name = "observer"

    def decide(self, state, now_ms):
        return []


def the_log() -> list[ev.Event]:
    node = ev.NodeInfo(
        name="n1", cpu_milli=64000, memory_mib=512000, gpus=tuple(gpu(i) for i in range(8))
    )
    return [
        ev.NodeRegistered(event_id="reg", node=node, heartbeat_s=5, producer="node-agent/n1"),
        *job("a"),
        placed("a"),
        *job("b"),
        placed("b"),  # b on a's 8 busy GPUs: refused
        # on its own subject, in the scheduler's name, at an epoch no leader reaches (the
        # largest the decoder takes; 2**62 is already undecodable): refused
        ev.PreemptionRequested(
            event_id="forged",
            job_id="a",
            allocation_id="a#1",
            beneficiary="b",
            reason="Priority",
            deadline_ms=1,
            producer="scheduler/x",
            leader_epoch=2**53 - 1,
        ),
        ev.NodeLost(
            event_id="lost", node="n1", message="silent 30s", producer="scheduler/0", leader_epoch=1
        ),  # the real scheduler: still folded
        ev.NodeHeartbeat(event_id="hb", node="n1", running=("a#1/0",), producer="node-agent/n1"),
    ]


async def fold_with_a_service_host(url: str) -> Host:
    bus = await Bus.connect(url, **natsauth.options())
    await bus.ensure_stream()
    for e in the_log():
        await bus.publish(e)
    # org/a's CI publishes a job that claims to be org/b's
    spec = ev.JobSpec(job_id="sneaky", tenant="org/b", resources=ev.Resources(gpus=1))
    await bus.publish_raw("gl.submit.org/a.sneaky", ev.encode(ev.JobSubmitted(job=spec)))
    host = Host(Observer(), bus, max_idle_s=0.2)
    task = asyncio.create_task(host.run())
    try:
        await eventually_async(
            lambda: host.idle.is_set() and _caught_up(host, bus), what="the host to catch up"
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await bus.close()
    return host


def test_a_refused_placement_is_a_refusal_not_a_running_job(monkeypatch, tmp_path):
    with EmbeddedNats(tmp_path / "js") as server:
        as_admin(monkeypatch, server)
        host = asyncio.run(fold_with_a_service_host(server.url))
        # the service refused the bad placement and recorded it as a dead letter
        # the placement, the forged preemption, and the job on a wrong subject
        assert host.stats.dead_letters == 3
        assert host.state.jobs["a"].state == "running"  # no forged preemption took hold
        assert host.state.intake.leader_epochs == {"scheduler": 1}
        assert "sneaky" not in host.state.jobs
        assert host.state.jobs["b"].state == "pending"
        assert not host.state.nodes["n1"].lost  # back after its heartbeat
        db = tmp_path / "projection.duckdb"
        asyncio.run(
            run_projector(
                server.url, db, connect_options=natsauth.options(), fetch_timeout=0.5, follow=False
            )
        )

    con = connect_readonly(db)
    try:
        jobs = {r["job_id"]: r for r in jobs_rows(con)}
        assert jobs["a"]["state"] == "running" and jobs["b"]["state"] == "pending"
        assert jobs["b"]["allocation_id"] is None and jobs["b"]["attempts"] == 0
        (n1,) = nodes_rows(con)
        assert n1["status"] == "ready" and n1["lost_at_ms"] is None
        assert n1["allocated_milli"] == 8000 and n1["free_milli"] == 0  # never -8
        assert con.execute("SELECT count(*) FROM allocations WHERE job_id = 'b'").fetchone() == (0,)
        refusals = con.execute(
            "SELECT type, job_id, producer, code FROM refusals ORDER BY seq"
        ).fetchall()
        # the projection also holds the DeadLettered record the host published (a fact)
        assert refusals == [
            ("GangPlaced", "b", "scheduler/0", "PlacementConflict"),
            ("PreemptionRequested", "a", "scheduler/x", "WrongProducer"),
            ("JobSubmitted", "sneaky", "", "WrongSubject"),
        ]
        assert "sneaky" not in jobs
        dead = con.execute("SELECT count(*) FROM events WHERE type = 'DeadLettered'").fetchone()
        assert dead == (3,)
        reasons = [
            r
            for (r,) in con.execute(
                "SELECT json_extract_string(payload, '$.reason') FROM events WHERE type = 'DeadLettered'"
            ).fetchall()
        ]
        assert any(r.startswith("Refused: WrongProducer: PreemptionRequested") for r in reasons)
        forged = render_why(why_report(con, "a"))
        assert (
            "Refused:   PreemptionRequested" in forged
            and "from scheduler/x): WrongProducer" in forged
        )
        report = why_report(con, "b")
        assert [x["code"] for x in report["refusals"]] == ["PlacementConflict"]
        text = render_why(report)
        assert "Refused:   GangPlaced" in text and "b#1" in text
    finally:
        con.close()
    # `why` of a job that exists only as a refused submission says why it does not exist
    app = typer.Typer()
    register(app)
    r = CliRunner().invoke(app, ["why", "sneaky", "--db", str(db)])
    assert r.exit_code == 1
    assert "no job 'sneaky'" in r.output and "WrongSubject" in r.output
    assert "gl.submit.org/b.sneaky" in r.output


async def _caught_up(host, bus) -> bool:
    return host.folded_seq >= await bus.last_seq()
