"""The jobs fold: a job's life from submission to its end (admission, rejection, cancel,
withdrawal, the pending reason, placements and runs as they concern the job), with arrays
(services/domain/fold/arrays.py) and services (replicas.py) that run as child jobs.

Owns `jobs`, `submitted`, `pending`, `pending_dependent`, `quota.pending_gpu_milli`,
`nominations`, `sched.consolidations`, `agents.cancelling`, `queued_jobs` and the arrays'
windows (`open_arrays`, `released_tasks`, `fleet_gpus`) (with queue.py, keys.py, arrays.py,
replicas.py). The allocations fold changes a job through `placed`, `evicted` and
`run_over` (called from its handlers of `GangPlaced`, `GangEvicted`, `GangCompleted` and
`GangFailed`); `child_changed` keeps arrays' and services' counts after every event about a
task or replica.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from gpuledger import events as ev
from gpuledger.events import JobSpec
from gpuledger.events.ids import ARRAY_SEPARATOR, REPLICA_SEPARATOR, job_name
from gpuledger.events.reasons import EndReason, EvictReason, FoldRefusal, JobState, RequestReason
from gpuledger.services.domain.fold import arrays, holds, intake, keys, priorities, queue, replicas
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.records import (
    TERMINAL,
    AllocationRecord,
    JobRecord,
    PreemptionRecord,
)
from gpuledger.services.domain.fold.refusals import Refusal
from gpuledger.services.domain.policy import dependencies

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def submitted(ledger: LedgerState, e: ev.JobSubmitted) -> Refusal | None:
    job_id = e.job.job_id
    if REPLICA_SEPARATOR in job_id or ARRAY_SEPARATOR in job_id:
        # `~` names replicas, `@` array tasks: no record, the id stays theirs
        try:
            ev.validate_job_id(job_id)
        except ev.InvalidId as exc:  # (an unroutable id is admission's to reject)
            if exc.reason.startswith((repr(REPLICA_SEPARATOR), repr(ARRAY_SEPARATOR))):
                message = str(exc)
                intake.refuse(
                    ledger,
                    "JobSubmitted",
                    job_id,
                    e.job.tenant,
                    RequestReason.InvalidSpec,
                    message,
                    e.event_id,
                )
                return Refusal(FoldRefusal.InvalidSpec, message)
    tenant = e.job.tenant
    key = keys.job_key(ledger, tenant, job_id)  # ids are per tenant: only its own job matches
    first = ledger.jobs.get(key) if key is not None else None
    if first is not None:
        if e.job != first.client_spec:  # same content = a retry: first one wins, silently
            _refuse_conflict(ledger, e, first)
        return Refusal(FoldRefusal.DuplicateJob, f"job {job_id!r} was already submitted")
    invalid = keys.invalid_key(ledger, tenant, job_id)
    unreadable = ledger.intake.invalid_submissions.get(invalid) if invalid is not None else None
    if unreadable is not None:  # the id's first submission could not be read
        seq = unreadable.request_seq
        _refuse_taken(
            ledger, e, f"by an unreadable submission at seq {seq} (rejected, InvalidSpec)", seq
        )
        return Refusal(
            FoldRefusal.DuplicateJob, f"job id {job_id!r} is taken by an unreadable submission"
        )
    key = keys.new_key(ledger, tenant, job_id)
    ledger.jobs[key] = JobRecord(
        spec=e.job if key == job_id else msgspec.structs.replace(e.job, job_id=key),
        submitted_ms=e.occurred_at_ms,
        submit_event_id=e.event_id,
        submit_seq=ledger.folding_seq,
        desired_replicas=e.job.replicas if e.job.is_service else 0,
        name=None if key == job_id else job_id,
    )
    ledger.submitted.add(key)
    return None


def _refuse_conflict(ledger: LedgerState, e: ev.JobSubmitted, first: JobRecord) -> None:
    if first.unreadable:
        what = f"by a submission that was rejected ({first.reason})"
        diffs: list[str] = []
    else:
        diffs = spec_differences(first.client_spec, e.job)
        what = "by a submission with other content (" + "; ".join(diffs) + ")"
    seq = first.submit_seq
    _refuse_taken(ledger, e, f"{what} at seq {seq}", seq, differences=diffs)


def _refuse_taken(
    ledger: LedgerState, e: ev.JobSubmitted, by: str, seq: int, **details: Any
) -> None:
    """Refuse submission `e`: its job id is taken `by` the submission at `seq`."""
    job_id = e.job.job_id
    message = (
        f"job id {job_id!r} is already taken {by}; this submission was ignored: submit under "
        "a new job id"
    )
    conflict = RequestReason.JobIdConflict
    intake.refuse(
        ledger,
        "JobSubmitted",
        job_id,
        e.job.tenant,
        conflict,
        message,
        e.event_id,
        existing_seq=seq,
        **details,
    )


def spec_differences(old: JobSpec, new: JobSpec, limit: int = 5) -> list[str]:
    """Human lines `path: stored X, new Y` for the fields where two job specs differ (in
    field order, at most `limit`)."""
    out: list[str] = []
    _differences(ev.to_builtins(old), ev.to_builtins(new), "", out, limit)
    return out


def _differences(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    """`spec_differences` below `path` (a module function, not a recursive closure: that
    would be a reference cycle, and folds run with the cyclic collector paused)."""
    if len(out) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            _differences(a.get(k), b.get(k), f"{path}.{k}" if path else str(k), out, limit)
        return
    out.append(f"{path}: stored {a!r}, new {b!r}")


def admitted(ledger: LedgerState, e: ev.JobAdmitted) -> Refusal | None:
    job = ledger.jobs.get(e.job_id)
    if job is None or job.state != JobState.submitted:
        return not_in_state(e.job_id, job, "submitted")
    job.state = JobState.pending
    job.priority, job.preemptible, job.slo_class = e.priority, e.preemptible, e.slo_class
    job.admitted_ms = job.pending_since_ms = e.occurred_at_ms
    if e.time_limit_s is not msgspec.UNSET:
        job.time_limit_s = e.time_limit_s
    ledger.submitted.discard(e.job_id)
    if job.spec.is_service:  # the service runs as its replicas: they are queued
        replicas.reconcile(ledger, job, e.occurred_at_ms)  # pending until a replica is placed
        return None
    if job.spec.array:  # an array runs as its tasks: they are queued
        arrays.create_tasks(ledger, job, e.occurred_at_ms)
        return None
    queue.enqueue(ledger, e.job_id)
    return None


def rejected(ledger: LedgerState, e: ev.JobRejected) -> Refusal | None:
    invalid = intake.take_invalid(ledger, e.job_id)
    job = ledger.jobs.get(e.job_id)
    if job is None and invalid is not None:  # its only submission could not be read
        job = ledger.jobs[e.job_id] = JobRecord(
            spec=JobSpec(job_id=e.job_id, tenant=e.tenant),
            submitted_ms=e.occurred_at_ms,
            submit_event_id=invalid.cause,
            submit_seq=invalid.request_seq,
            unreadable=True,
            name=None if invalid.job_id == e.job_id else invalid.job_id,
        )
    if job is None or job.state != JobState.submitted:
        return not_in_state(e.job_id, job, "submitted")
    job.state = JobState.rejected
    job.reason, job.message, job.details = e.reason, e.message, e.details
    job.finished_ms = e.occurred_at_ms
    ledger.submitted.discard(e.job_id)
    return None


def cancelled(ledger: LedgerState, e: ev.JobCancelled) -> Refusal | None:
    key = keys.job_key(ledger, e.tenant, e.job_id)  # the tenant's own job of that id, or none
    job = ledger.jobs.get(key) if key is not None else None
    if job is None:
        message = f"no job {e.job_id!r} in tenant {e.tenant!r}: nothing to cancel"
        return intake.answer(ledger, e, RequestReason.UnknownJob, message)
    if job.state in TERMINAL:
        return not_in_state(e.job_id, job, "not finished")
    if job.service is not None:
        message = (
            f"{e.job_id!r} is replica {job.replica} of service {job_name(job.service)!r}: "
            "scale the service (or cancel it) instead"
        )
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    job.cancel_requested = True
    job.reason = e.reason
    if job.spec.array and job.state != JobState.submitted:  # its tasks stop; it ends after
        arrays.cancel_tasks(ledger, job, e.reason, e.occurred_at_ms)
        return None
    if job.spec.is_service:  # every replica stops; the service ends now
        job.state, job.finished_ms, job.desired_replicas = (
            JobState.cancelled,
            e.occurred_at_ms,
            0,
        )
        ledger.submitted.discard(job.job_id)
        replicas.reconcile(ledger, job, e.occurred_at_ms)
        return None
    if job.allocation_id is None:
        ledger.submitted.discard(job.job_id)
    queue.cancel(ledger, job, e.reason, e.occurred_at_ms)
    return None


def pending_reason(ledger: LedgerState, e: ev.PendingReasonChanged) -> Refusal | None:
    job = ledger.jobs.get(e.job_id)
    if job is None:
        return not_in_state(e.job_id, job, "known")
    job.reason, job.message, job.details = e.reason, e.message, e.details
    job.pending_changes += 1
    return None


def withdrawn(ledger: LedgerState, e: ev.JobWithdrawn) -> Refusal | None:
    job = ledger.jobs.get(e.job_id)
    if job is None or job.state != JobState.pending or job.service is not None:
        return not_in_state(e.job_id, job, "pending")
    job.state, job.finished_ms = JobState.cancelled, e.occurred_at_ms
    job.reason, job.message, job.details = e.reason, e.message, e.details
    queue.leave(ledger, e.job_id)
    return None


def requeued(ledger: LedgerState, e: ev.GangRequeued) -> None:
    job = ledger.jobs.get(e.job_id)
    if job is not None and job.state not in TERMINAL:
        job.resume_step = e.resume_step


def preemption_declined(ledger: LedgerState, e: ev.PreemptionDeclined) -> None:
    job = ledger.jobs.get(e.job_id)
    if job is not None:
        job.declined = e.reason


def consolidation_planned(ledger: LedgerState, e: ev.ConsolidationPlanned) -> Refusal | None:
    job = ledger.jobs.get(e.job_id)
    if job is None or job.state != JobState.pending:
        return not_in_state(e.job_id, job, "pending")
    queue.plan_consolidation(ledger, e)
    return None


# ---------------------------------------------------------------- a run, as the job sees it


def placed(ledger: LedgerState, job: JobRecord, e: ev.GangPlaced) -> None:
    """The job runs in allocation `e`: out of the queue, its wait banked."""
    job.state, job.allocation_id, job.reason, job.message, job.details = (
        JobState.running,
        e.allocation_id,
        None,
        "",
        {},
    )
    since = job.pending_since_ms
    if job.spec.depends_on:  # the wait counts from when its dependencies were met
        since = dependencies.queued_since_ms(ledger, job) or since
    job.waited_ms += max(0, e.occurred_at_ms - since)
    job.attempts += 1
    job.declined = None
    job.placements.append((e.occurred_at_ms, e.members))
    queue.leave(ledger, e.job_id)


def preempting(job: JobRecord) -> None:
    """The whole gang of the job's run is asked to leave (a preemption)."""
    job.state = JobState.preempting


