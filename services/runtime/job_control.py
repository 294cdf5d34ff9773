"""What a client (the CLI's `hold` / `release` / `requeue` / `update` / `top`, and the HTTP
gateway's routes of the same verbs) does on the bus to control one job, and what came of it,
as a `client_requests.Outcome`. Nothing here prints or exits: both callers check their input
with `request_fields` and publish with `control_job`, so the rules live here once.

Like a cancel (services/runtime/client_requests.py): the request is published only for a
job its tenant has (else `unknown_job`, nothing published: the same answer whether another
tenant has the id or nobody has), and only when the admission service's answer about the job
says it can apply (else `refused`, with the reason, nothing published). Where no admission
service answers and the identity may read the log (the operator), the fold's refusal,
answered by admission later (`RequestRefused`, shown by `why`), is the only check. A user's
request (`as_user`: the gateway, for a user's token) about a colleague's job is answered at
once as the intake answers it, as an id nobody has (`UnknownJob`); it travels on the user's
own intake subject, where the intake holds it to that user.
"""

from __future__ import annotations

import time

from gpuledger import events as ev
from gpuledger.events.control import PRIORITY_MAX
from gpuledger.events.reasons import TERMINAL_STATES, JobState, RequestReason
from gpuledger.services.runtime.client_requests import (
    REFUSED,
    TIMEOUT,
    UNAVAILABLE,
    UNKNOWN_JOB,
    Outcome,
    ask_status,
    job_owner,
)

REQUESTED = "requested"
VERBS: dict[type, str] = {
    ev.JobHeld: "hold",
    ev.JobReleased: "release",
    ev.JobRequeued: "requeue",
    ev.JobPriorityChanged: "update",
    ev.JobMovedToTop: "top",
}
HOLDABLE = frozenset({JobState.submitted, JobState.pending})
MAX_REASON = 500


def request_fields(
    cls: type,
    reason: str = "",
    *,
    priority: int | None = None,
    nice: int | None = None,
    klass: str | None = None,
    flag: str = "--",
) -> dict[str, int | str | None]:
    """The event fields of a request `cls` from its input: the reason, and for a priority
    change exactly one of `priority` (0 to PRIORITY_MAX), `nice` (within +-PRIORITY_MAX) and
    `klass` (a subject token). ValueError, one line naming the input as `flag` + its name
    (`--priority` for the CLI, `priority` for a gateway body)."""
    from gpuledger.events.ids import validate_token

    if len(reason) > MAX_REASON:
        raise ValueError(f"{flag}reason: at most {MAX_REASON} characters")
    fields: dict[str, int | str | None] = {"reason": reason}
    if cls is not ev.JobPriorityChanged:
        return fields
    if sum(x is not None for x in (priority, nice, klass)) != 1:
        raise ValueError(f"give exactly one of {flag}priority, {flag}nice and {flag}class")
    if klass is not None:
        validate_token("priority class", klass)  # InvalidId is a ValueError
    if priority is not None and not 0 <= priority <= PRIORITY_MAX:
        raise ValueError(f"{flag}priority {priority}: out of range (0 to {PRIORITY_MAX})")
    if nice is not None and not -PRIORITY_MAX <= nice <= PRIORITY_MAX:
        raise ValueError(f"{flag}nice {nice}: out of range ({-PRIORITY_MAX} to {PRIORITY_MAX})")
    return {**fields, "priority": priority, "nice": nice, "priority_class": klass}


def actor_of(principal: str | None) -> str:
    """The actor a credential acts as: a tenant's CI identity, one of its users' (or the
    gateway) is the tenant,
    anything else that may publish job control (the operator's) is the operator."""
    return "tenant" if (principal or "").startswith(("ci:", "user:", "gateway")) else "operator"


def problem(cls: type, actor: str, st, fields: dict) -> str | None:
    """Why the request cannot apply to the job as the admission service sees it, or None."""
    check = _PROBLEMS.get(cls)
    if check is not None:
        return check(actor, st, fields)
    if st.held_by is None:
        return f"{st.job_id!r} is not held: nothing to {VERBS[cls]}"
    if st.held_by == "operator" and actor != "operator":
        return f"{st.job_id!r} is held by the operator: only the operator releases it"
    return None


def _top_problem(actor: str, st, fields: dict) -> str | None:
    if st.state != JobState.pending:
        return f"{st.job_id!r} is {st.state}: only a pending job can be moved to the top"
    return None


