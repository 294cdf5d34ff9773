"""Phase `start_timeout`: an allocation with a member on a real node that has neither started
nor exited within `policy.start_timeout_s` of its binding is evicted (`StartTimeout`) and
requeued. Simulated agents start members at once: the simulator never waits."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import EndReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, Ledger
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.scheduler.phase import Phase
from gpuledger.services.scheduler.phases.endings import evict
from gpuledger.services.scheduler.round import bound_ms


def awaiting_start(state: Ledger) -> list[AllocationRecord]:
    """Active allocations with a member on a real node that has neither started nor exited."""
    out = []
    for alloc_id in sorted(state.awaiting_start):
        rec = state.allocations[alloc_id]
        if rec.preemption is None and any(
            not state.nodes[m.node].simulated
            and m.rank not in rec.started
            and m.rank not in rec.exited
            for m in rec.members
            if m.node in state.nodes
        ):
            out.append(rec)
    return out


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """Evict every run that did not start in time (unless its job is being cancelled)."""
    out: list[Event] = []
    timeout = state.config.policy.start_timeout_s * 1000
    if not timeout or not state.awaiting_start:
        return out
    for rec in awaiting_start(state):
        job = state.jobs[rec.job_id]
        if now_ms - bound_ms(rec) >= timeout and not job.cancel_requested:
            out += evict(svc, state, now_ms, rec, job, EndReason.StartTimeout, None, exited=False)
    return out


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """When a run waiting to start reaches the timeout."""
    timeout = state.config.policy.start_timeout_s * 1000
    if not timeout or not state.awaiting_start:
        return []
    return [bound_ms(rec) + timeout for rec in awaiting_start(state)]


PHASE = Phase(
    "start_timeout", run, wakeup, reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants")
)
