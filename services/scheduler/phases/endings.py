"""How a run ends, shared by the settling phases: eviction (with its requeue), the shrink of
an elastic gang whose leaving members exited, and the end of a run stopped at its time limit.
Each builds the events from the allocation's record; none decides whether it applies."""

from __future__ import annotations

from typing import Any

from gpuledger.events import (
    Event,
    GangCompleted,
    GangEvicted,
    GangFailed,
    GangRequeued,
    GangResized,
)
from gpuledger.events.reasons import EndReason, EvictReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.fold.progress import work_outcome
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.timefmt import duration, instant


def run_event(
    svc: LedgerService,
    state: Ledger,
    now_ms: int,
    cls: type[Event],
    rec: AllocationRecord,
    job: JobRecord,
    **fields: Any,
) -> Event:
    """An event about the run `rec` of `job`, keyed by its allocation (one per run)."""
    return svc.emit(
        state,
        now_ms,
        cls,
        key=rec.allocation_id,
        correlation_id=job.job_id,
        job_id=job.job_id,
        allocation_id=rec.allocation_id,
        **fields,
    )


def evict(
    svc: LedgerService,
    state: Ledger,
    now_ms: int,
    rec: AllocationRecord,
    job: JobRecord,
    reason: str,
    by: str | None,
    *,
    exited: bool,
) -> list[Event]:
    """`GangEvicted` with the work saved and lost, then `GangRequeued` unless the job is
    cancelled or scaled down. Not `exited`: the node was lost, its members vanished with it,
    and only periodic checkpoints survive."""
    if exited:
        work = work_outcome(rec, job.spec.checkpoint)
        checkpointed = work.checkpointed
    else:
        done = {r: (o, now_ms) for r, (o, _) in rec.exited.items()}
        snapshot = AllocationRecord(
            **{
                **rec.__dict__,
                "exited": {m.rank: done.get(m.rank, ("lost", now_ms)) for m in rec.members},
            }
        )
        work = work_outcome(snapshot, job.spec.checkpoint)
        checkpointed = False
    progress, lost, step = work.progress_ms, work.lost_gpu_ms, work.resume_step
    if reason == EvictReason.ScaledDown:  # a service replica holds no work to lose
        checkpointed, lost = False, 0
    out: list[Event] = [
        run_event(
            svc,
            state,
            now_ms,
            GangEvicted,
            rec,
            job,
            reason=reason,
            preempted_by=by,
            checkpointed=checkpointed,
            lost_gpu_ms=lost,
            progress_ms=progress,
        )
    ]
    if not job.cancel_requested and reason not in (EvictReason.Cancelled, EvictReason.ScaledDown):
        out.append(
            svc.emit(
                state,
                now_ms,
                GangRequeued,
                key=rec.allocation_id,
                correlation_id=job.job_id,
                job_id=job.job_id,
                after_allocation_id=rec.allocation_id,
                resume_step=step if step is not None else job.resume_step,
            )
        )
    return out


def shrunk(
    svc: LedgerService, state: Ledger, now_ms: int, rec: AllocationRecord, job: JobRecord
) -> Event:
    """The members a partial preemption asked to leave have all exited: the elastic gang
    runs on with the others (`GangResized`), the work the leavers lost counted."""
    leaving = rec.leaving() or ()
    gone = tuple(m for m in rec.members if m.rank in leaving)
    kept = tuple(m for m in rec.members if m.rank not in leaving)
    per_member = rec.gpu_milli // len(rec.members)
    part = AllocationRecord(
        **{
            **rec.__dict__,
            "members": gone,
            "gpu_milli": per_member * len(gone),
            "started": {r: t for r, t in rec.started.items() if r in leaving},
            "exited": {r: x for r, x in rec.exited.items() if r in leaving},
            "checkpoints": {r: c for r, c in rec.checkpoints.items() if r in leaving},
        }
    )
    work = work_outcome(part, job.spec.checkpoint)
    p = rec.preemption
    return svc.emit(
        state,
        now_ms,
        GangResized,
        key=f"{rec.allocation_id}:{len(rec.members)}-{len(kept)}:{p.event_id if p else ''}",
        correlation_id=job.job_id,
        job_id=job.job_id,
        allocation_id=rec.allocation_id,
        members=kept,
        from_members=len(rec.members),
        to_members=len(kept),
        reason=p.reason if p is not None else EvictReason.Preempted,
        preempted_by=p.beneficiary if p is not None else None,
        checkpointed=work.checkpointed,
        lost_gpu_ms=work.lost_gpu_ms,
    )


def completed(
    svc: LedgerService, state: Ledger, now_ms: int, rec: AllocationRecord, job: JobRecord
) -> Event:
    """`GangCompleted`: every member of the run is done."""
    return run_event(svc, state, now_ms, GangCompleted, rec, job)


def timed_out(
    svc: LedgerService, state: Ledger, now_ms: int, rec: AllocationRecord, job: JobRecord
) -> Event:
    """The end of a run stopped at its time limit: `GangCompleted` if every member still
    completed within the grace, else `GangFailed` (`TimeLimit`; the job ends `timeout`)
    with the work saved and lost."""
    if all(o == "completed" for o, _ in rec.exited.values()):
        return completed(svc, state, now_ms, rec, job)
    work = work_outcome(rec, job.spec.checkpoint)
    limit = rec.time_limit
    assert limit is not None
    saved = (
        f"checkpointed at step {work.resume_step}"
        if work.checkpointed
        else f"no checkpoint in time: {work.lost_gpu_ms / 3_600_000:.2f} GPU-h lost"
    )
    return run_event(
        svc,
        state,
        now_ms,
        GangFailed,
        rec,
        job,
        reason=EndReason.TimeLimit,
        message=(
            f"time limit {duration(limit.time_limit_s * 1000)} reached at "
            f"{instant(limit.occurred_at_ms)}; {saved}"
        ),
    )