def evicted(ledger: LedgerState, job: JobRecord, e: ev.GangEvicted, rec: AllocationRecord) -> None:
    """The job's run `rec` was evicted: cancelled if that was asked, else pending again."""
    job.progress_ms = e.progress_ms
    if e.reason == EvictReason.Cancelled or job.cancel_requested:
        job.state, job.finished_ms = JobState.cancelled, e.occurred_at_ms
        svc = ledger.jobs.get(job.service) if job.service is not None else None
        if svc is not None and svc.state not in TERMINAL:  # scaled up again meanwhile
            replicas.reconcile(ledger, svc, e.occurred_at_ms)
    else:  # requeued at once, so the order of GangEvicted/GangRequeued never matters
        job.state, job.pending_since_ms = JobState.pending, e.occurred_at_ms
        queue.enqueue(ledger, e.job_id)
        asked = rec.preemption.occurred_at_ms if rec.preemption else e.occurred_at_ms
        job.preemptions.append(_suffered(e, asked))


def shrunk(job: JobRecord, e: ev.GangResized) -> None:
    """The job's elastic gang shrank: members it lost count as a preemption it suffered."""
    job.preemptions.append(_suffered(e, e.occurred_at_ms))


def _suffered(e: ev.GangEvicted | ev.GangResized, at_ms: int) -> PreemptionRecord:
    return PreemptionRecord(
        at_ms, e.preempted_by, e.reason, e.allocation_id, e.checkpointed, e.lost_gpu_ms
    )


