"""The jobs fold's indexes: the queue of pending jobs (and the capacity each tenant's pending
jobs wait for), the nominations made to a job, and the active allocations of cancelled jobs;
with the writes other folds make to jobs through it (a run's cancel, a class's
preemptibility, a creation admission undid).

Part of the jobs aggregate (`jobs.FOLD`). Invariant: `pending` holds exactly the jobs in state
`pending`, `quota.pending_gpu_milli` their capacity per tenant (a held job's none), `pending_dependent` those of
them that name dependencies, `queued_jobs` their count per tenant and user (`queued_jobs` and
`quota.pending_gpu_milli` also count arrays' unreleased tasks: `count_unreleased`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger import events as ev
from gpuledger.events.reasons import TERMINAL_STATES, JobState
from gpuledger.services.domain.fold.records import tally_keys

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import JobRecord, LedgerState


def enqueue(ledger: LedgerState, job_id: str) -> None:
    if job_id not in ledger.pending:
        ledger.pending.add(job_id)
        job = ledger.jobs[job_id]
        if job.spec.depends_on:
            ledger.pending_dependent.add(job_id)
        ledger.quota.pending_gpu_milli[job.tenant] = ledger.quota.pending_gpu_milli.get(
            job.tenant, 0
        ) + demand(job)
        for key in tally_keys(job):
            ledger.queued_jobs[key] = ledger.queued_jobs.get(key, 0) + 1


def dequeue(ledger: LedgerState, job_id: str) -> None:
    if job_id in ledger.pending:
        ledger.pending.discard(job_id)
        ledger.pending_dependent.discard(job_id)
        job = ledger.jobs[job_id]
        ledger.quota.pending_gpu_milli[job.tenant] -= demand(job)
        for key in tally_keys(job):
            ledger.queued_jobs[key] -= 1


def demand(job: JobRecord) -> int:
    """What a queued job asks of its tenant's capacity: nothing while it is held."""
    return 0 if job.hold is not None else job.gpu_milli()


def nominate(ledger: LedgerState, beneficiary: str, allocation_id: str) -> None:
    """The capacity `allocation_id` gives up (preempted) is promised to `beneficiary`."""
    ledger.nominations.setdefault(beneficiary, set()).add(allocation_id)


def plan_consolidation(ledger: LedgerState, plan: ev.ConsolidationPlanned) -> None:
    """A consolidation is under way for `plan.job_id` (until its nomination ends)."""
    ledger.sched.consolidations[plan.job_id] = plan


def end_nomination(ledger: LedgerState, job_id: str) -> None:
    ledger.nominations.pop(job_id, None)
    ledger.sched.consolidations.pop(job_id, None)


def leave(ledger: LedgerState, job_id: str) -> None:
    """The job no longer waits (placed or ended): out of the queue, its nominations lapse."""
    dequeue(ledger, job_id)
    end_nomination(ledger, job_id)


def cancel(ledger: LedgerState, job: JobRecord, reason: str, at_ms: int) -> None:
    """Stop `job` for `reason`: a placed one when its run ends (its allocation is marked
    cancelling for its node agents), an unplaced one now."""
    job.cancel_requested, job.reason = True, reason
    if job.allocation_id is not None:
        ledger.agents.cancelling.add(job.allocation_id)
    else:
        job.state, job.finished_ms = JobState.cancelled, at_ms
        leave(ledger, job.job_id)


def run_ended(ledger: LedgerState, allocation_id: str, job_id: str) -> None:
    """Allocation `allocation_id` of `job_id` ended: no longer one to cancel, nor the job's."""
    ledger.agents.cancelling.discard(allocation_id)
    job = ledger.jobs.get(job_id)
    if job is not None and job.allocation_id == allocation_id:
        job.allocation_id = None


def forget(ledger: LedgerState, key: str) -> None:
    """Undo the creation of job `key` (still submitted): it never existed."""
    del ledger.jobs[key]
    ledger.submitted.discard(key)


def class_preemptibility(ledger: LedgerState, name: str, preemptible: bool) -> None:
    """A class whose preemptibility changed (a schedule, or an operator): work of it that
    has not started (pending jobs and replicas, services' later replicas) takes the new
    value; what runs keeps the one it was placed with."""
    for job_id in sorted(ledger.pending):
        job = ledger.jobs[job_id]
        if job.spec.priority_class == name:
            job.preemptible = preemptible
    for job in ledger.jobs.values():
        if job.spec.is_service and job.state not in TERMINAL_STATES:
            if job.spec.priority_class == name:
                job.preemptible = preemptible
    for array_id in sorted(ledger.open_arrays):  # its unreleased tasks are pending
        job = ledger.jobs[array_id]
        if job.spec.priority_class == name:
            job.preemptible = preemptible


def count_unreleased(ledger: LedgerState, parent: JobRecord, n: int) -> None:
    """`n` more (or, negative, fewer) unreleased tasks of array `parent` wait: they count in
    its tenant's queued jobs and pending capacity as released pending tasks do."""
    ledger.quota.pending_gpu_milli[parent.tenant] = (
        ledger.quota.pending_gpu_milli.get(parent.tenant, 0) + n * parent.gpu_milli()
    )
    for key in tally_keys(parent):
        ledger.queued_jobs[key] = ledger.queued_jobs.get(key, 0) + n
