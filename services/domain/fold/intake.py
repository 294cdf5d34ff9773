"""The intake fold: the acceptance step every event passes before its aggregate folds it
(producer role, leader epoch, a quota role's change a schedule must explain), and the client
requests waiting for admission's answer (refused requests, unreadable first submissions,
dead letters).

Owns `last_seq`, `folding_seq` and `intake` (leader epochs, stale decisions, dead letters,
refusals, invalid submissions). Other folds record a request to refuse through `refuse`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from gpuledger import events as ev
from gpuledger.events.ids import tenant_job_key
from gpuledger.events.reasons import FoldRefusal, JobState, RequestReason
from gpuledger.events.subjects import producer_problem, role_of, scheduled_by_quota
from gpuledger.services.domain.fold import keys, queue, tenants
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.records import RequestRefusal
from gpuledger.services.domain.fold.refusals import Refusal, Refused

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import JobRecord, LedgerState

    Control = (
        ev.JobHeld | ev.JobReleased | ev.JobRequeued | ev.JobPriorityChanged | ev.JobMovedToTop
    )


def accept(ledger: LedgerState, seq: int, event: ev.Event) -> Refusal | None:
    """The acceptance step (services/domain/fold/acceptance.py) before `event` at `seq` is
    folded: None to fold it, else why it changes nothing. A decision or node fact whose
    producer is not of the role that produces its type raises `Refused` (`WrongProducer`);
    a decision of an older leader epoch than one seen for its role is `StaleLeaderEpoch`; a
    quota role's change no schedule in force explains is `NotScheduled`."""
    if seq > ledger.last_seq:
        ledger.last_seq = seq
    ledger.folding_seq = seq
    wrong = producer_problem(event)
    if wrong is not None:  # a forgery or a bug: raised, so the host dead-letters it
        raise Refused(FoldRefusal.WrongProducer, wrong)
    if getattr(event, "leader_epoch", 0) and isinstance(event, ev.Decision):
        role = role_of(type(event)) or event.producer.partition("/")[0]
        seen = ledger.intake.leader_epochs.get(role, 0)
        if event.leader_epoch < seen:
            ledger.intake.stale_decisions += 1
            return Refusal(
                FoldRefusal.StaleLeaderEpoch,
                f"{role} decision of epoch {event.leader_epoch}; epoch {seen} already decided",
            )
        ledger.intake.leader_epochs[role] = event.leader_epoch
    if scheduled_by_quota(event):
        return tenants.not_scheduled(
            ledger,
            cast("ev.TenantConfigured | ev.PriorityClassConfigured | ev.ServiceScaled", event),
        )
    return None


def refuse(
    ledger: LedgerState,
    request: str,
    job_id: str,
    tenant: str,
    reason: str,
    message: str,
    cause: str = "",
    **details: Any,
) -> None:
    """Record a client request to refuse; one whose ids cannot name a subject is only
    dead-lettered (an answer could not be published)."""
    try:
        ev.validate_token("job id", job_id)
        ev.validate_tenant(tenant)
    except ev.InvalidId:
        return
    seq = ledger.folding_seq
    ledger.intake.refusals[seq] = RequestRefusal(
        seq, request, job_id, tenant, reason, message, details, cause
    )


def answer(
    ledger: LedgerState,
    e: ev.JobCancelled | ev.ServiceScaled | Control,
    reason: RequestReason,
    message: str,
) -> Refusal:
    """Refuse a tenant's cancel, scale or job control request `e` for `reason` (recorded for admission
    to answer, `refuse`); the fold's refusal says the same (`UnknownJob` or `InvalidSpec`)."""
    refuse(ledger, type(e).__name__, e.job_id, e.tenant, reason, message, e.event_id)
    code = FoldRefusal.UnknownJob if reason == RequestReason.UnknownJob else FoldRefusal.InvalidSpec
    return Refusal(code, message)


def own_job(ledger: LedgerState, e: Control, verb: str) -> JobRecord | Refusal:
    """The tenant's own job a job control request `e` names (events/control.py), or its
    `UnknownJob` refusal: the same answer whether another tenant has the id or nobody has."""
    key = keys.job_key(ledger, e.tenant, e.job_id)
    job = ledger.jobs.get(key) if key is not None else None
    if job is None or job.unreadable:
        message = f"no job {e.job_id!r} in tenant {e.tenant!r}: nothing to {verb}"
        return answer(ledger, e, RequestReason.UnknownJob, message)
    return job


def take_invalid(ledger: LedgerState, key: str) -> RequestRefusal | None:
    """Admission answered the unreadable first submission kept under `key` (`JobRejected`)."""
    return ledger.intake.invalid_submissions.pop(key, None)


def dead(ledger: LedgerState, e: ev.DeadLettered) -> None:
    """A dead-lettered client message whose subject names a valid tenant and job id is
    answered: the unreadable first submission of a job id is rejected (`InvalidSpec`),
    anything else for that id is refused."""
    ledger.intake.dead_letters += 1
    target = ev.subjects.client_target(e.subject)
    if target is None:
        return
    kind, tenant, job_id = target
    request = {"submit": "JobSubmitted", "cancel": "JobCancelled"}.get(kind, "ServiceScaled")
    problem = f"could not be decoded or applied: {e.reason}"
    refusal = RequestRefusal(
        e.stream_seq,
        request,
        job_id,
        tenant,
        RequestReason.InvalidSpec,
        f"the {kind} message at seq {e.stream_seq} {problem}",
        {"stream_seq": e.stream_seq, "payload_head": e.payload_head},
        e.event_id,
    )
    if (
        kind == "submit"
        and keys.job_key(ledger, tenant, job_id) is None
        and keys.invalid_key(ledger, tenant, job_id) is None
    ):  # the tenant's first submission of the id
        ledger.intake.invalid_submissions[keys.new_key(ledger, tenant, job_id)] = refusal
    elif e.stream_seq not in ledger.intake.refusals:
        ledger.intake.refusals[e.stream_seq] = refusal


def request_refused(ledger: LedgerState, e: ev.RequestRefused) -> None:
    ledger.intake.refusals.pop(e.request_seq, None)
    undone = refused_creation(ledger, e)
    if undone is not None:
        queue.forget(ledger, undone)


def refused_creation(ledger: LedgerState, e: ev.RequestRefused) -> str | None:
    """The key of the job that `e` says was never created, else None. A log written while
    job ids were global holds, for a submission of another tenant's id, admission's
    `RequestRefused` (`JobIdConflict`): that submission created no job then, so the job
    its fold creates now (under its tenant key, still unanswered) is undone, and such a
    log folds as it did. Admission never refuses a tenant's first submission of an id
    now, so nothing else matches."""
    if e.request != "JobSubmitted" or e.reason != RequestReason.JobIdConflict:
        return None
    key = tenant_job_key(e.tenant, e.job_id)
    job = ledger.jobs.get(key)
    if (
        job is None
        or job.tenant != e.tenant
        or job.submit_seq != e.request_seq
        or job.state != JobState.submitted
    ):
        return None
    return key


FOLD = Fold(
    name="intake",
    owns=frozenset({"last_seq", "folding_seq", "intake"}),
    handlers={ev.DeadLettered: dead, ev.RequestRefused: request_refused},
    modules=("intake",),
)