def _priority_problem(actor: str, st, fields: dict) -> str | None:
    """As the fold judges it (services/domain/fold/priorities.py), but a class's value and
    existence: the fold's (`RequestRefused`)."""
    if st.state in ("submitted", *TERMINAL_STATES):
        return f"{st.job_id!r} is {st.state}: only an admitted, unfinished job"
    if fields.get("priority_class") is not None:
        if st.state != JobState.pending:
            return (
                f"{st.job_id!r} is {st.state}: only a pending job's class can change "
                "(a placed job keeps the class it was placed under)"
            )
        return None
    base = st.class_priority if st.class_priority is not None else st.priority
    new = fields["priority"] if fields.get("priority") is not None else base - fields["nice"]
    if not 0 <= new <= PRIORITY_MAX:
        return f"priority {new} is out of range (0 to {PRIORITY_MAX})"
    if new > base and actor != "operator":
        return f"raising {st.job_id!r} above its class's {base} needs the operator"
    return None


def _requeue_problem(actor: str, st, fields: dict) -> str | None:
    if st.state != JobState.running:
        return f"{st.job_id!r} is {st.state}: only a running job can be requeued"
    return None


def _hold_problem(actor: str, st, fields: dict) -> str | None:
    if st.held_by is not None:
        return f"{st.job_id!r} is already held by {st.held_by}"
    if st.state not in HOLDABLE:
        return f"{st.job_id!r} is {st.state}: only a job not yet placed can be held"
    return None


_PROBLEMS = {
    ev.JobMovedToTop: _top_problem,
    ev.JobPriorityChanged: _priority_problem,
    ev.JobRequeued: _requeue_problem,
    ev.JobHeld: _hold_problem,
}
"""Per request, why it cannot apply; a release (anything else) is judged by `problem`."""


async def control_job(
    bus,
    cls: type,
    tenant: str | None,
    job_id: str,
    *,
    actor: str,
    reason: str = "",
    producer: str = "cli",
    read_log: bool = True,
    as_user: str | None = None,
    **fields: int | str | None,
) -> Outcome:
    """Publish a job control event `cls` (`JobHeld`, `JobReleased`, `JobRequeued`,
    `JobPriorityChanged` with its `fields`) for a job `tenant` has
    (None: whichever tenant submitted it): `requested`, `unknown_job` or `refused` (nothing
    published), `timeout`. With `as_user`, for that user's jobs only: a colleague's is
    `unknown_job`, and the request asks the intake on the user's subject."""
    from gpuledger.services.domain.tooling.stamp import stamp

    verb = VERBS[cls]
    try:
        owner = await job_owner(bus, tenant, job_id, read_log=read_log)
    except TimeoutError as exc:
        return Outcome(TIMEOUT, job_id, str(exc), 4, error=True)
    except LookupError:
        return Outcome(UNAVAILABLE, job_id, "no admission service answered", 3, error=True)
    where = "" if tenant is None else f" in tenant {tenant!r}"
    unknown = Outcome(
        UNKNOWN_JOB,
        job_id,
        f"no job {job_id!r}{where}: nothing was submitted under this id; "
        f"nothing to {verb} (UnknownJob)",
        1,
        reason=RequestReason.UnknownJob,
        error=True,
    )
    if owner is None or (tenant is not None and tenant != owner):
        return unknown
    st = await ask_status(bus, owner, job_id, wait_for_service=False)
    if as_user is not None and st is not None and st.known and st.spec is not None:
        if st.spec.submitter != as_user:
            return unknown  # a colleague's job: the intake's answer, an id nobody has
    why = None if st is None or not st.known else problem(cls, actor, st, fields)
    if why is not None:
        text = f"{why} (InvalidSpec)"
        return Outcome(REFUSED, job_id, text, 1, reason=RequestReason.InvalidSpec, error=True)
    now = time.time_ns() // 1_000_000
    event = stamp(
        cls,
        key=f"{owner}:{job_id}@{now}",  # ids are per tenant; a job may be held again later
        producer=producer,
        now_ms=now,
        correlation_id=job_id,
        job_id=job_id,
        tenant=owner,
        actor=actor,
        reason=reason,
        **fields,
    )
    from gpuledger.services.runtime.intake import IntakeError, IntakeRefused, publish_client_event

    try:
        seq = await publish_client_event(bus, event, as_user)  # a CI key asks the intake
    except IntakeRefused as exc:  # a per-user credential, another user's job: nothing stored
        return Outcome(
            UNKNOWN_JOB, job_id, f"{verb} refused: {exc}", 1, reason=exc.reason, error=True
        )
    except IntakeError as exc:  # nobody answered the intake
        return Outcome(UNAVAILABLE, job_id, f"{verb} not stored: {exc}", 3, error=True)
    return Outcome(REQUESTED, job_id, f"{verb} requested for {job_id}", 0, seq=seq)
