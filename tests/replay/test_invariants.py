"""The chaos soak's invariant checker (replay/invariants.py) on logs with known faults: a clean
simulated run of the chaos load passes every invariant, and each planted violation (a double
allocation, a partial gang, a lost job, a member started outside its gang) is reported."""

from __future__ import annotations

import random

import msgspec
import pytest
import yaml

from gpuledger import events as ev
from gpuledger.replay.invariants import INVARIANTS, check_log
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.runtime.chaos import FLEET, job_doc


@pytest.fixture(scope="module")
def run():
    """The chaos fleet under 60 jobs of the chaos load, one every second, in the simulator."""
    doc = yaml.safe_load(FLEET.read_text())
    rng = random.Random(7)
    doc["timeline"] = [{"at": i, "submit": job_doc(rng, i, "t")} for i in range(60)]
    sim = simulate(from_document(doc, "chaos"))
    acked = {e.job.job_id: seq for seq, _, e in sim.log if isinstance(e, ev.JobSubmitted)}
    return sim.log, acked


def results(log, acked) -> dict[str, bool]:
    findings = check_log(log, acked)
    assert [f.name for f in findings] == list(INVARIANTS)
    return {f.name: f.ok for f in findings}


def renumber(log):
    return [(i + 1, subject, event) for i, (_, subject, event) in enumerate(log)]


def insert_after(log, seq, *events):
    out = []
    for s, subject, event in log:
        out.append((s, subject, event))
        if s == seq:
            out += [(0, ev.subject_for(e), e) for e in events]
    return renumber(out)


def test_the_simulated_chaos_load_keeps_every_invariant(run):
    log, acked = run
    kinds = {type(e).__name__ for _, _, e in log}
    # the load has what the soak must exercise: gangs, MIG, shares, preemption
    assert {"GangPlaced", "PreemptionRequested", "GangEvicted", "MemberStarted"} <= kinds
    placed = [e for _, _, e in log if isinstance(e, ev.GangPlaced)]
    assert any(len(e.members) == 2 for e in placed)
    assert any(m.mig_profile for e in placed for m in e.members)
    assert any(m.gpu_milli for e in placed for m in e.members)
    findings = {f.name: f for f in check_log(log, acked)}
    assert all(f.ok for f in findings.values()), {n: f.violations for n, f in findings.items()}
    assert findings["no_double_allocation"].checked == len(placed)
    assert findings["no_lost_job"].checked == 60


def _overlap(log):
    """Two live allocations at once and a whole GPU of the first one."""
    placed = {}
    for seq, _, e in log:
        if isinstance(e, ev.GangPlaced) and not any(
            m.mig_profile or m.gpu_milli for m in e.members
        ):
            placed[e.allocation_id] = (seq, e)
    ended = {
        e.allocation_id: seq
        for seq, _, e in log
        if isinstance(e, (ev.GangEvicted, ev.GangCompleted, ev.GangFailed))
    }
    for a_id, (seq, a) in placed.items():
        for seq_b, b in placed.values():
            if seq < seq_b < ended.get(a_id, 10**9) and a.job_id != b.job_id:
                return seq_b, a, b
    raise AssertionError("no two overlapping whole-GPU allocations in the run")


def _conflict(log):
    """The log with one placement moved onto a GPU another live allocation holds: (the log,
    the moved placement's sequence, that GPU's node and index)."""
    seq_b, a, b = _overlap(log)
    first = a.members[0]
    moved = msgspec.structs.replace(
        b.members[0], node=first.node, gpus=(first.gpus[0],) + b.members[0].gpus[1:]
    )
    bad = msgspec.structs.replace(b, members=(moved,) + b.members[1:])
    return (
        [(s, subj, bad if s == seq_b else e) for s, subj, e in log],
        seq_b,
        (first.node, first.gpus[0]),
    )


def test_a_double_allocation_is_reported(run):
    log, acked = run
    # Given a placement over a GPU a live allocation holds (and no service refused it on the record)
    log2, _, (node, gpu) = _conflict(log)
    got = results(log2, acked)
    assert got["no_double_allocation"] is False
    findings = {f.name: f for f in check_log(log2, acked)}
    assert f"GPU {node}/{gpu} in two allocations" in findings["no_double_allocation"].violations[0]


