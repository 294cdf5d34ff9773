"""Issue 11, cases 1-3, against a real nats-server with every service and the projector as
its own OS process: one bad message published raw with a plain NATS client stops nothing.

Given a running cluster, when a hostile message lands on `gl.>`, then every process stays up
(also after a restart that refolds it), the message is recorded once with its reason (a
DeadLettered, or for an unroutable job id a JobRejected InvalidSpec), the projector records it
and goes on, a job submitted afterwards is admitted and placed, and `gpuledger export` over
the stream completes and verifies.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.js.errors
import pytest

from gpuledger import events as ev
from gpuledger.projections.store import connect_readonly
from gpuledger.replay import live_player
from gpuledger.replay.scenario import load
from gpuledger.services.domain.inputs.jobfile import job_spec
from gpuledger.services.domain.tooling.stamp import submission
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.processes import ServiceProcesses
from tests import natsauth
from tests.integration.cluster import EXAMPLES, Processes, cli
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
THREE = EXAMPLES / "three-jobs.yaml"
CONTROL = ("admission", "quota", "scheduler", "preemption")


@dataclass(frozen=True)
class Case:
    name: str
    subject: str
    payload: bytes


DEEP = Case(
    "deeply nested JSON",
    "gl.submit.team-a.deep",
    b'{"type":"JobSubmitted.v1","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
)
UNROUTABLE_ID = Case(
    "job id that is no subject token",
    "gl.submit.team-a.x",
    json.dumps(
        {
            "type": "JobSubmitted.v1",
            "event_id": "sub-bad-id",
            "job": {"job_id": "a.b*c >d", "tenant": "team-a", "resources": {"gpus": 1}},
        }
    ).encode(),
)
HUGE_NUMBER = Case(
    "gpus beyond any integer column",
    "gl.submit.team-a.huge",
    b'{"type":"JobSubmitted.v1","job":{"job_id":"huge","tenant":"team-a","resources":{"gpus":1'
    + b"0" * 30
    + b"}}}",
)


def start_projector(procs: Processes, data: Path) -> None:
    ServiceProcesses.start(procs, "projector", "--data", str(data))


async def publish_raw(url: str, subject: str, payload: bytes) -> int:
    """What an adversarial tester does: a plain NATS client, no gpuledger code."""
    nc = await nats.connect(url, **natsauth.options())
    try:
        return (await nc.jetstream().publish(subject, payload)).seq
    finally:
        await nc.close()


async def submit(bus: Bus, job_id: str) -> None:
    spec = job_spec({"id": job_id, "tenant": "team-a", "gpus": 2, "duration": "1s"})
    await bus.create_once(submission(spec, now_ms=int(time.time() * 1000), producer="test"))


async def events_until(bus: Bus, pred, timeout: float = 30.0) -> list[tuple[int, str, ev.Event]]:
    async def log_if_done():
        _, log = await live_player.fold(bus)
        return log if pred(log) else None

    return await eventually_async(log_if_done, timeout, "the log to hold it", interval_s=0.3)


def placed(log, job_id: str) -> bool:
    return any(isinstance(e, ev.GangPlaced) and e.job_id == job_id for _, _, e in log)


async def projector_acked(url: str, seq: int, timeout: float = 30.0) -> bool:
    """Until the live projector has committed and acknowledged `seq` (asked of JetStream, so
    that no reader touches its database while it runs)."""
    nc = await nats.connect(url, **natsauth.options())
    js = nc.jetstream()

    async def acked() -> bool:
        info = await js.consumer_info("GPULEDGER", "projector")
        return info.ack_floor is not None and info.ack_floor.stream_seq >= seq

    try:
        return await eventually_async(
            acked,
            timeout,
            f"the projector to acknowledge seq {seq}",
            interval_s=0.3,
            ignoring=(nats.js.errors.NotFoundError,),
        )
    finally:
        await nc.close()


def alive(procs: Processes) -> dict[str, int | None]:
    """Every process that exited, with its exit code (empty when all run)."""
    return {n: p.poll() for n, p in procs.procs.items() if p.poll() is not None}


async def dead_letters(bus: Bus) -> list[ev.DeadLettered]:
    _, log = await live_player.fold(bus)
    return [e for _, _, e in log if isinstance(e, ev.DeadLettered)]


@pytest.mark.parametrize("case", [DEEP, UNROUTABLE_ID, HUGE_NUMBER], ids=lambda c: c.name)
async def test_one_bad_message_stops_nothing(
    case: Case, server, bus, procs, tmp_path: Path
) -> None:
    scenario = load(THREE)
    nodes = [n.name for n in scenario.nodes]
    data = tmp_path / "data"
    await live_player.publish_config(bus, scenario)
    procs.start_all(nodes)
    start_projector(procs, data)
    assert await live_player.wait_for_nodes(bus, nodes, 30), procs.logs()

    # when: the hostile message, then a normal job
    bad = await publish_raw(server.url, case.subject, case.payload)
    await submit(bus, "after-1")
    log = await events_until(bus, lambda log: placed(log, "after-1"))
    assert placed(log, "after-1"), procs.logs()

    # then: it is recorded once, with its reason
    dead = await dead_letters(bus)
    assert [d.stream_seq for d in dead] == [bad]
    if case is UNROUTABLE_ID:
        # the body names another job than its subject: refused by the acceptance rules, and
        # admission answers for the job its subject names
        assert dead[0].reason.startswith("Refused: ") and "a.b*c >d" in dead[0].reason
        (rejected,) = [
            (s, e) for _, s, e in log if isinstance(e, ev.JobRejected) and e.job_id == "x"
        ]
        assert rejected[0] == "gl.admission.x.JobRejected"
        assert rejected[1].reason == "InvalidSpec"
        assert "a.b*c >d" in rejected[1].message
    else:
        expected = {
            DEEP.name: "JSON nested deeper than 64 levels",
            HUGE_NUMBER.name: "at `$.job.resources.gpus`",
        }[case.name]
        assert dead[0].reason.startswith("UndecodableEvent: ") and expected in dead[0].reason
    assert await projector_acked(server.url, bad), procs.logs()  # the projector is past it too
    assert alive(procs) == {}, procs.logs()

    # a restart refolds the bad message and still stops nothing
    for role in ("admission", "projector"):
        procs.stop(role)
    procs.start("admission")
    start_projector(procs, data)
    await submit(bus, "after-2")
    log = await events_until(bus, lambda log: placed(log, "after-2"))
    assert placed(log, "after-2"), procs.logs()
    assert len(await dead_letters(bus)) == len(dead)  # not recorded again
    last = await bus.last_seq()
    assert await projector_acked(server.url, last), procs.logs()
    assert alive(procs) == {}, procs.logs()

    procs.stop(
        "projector"
    )  # read the file once the single writer is gone (readers: issue 11 case 4)
    con = connect_readonly(data / "projection.duckdb")
    try:
        row = con.execute(
            "SELECT type, payload->>'error' FROM events WHERE seq = ?", [bad]
        ).fetchone()
        states = dict(con.execute("SELECT job_id, state FROM jobs").fetchall())
    finally:
        con.close()
    if case is UNROUTABLE_ID:
        assert row[0] == "JobSubmitted"  # kept in the log table, refused: no job row of its own
        assert "a.b*c >d" not in states and states["x"] == "rejected"
    else:
        assert row[0] == "Undecodable" and expected in row[1]
    assert {"after-1", "after-2"} <= set(states)

    # export over the stream completes (skipping what cannot be decoded) and verifies
    out = tmp_path / "log.jsonl"
    exported = cli("export", "--out", str(out), "--nats-url", server.url)
    assert exported.returncode == 0, exported.stderr
    if case is not UNROUTABLE_ID:
        assert f"1 undecodable messages skipped: seq [{bad}]" in exported.stdout
    verified = cli("verify", str(out), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["mismatches"] == []