def run_over(ledger: LedgerState, e: ev.GangCompleted | ev.GangFailed) -> None:
    """The job's run ended: the job ends with it (unless it already had)."""
    job = ledger.jobs.get(e.job_id)
    if job is None or job.state in TERMINAL:
        return
    job.state, job.finished_ms = run_end_state(e), e.occurred_at_ms
    if isinstance(e, ev.GangFailed):
        job.reason, job.message = e.reason, e.message


def run_end_state(e: ev.GangCompleted | ev.GangFailed) -> JobState:
    """The state a run's end folds its job to (`completed`, `timeout` at its time limit,
    else `failed`), unless the job ended already; also the outcome of the run's allocation
    rows in the projection."""
    if isinstance(e, ev.GangCompleted):
        return JobState.completed
    return JobState.timeout if e.reason == EndReason.TimeLimit else JobState.failed


def child_changed(
    ledger: LedgerState, job: JobRecord, was_up: bool, was_over: bool, at_ms: int
) -> None:
    """After an event about task or replica `job` (its state before: placed `was_up`, ended
    `was_over`): its array's or service's counts and state follow it."""
    if job.array_parent is not None:
        arrays.task_changed(ledger, job, was_up, was_over, at_ms)
    if job.service is not None:
        replicas.replica_changed(ledger, job, was_up)


