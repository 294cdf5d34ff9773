"""Part of the jobs fold: holds (`JobHeld`, `JobReleased`; events/control.py).

A hold keeps a job that has not been placed (submitted or pending) out of placement: the
job keeps its state, and its capacity leaves the tenant's pending demand
(`quota.pending_gpu_milli`, read by fair share and reclaim) until it is released; the
scheduler's `held` stage gives it the reason `Held`. A release puts it back as it was (same
submit time and priority). What cannot apply is refused and answered (`RequestRefused`):
no such job of the tenant (`UnknownJob`), a job placed or finished, one already held, an
array or service (its tasks are held one by one), a
release of a job not held or a tenant's release of the operator's hold (`InvalidSpec`).
Invariant: `quota.pending_gpu_milli` counts exactly the pending jobs without a hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger import events as ev
from gpuledger.events.reasons import JobState, RequestReason
from gpuledger.services.domain.fold import intake
from gpuledger.services.domain.fold.records import HoldRecord
from gpuledger.services.domain.fold.refusals import Refusal

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import JobRecord, LedgerState

HOLDABLE = frozenset({JobState.submitted, JobState.pending})
"""States a job may be held in (not yet placed)."""


def held(ledger: LedgerState, e: ev.JobHeld) -> Refusal | None:
    job = intake.own_job(ledger, e, "hold")
    if isinstance(job, Refusal):
        return job
    if job.hold is not None:
        message = f"{e.job_id!r} is already held by {job.hold.actor}"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    if job.spec.array or job.spec.is_service or job.service is not None:
        message = f"{e.job_id!r} is an array or a service: hold its tasks (`ID@N`) one by one"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    if job.state not in HOLDABLE or job.cancel_requested:
        message = f"{e.job_id!r} is {job.state}: only a job not yet placed can be held"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    set_demand(ledger, job, counted=False)
    job.hold = HoldRecord(e.actor, e.reason, e.occurred_at_ms)
    if job.state == JobState.pending:  # its last reason (a blocking one) no longer stands
        job.reason, job.message = None, ""
    return None


def released(ledger: LedgerState, e: ev.JobReleased) -> Refusal | None:
    job = intake.own_job(ledger, e, "release")
    if isinstance(job, Refusal):
        return job
    if job.hold is None:
        message = f"{e.job_id!r} is not held: nothing to release"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    if job.hold.actor != e.actor and e.actor != "operator":
        message = f"{e.job_id!r} is held by the operator: only the operator releases it"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    job.hold = None
    set_demand(ledger, job, counted=True)
    return None


def set_demand(ledger: LedgerState, job: JobRecord, *, counted: bool) -> None:
    """Count (or stop counting) a queued job's capacity in its tenant's pending demand."""
    if job.job_id not in ledger.pending:
        return
    sign = 1 if counted else -1
    waiting = ledger.quota.pending_gpu_milli
    waiting[job.tenant] = waiting.get(job.tenant, 0) + sign * job.gpu_milli()
