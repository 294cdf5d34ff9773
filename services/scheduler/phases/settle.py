"""Phase `settle`: allocations whose members have exited (or whose node was lost) end, by the
first rule of `SETTLE` that holds for them, in table order:

- `node_lost`: a member's node is lost: evicted (`NodeLost`) and requeued;
- `time_limit`: the run was stopped at its time limit: once every member exited, completed or
  failed (`TimeLimit`); the limit wins over a preemption, the run is over;
- `member_failed`: a member failed: `GangFailed` naming the first failed rank;
- `shrink`: members a partial preemption asked to leave have exited, others run: the elastic
  gang shrinks (`GangResized`);
- `preempted`: every member exited and the run was being preempted (or one was preempted):
  evicted with the preemption's reason and beneficiary, and requeued;
- `cancelled`: every member exited and the job was cancelled (or scaled down): evicted;
- `completed`: every member exited: `GangCompleted`.

A rule that holds may settle nothing yet (a time-limited run still running): later rules are
not tried for that allocation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuledger.events import Event, GangFailed
from gpuledger.events.reasons import EndReason, EvictReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.scheduler.phase import Phase
from gpuledger.services.scheduler.phases import endings

Settles = Callable[[LedgerService, Ledger, int, AllocationRecord, JobRecord], list[Event]]


@dataclass(frozen=True)
class SettleRule:
    """One way an allocation ends: when it `holds`, what it `settles` to."""

    name: str
    holds: Callable[[Ledger, AllocationRecord, JobRecord], bool]
    settles: Settles


def _outcomes(rec: AllocationRecord) -> set[str]:
    """The outcomes of the members not asked to leave."""
    leaving = rec.leaving() or ()
    return {o for r, (o, _) in rec.exited.items() if r not in leaving}


def _lost(state: Ledger, rec: AllocationRecord, job: JobRecord) -> bool:
    return any(state.nodes.get(n) is not None and state.nodes[n].lost for n in rec.nodes())


def _evict_lost(svc, state, now_ms, rec, job) -> list[Event]:
    return endings.evict(svc, state, now_ms, rec, job, EvictReason.NodeLost, None, exited=False)


def _timed_out(svc, state, now_ms, rec, job) -> list[Event]:
    return [endings.timed_out(svc, state, now_ms, rec, job)] if rec.all_exited() else []


def _failed(svc, state, now_ms, rec, job) -> list[Event]:
    rank = min(r for r, (o, _) in rec.exited.items() if o == "failed")
    return [
        endings.run_event(
            svc,
            state,
            now_ms,
            GangFailed,
            rec,
            job,
            reason=EndReason.MemberFailed,
            message=f"member rank {rank} failed",
        )
    ]


def _preempted(svc, state, now_ms, rec, job) -> list[Event]:
    p = rec.preemption
    reason = p.reason if p else EvictReason.Preempted
    by = (p.beneficiary or None) if p else None  # a requeue or drain frees it for nobody
    return endings.evict(svc, state, now_ms, rec, job, reason, by, exited=True)


def _cancelled(svc, state, now_ms, rec, job) -> list[Event]:
    why = (
        EvictReason.ScaledDown
        if job.service is not None and job.reason == EvictReason.ScaledDown
        else EvictReason.Cancelled
    )
    return endings.evict(svc, state, now_ms, rec, job, why, None, exited=True)


SETTLE: tuple[SettleRule, ...] = (
    SettleRule("node_lost", _lost, _evict_lost),
    SettleRule(
        "time_limit",
        lambda state, rec, job: rec.time_limit is not None and not job.cancel_requested,
        _timed_out,
    ),
    SettleRule(
        "member_failed",
        lambda state, rec, job: any(o == "failed" for o, _ in rec.exited.values()),
        _failed,
    ),
    SettleRule(
        "shrink",
        lambda state, rec, job: rec.leaving() is not None and not rec.all_exited(),
        lambda svc, state, now_ms, rec, job: [endings.shrunk(svc, state, now_ms, rec, job)],
    ),
    SettleRule(
        "preempted",
        lambda state, rec, job: (
            rec.all_exited()
            and (
                (rec.preemption is not None and not rec.leaving()) or "preempted" in _outcomes(rec)
            )
        ),
        _preempted,
    ),
    SettleRule(
        "cancelled",
        lambda state, rec, job: (
            rec.all_exited() and (job.cancel_requested or "cancelled" in _outcomes(rec))
        ),
        _cancelled,
    ),
    SettleRule(
        "completed",
        lambda state, rec, job: rec.all_exited(),
        lambda svc, state, now_ms, rec, job: [endings.completed(svc, state, now_ms, rec, job)],
    ),
)


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """Settle every allocation ready to, by its first rule that holds."""
    out: list[Event] = []
    for alloc_id in sorted(state.sched.settle_ready):
        rec = state.allocations[alloc_id]
        job = state.jobs[rec.job_id]
        rule = next((r for r in SETTLE if r.holds(state, rec, job)), None)
        if rule is not None:
            out += rule.settles(svc, state, now_ms, rec, job)
    return out


PHASE = Phase("settle", run, reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants"))
