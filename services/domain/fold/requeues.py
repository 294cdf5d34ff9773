"""Part of the allocations fold: a requeue asked by a job's tenant or the operator
(`JobRequeued`, events/control.py) is the preemption path with reason `Requeue`.

The fold records it on the run's allocation as the stop request a preemption would
(`AllocationRecord.preemption`, a `PreemptionRequested` without a beneficiary, deadline = now
+ the job's grace), so every node agent checkpoints and stops the members by the one rule
(services/domain/policy/member_stop.py), and the scheduler settles the run as an eviction
with reason `Requeue`, then requeues the job (`GangEvicted`, `GangRequeued`). Nothing else is
nominated or preempted. The eviction counts as a requeue (`JobRecord.preemptions`, reason
`Requeue`), never against the eviction budget or aging (`policy.queue.NOT_SUFFERED`).

Refused (answered with `RequestRefused`): no such job of the tenant (`UnknownJob`); a job
that is not running, or whose run is already asked to stop (`InvalidSpec`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger import events as ev
from gpuledger.events.reasons import JobState, PreemptionReason, RequestReason
from gpuledger.services.domain.fold import intake
from gpuledger.services.domain.fold.refusals import Refusal
from gpuledger.services.domain.policy.member_stop import grace_ms

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import AllocationRecord, JobRecord, LedgerState


def stop_request(
    ledger: LedgerState, e: ev.JobRequeued
) -> tuple[AllocationRecord, JobRecord, ev.PreemptionRequested] | Refusal:
    """The running allocation and job `e` is about, and the stop request it stands for; or
    why it cannot apply (recorded for admission to answer)."""
    job = intake.own_job(ledger, e, "requeue")
    if isinstance(job, Refusal):
        return job
    rec = ledger.allocations.get(job.allocation_id) if job.allocation_id else None
    if job.state != JobState.running or rec is None or rec.ended or job.cancel_requested:
        message = f"{e.job_id!r} is {job.state}: only a running job can be requeued"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    if rec.preemption is not None or rec.time_limit is not None:
        message = f"{e.job_id!r} is already asked to stop: nothing to requeue"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    by = "the operator" if e.actor == "operator" else "its tenant"
    stop = ev.PreemptionRequested(
        event_id=e.event_id,
        occurred_at_ms=e.occurred_at_ms,
        causation_id=e.event_id,
        correlation_id=job.job_id,
        producer=e.producer,
        job_id=job.job_id,
        allocation_id=rec.allocation_id,
        beneficiary="",
        reason=PreemptionReason.Requeue,
        deadline_ms=e.occurred_at_ms + grace_ms(ledger, job),
        message=f"requeued by {by}" + (f": {e.reason}" if e.reason else ""),
    )
    return rec, job, stop
