"""Phase `time_limits`: `TimeLimitReached` for every run whose time limit has come: its
members are asked to checkpoint and stopped after the grace. A run being preempted or
cancelled is left to that (its next run starts a fresh limit). Settling ends the run
(`endings.timed_out`) once its members exited."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events import catalog as ev
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.domain.tooling.timefmt import duration, instant
from gpuledger.services.scheduler.phase import Phase


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """`TimeLimitReached` for every run due now."""
    out: list[Event] = []
    for _at, alloc_id, _kind in state.time_limits.due(now_ms):
        rec = state.allocations.get(alloc_id)
        if rec is None or rec.ended or rec.time_limit is not None or rec.preemption:
            continue
        job = state.jobs[rec.job_id]
        if job.cancel_requested or job.time_limit_s is None:
            continue
        started = max(rec.started.values(), default=rec.placed_ms)
        grace = state.config.grace_ms(job.spec.checkpoint.grace_s, job.spec.priority_class)
        limit_ms = job.time_limit_s * 1000
        out.append(
            svc.emit(
                state,
                now_ms,
                ev.TimeLimitReached,
                key=alloc_id,
                correlation_id=job.job_id,
                job_id=job.job_id,
                allocation_id=alloc_id,
                time_limit_s=job.time_limit_s,
                started_ms=started,
                deadline_ms=now_ms + grace,
                message=(
                    f"ran {duration(now_ms - started)} since {instant(started)}, its time "
                    f"limit is {duration(limit_ms)}: asked to checkpoint, stopped at "
                    f"{instant(now_ms + grace)} (grace {duration(grace)})"
                ),
            )
        )
    return out


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """The next time limit to come."""
    limit = state.time_limits.next_after(now_ms)
    return [] if limit is None else [limit]


PHASE = Phase("time_limits", run, wakeup, reads=of(ADMITTED_JOBS, "allocations", "tenants"))