def test_a_refused_conflict_on_the_record_is_not_an_allocation(run):
    log, acked = run
    # Given the same conflicting placement, which a service dead-lettered
    log2, seq, _ = _conflict(log)
    placed = log2[seq - 1][2]
    dead = ev.DeadLettered(
        event_id="dl",
        occurred_at_ms=placed.occurred_at_ms,
        correlation_id=placed.job_id,
        producer="scheduler/0",
        stream_seq=seq,
        subject=log2[seq - 1][1],
        reason="Refused: PlacementConflict",
    )
    refused = log2 + [(len(log2) + 1, "gl.dead.x", dead)]
    assert results(refused, acked)["no_double_allocation"] is True
    # and without the dead letter it stands as a double allocation
    assert results(log2, acked)["no_double_allocation"] is False


def test_a_partial_gang_is_reported(run):
    log, acked = run
    seq, gang = next(
        (s, e) for s, _, e in log if isinstance(e, ev.GangPlaced) and len(e.members) == 2
    )
    half = msgspec.structs.replace(gang, members=gang.members[:1])
    got = results([(s, subj, half if s == seq else e) for s, subj, e in log], acked)
    assert got["no_partial_gang"] is False


def test_a_member_started_outside_its_gang_is_reported(run):
    log, acked = run
    seq, done = next((s, e) for s, _, e in log if isinstance(e, ev.GangCompleted))
    placed = next(
        e
        for _, _, e in log
        if isinstance(e, ev.GangPlaced) and e.allocation_id == done.allocation_id
    )
    node = placed.members[0].node  # its own node says so: a fact the fold accepts
    late = ev.MemberStarted(
        event_id="late",
        occurred_at_ms=done.occurred_at_ms + 1,
        correlation_id=done.job_id,
        producer=f"node-agent/{node}",
        job_id=done.job_id,
        allocation_id=done.allocation_id,
        rank=0,
        node=node,
    )
    got = results(insert_after(log, seq, late), acked)
    assert got["no_partial_gang"] is False and got["running_members_placed"] is False


def test_a_lost_job_is_reported(run):
    log, acked = run
    # an acknowledged submission missing from the log
    job = next(e for _, _, e in log if isinstance(e, ev.JobSubmitted)).job.job_id
    dropped = renumber(
        [
            (s, subj, e)
            for s, subj, e in log
            if not (isinstance(e, ev.JobSubmitted) and e.job.job_id == job)
        ]
    )
    assert results(dropped, {job: acked[job]})["no_lost_job"] is False
    # an acknowledged job that admission never decided
    undecided = renumber(
        [
            (s, subj, e)
            for s, subj, e in log
            if not (isinstance(e, (ev.JobAdmitted, ev.JobRejected)) and e.job_id == job)
        ]
    )
    new_acked = {e.job.job_id: s for s, _, e in undecided if isinstance(e, ev.JobSubmitted)}
    assert results(undecided, new_acked)["no_lost_job"] is False
    # and a job the client was told about at another sequence
    assert results(log, {job: acked[job] + 1})["no_lost_job"] is False


def test_a_running_job_without_an_allocation_is_reported(run):
    log, acked = run
    # cut the log right after a placement, then drop that placement's release of capacity:
    seq, placed = next((s, e) for s, _, e in log if isinstance(e, ev.GangPlaced))
    cut = [(s, subj, e) for s, subj, e in log if s <= seq]
    assert results(cut, {})["running_members_placed"] is True
    # a running job whose allocation the checker never saw hold anything
    evicted = ev.GangCompleted(
        event_id="x",
        occurred_at_ms=placed.occurred_at_ms,
        correlation_id=placed.job_id,
        producer="scheduler/0",
        job_id="someone-else",
        allocation_id=placed.allocation_id,
    )
    got = results(cut + [(seq + 1, ev.subject_for(evicted), evicted)], {})
    assert got["running_members_placed"] is False