def not_in_state(job_id: str, job: JobRecord | None, wanted: str) -> Refusal:
    if job is None:
        return Refusal(FoldRefusal.UnknownJob, f"no job {job_id!r}")
    return Refusal(FoldRefusal.WrongState, f"job {job_id!r} is {job.state}, not {wanted}")


FOLD = Fold(
    name="jobs",
    owns=frozenset(
        {
            "jobs",
            "submitted",
            "pending",
            "pending_dependent",
            "quota.pending_gpu_milli",
            "nominations",
            "sched.consolidations",
            "agents.cancelling",
            "queued_jobs",
            "open_arrays",
            "released_tasks",
            "fleet_gpus",
        }
    ),
    handlers={
        ev.JobSubmitted: submitted,
        ev.JobAdmitted: admitted,
        ev.JobRejected: rejected,
        ev.JobCancelled: cancelled,
        ev.ServiceScaled: replicas.scaled,
        ev.JobHeld: holds.held,
        ev.JobReleased: holds.released,
        ev.JobPriorityChanged: priorities.changed,
        ev.JobMovedToTop: priorities.topped,
        ev.PendingReasonChanged: pending_reason,
        ev.JobWithdrawn: withdrawn,
        ev.GangRequeued: requeued,
        ev.PreemptionDeclined: preemption_declined,
        ev.ConsolidationPlanned: consolidation_planned,
    },
    modules=("jobs", "arrays", "task_order", "replicas", "queue", "keys", "holds", "priorities"),
)
