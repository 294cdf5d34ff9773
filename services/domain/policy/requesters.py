"""What the intake refuses from the folded state before it stores a client request
(services/runtime/intake.py): a submission over its tenant's or user's submit limits or past
its tenant's submit rate, and a per-user credential's request about a job that is not that
user's.

Pure: `refusal(state, event, user)` reads the `Ledger` of the admission service that
answers the request; `user` is the user a per-user credential's subject names (None for a
tenant's CI credential, which vouches for any user it names). Invariants: a user credential
acts on its own user's jobs only; what it is told about another user's job is word for word
what it is told about a job that does not exist (no oracle). The fold's admission stays the
judge of record: a request that passes here on a state that lags is still judged there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuledger import events as ev
from gpuledger.events.reasons import RejectReason, RequestReason
from gpuledger.services.domain.policy import submit_limits
from gpuledger.services.domain.policy.submit_rate import SubmitRate


@dataclass(frozen=True)
class Refused:
    """A request the intake refuses: its reason code and one line."""

    reason: str
    message: str


def submitted_as(event: ev.JobSubmitted, user: str) -> Refused | None:
    """A per-user credential submits as its own user only: the job must name exactly it."""
    named = event.job.user if isinstance(event.job.user, str) else None
    if named == user:
        return None
    what = f"names user {named}" if named else "names no user"
    return Refused(
        RequestReason.NotYourUser,
        f"the credential of user {user} submits as {user} only; this job {what}",
    )


def refusal(
    state: Any,
    event: ev.Event,
    user: str | None,
    rates: SubmitRate | None = None,
    now_ms: int = 0,
) -> Refused | None:
    """Why the intake refuses `event` on the folded `state` (a `Ledger`), or None. With
    `rates` (the intake's buckets, services/domain/policy/submit_rate.py), a submission that
    passes every other rule also takes one of its tenant's submissions at `now_ms`."""
    if isinstance(event, ev.JobSubmitted):
        if user is not None and (wrong := submitted_as(event, user)) is not None:
            return wrong
        tenant = state.config.tenants.get(event.job.tenant)
        if tenant is None:  # admission rejects it (UnknownTenant), with its own words
            return None
        counts = submit_limits.live_counts(state, event.job)
        over = submit_limits.problem(tenant, event.job, counts)
        if over is None and rates is not None:
            over = rates.take(tenant, now_ms)
        return None if over is None else Refused(RejectReason.SubmitLimit, over.message)
    if user is None:
        return None
    tenant, name = event.tenant, event.job_id  # type: ignore[attr-defined]  # every client event but a submission names them
    key = state.job_key(tenant, name)
    job = state.jobs.get(key) if key is not None else None
    if job is None or job.spec.user != user:
        return Refused(
            RequestReason.UnknownJob, f"no job {name!r} of user {user} in tenant {tenant}"
        )
    return None
