"""The preemption service's drain pass: the runs on nodes the operator drains
(`NodeCordoned` with `drain`, events/control.py) are asked to checkpoint and leave.

Each active allocation with a member on a draining node, not already asked to stop, gets a
`PreemptionRequested` with reason `Drain` and no beneficiary (its job is requeued and placed
elsewhere: the `cordon` stage keeps it off the node) as soon as it may:

- at once with `force`, or once the drain's `deadline_ms` has passed;
- otherwise only preemptible work, once it has run `policy.min_runtime_s` (until then the
  drain waits for it, and asks for a wake-up when the minimum runtime lapses); non-preemptible
  work is left to finish (or to the deadline).

Pure: reads the ledger; the caller emits. One request per run (keyed by its allocation).
"""

from __future__ import annotations

from gpuledger.events import Event, PreemptionRequested
from gpuledger.events.reasons import PreemptionReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, Ledger
from gpuledger.services.domain.policy.member_stop import grace_ms
from gpuledger.services.domain.tooling.deciding import LedgerService


def draining(state: Ledger) -> list[str]:
    """The nodes being drained, by name."""
    nodes = state.nodes
    return [n for n in sorted(state.sched.cordoned) if (c := nodes[n].cordon) and c.drain]


def _may_leave_at(state: Ledger, rec: AllocationRecord, now_ms: int, node: str) -> int | None:
    """When the run may be drained (<= now_ms: now); None: not before the deadline."""
    cordon = state.nodes[node].cordon
    assert cordon is not None
    if cordon.force or (cordon.deadline_ms is not None and now_ms >= cordon.deadline_ms):
        return now_ms
    job = state.jobs.get(rec.job_id)
    if job is not None and not job.preemptible:
        return cordon.deadline_ms
    started = min(rec.started.values(), default=rec.placed_ms)
    after = started + state.config.policy.min_runtime_s * 1000
    if cordon.deadline_ms is not None:
        after = min(after, cordon.deadline_ms)
    return after


def _runs(state: Ledger) -> list[tuple[str, AllocationRecord]]:
    """(node, allocation) of every run on a draining node not yet asked to stop."""
    out, seen = [], set()
    for node in draining(state):
        for alloc_id in sorted(state.agents.node_allocations.get(node, ())):
            rec = state.allocations[alloc_id]
            if alloc_id in seen or rec.ended or rec.preemption is not None:
                continue
            seen.add(alloc_id)
            out.append((node, rec))
    return out


def requests(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """`PreemptionRequested` (reason `Drain`) for every run that may leave a draining node now."""
    out: list[Event] = []
    for node, rec in _runs(state):
        at = _may_leave_at(state, rec, now_ms, node)
        if at is None or at > now_ms:
            continue
        job = state.jobs.get(rec.job_id)
        out.append(
            svc.emit(
                state,
                now_ms,
                PreemptionRequested,
                key=f"{rec.allocation_id}:drain",
                correlation_id=rec.job_id,
                job_id=rec.job_id,
                allocation_id=rec.allocation_id,
                beneficiary="",
                reason=PreemptionReason.Drain,
                deadline_ms=now_ms + grace_ms(state, job),
                message=f"node {node} is being drained",
                details={"node": node},
            )
        )
    return out


def next_wakeup_ms(state: Ledger, now_ms: int) -> int | None:
    """When a waiting run on a draining node may leave (a minimum runtime or a deadline)."""
    if not state.sched.cordoned:
        return None
    times = [_may_leave_at(state, rec, now_ms, node) for node, rec in _runs(state)]
    return min((t for t in times if t is not None and t > now_ms), default=None)
