"""A job's status as its own tenant may see it: the answer to a job status query.

Tenant CI identities cannot read the log (it holds every tenant's jobs); they ask
`glq.job.<tenant>.<job>` instead, and the admission service answers from its folded ledger.
Job ids are per tenant: a tenant names its jobs by the ids it submitted, and another
tenant's job of the same id is answered exactly like a job nobody submitted (`known:
false`), so a query reveals nothing about other tenants. Pure: reads the ledger, never writes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import msgspec

from gpuledger.events.ids import without_keys
from gpuledger.events.specs import JobSpec

if TYPE_CHECKING:  # the ledger is only read: importing its module is the caller's business
    from gpuledger.services.domain.fold.ledger import Ledger

QUERY_PREFIX = "glq.job"
"""Job status queries (request/reply, outside the `gl.>` stream): `glq.job.<tenant>.<job>`."""
QUERY_SUBJECTS = f"{QUERY_PREFIX}.*.*"


class JobStatus(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The answer to a status query (JSON; every field documented, a public contract)."""

    job_id: str
    """The job id asked about."""
    tenant: str
    """The tenant asked for (the subject's)."""
    folded_seq: int
    """Last stream sequence the answering service had folded: a client that published at
    sequence S waits until an answer has `folded_seq >= S` before trusting `known: false`."""
    known: bool = False
    """The tenant has a job of this id (false for a job of another tenant)."""
    state: str | None = None
    """The job's state (`submitted`, `pending`, `running`, `preempting`, `completed`,
    `failed`, `rejected`, `cancelled`)."""
    reason: str | None = None
    """Its current CamelCase reason (pending or rejection reason), if any."""
    message: str = ""
    """The quantitative message that goes with `reason`."""
    priority: int | None = None
    """Resolved priority, once admitted."""
    submit_seq: int | None = None
    """Stream sequence of the submission that created the job."""
    submit_event_id: str | None = None
    """Event id of that submission (a retry of the same content carries the same id)."""
    spec: JobSpec | None = None
    """The job as submitted (for a client comparing a retried submission)."""
    class_priority: int | None = None
    """The priority admission gave, where a priority change changed it since."""
    held_by: str | None = None
    """Who holds the job (`tenant` or `operator`, `gpuledger hold`); None when not held."""
    priority_class: str | None = None
    """The class in force, where `gpuledger update --class` changed it since submission."""


def parse_subject(subject: str) -> tuple[str, str] | None:
    """`(tenant, job_id)` of a query subject, or None if it is not one."""
    parts = subject.split(".")
    if len(parts) != 4 or f"{parts[0]}.{parts[1]}" != QUERY_PREFIX:
        return None
    return parts[2], parts[3]


def job_status(ledger: Ledger, tenant: str, job_id: str) -> JobStatus:
    """What `tenant` may know of its job `job_id` in `ledger`."""
    key = ledger.job_key(tenant, job_id)  # ids are per tenant: only its own job answers
    job = ledger.jobs.get(key) if key is not None else None
    if job is None:
        return JobStatus(job_id, tenant, ledger.last_seq)
    admitted = job.admitted_ms is not None
    return JobStatus(
        job_id,
        tenant,
        ledger.last_seq,
        known=True,
        state=str(job.state),
        reason=job.reason,
        message=without_keys(job.message),  # decisions name the job by its key
        priority=job.priority if admitted else None,
        submit_seq=job.submit_seq,
        submit_event_id=job.submit_event_id,
        spec=None if job.unreadable else job.client_spec,
        held_by=None if job.hold is None else job.hold.actor,
        class_priority=job.class_priority,
        priority_class=None if job.submitted_class is None else job.spec.priority_class,
    )


def answer(ledger: Ledger, subject: str) -> bytes:
    """The JSON reply to a query on `subject` (an error object for a malformed subject)."""
    target = parse_subject(subject)
    if target is None:
        return msgspec.json.encode({"error": f"not a job status subject: {subject[:200]!r}"})
    return msgspec.json.encode(job_status(ledger, *target))


def decode(data: bytes) -> JobStatus | dict[str, Any]:
    """A reply as a JobStatus (or the error object the service sent)."""
    if data.startswith(b'{"error"'):
        return cast(dict[str, Any], msgspec.json.decode(data))
    return msgspec.json.decode(data, type=JobStatus)
