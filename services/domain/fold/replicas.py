"""Services in the jobs fold: a service runs as its replicas (`<service>~<index>`), one-member
jobs created, queued and stopped to match the replicas it wants (`reconcile`, on admission,
`ServiceScaled` and cancel); the service is `running` while a replica is placed.

Part of the jobs aggregate (`jobs.FOLD`). Invariant: a service's `replicas_up` counts its
placed replicas (`replica_changed`, after every event about a replica).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpuledger import events as ev
from gpuledger.events import JobSpec
from gpuledger.events.ids import REPLICA_SEPARATOR
from gpuledger.events.reasons import EvictReason, JobState, RequestReason
from gpuledger.services.domain.fold import intake, keys, queue, tenants
from gpuledger.services.domain.fold.records import TERMINAL, UP, JobRecord, child_record
from gpuledger.services.domain.fold.refusals import Refusal

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def replica_id(service_id: str, index: int) -> str:
    """The job id of a service's replica: `<service>~<index>`."""
    return f"{service_id}{REPLICA_SEPARATOR}{index}"


def replica_spec(spec: JobSpec, index: int) -> JobSpec:
    """The spec of one replica of a service: a one-member job with the service's resources."""
    fields = {f: getattr(spec, f) for f in JobSpec.__struct_fields__}  # also of a read-only view
    fields.update(
        job_id=replica_id(spec.job_id, index),
        replicas=1,
        min_members=None,
        min_available=0,
        kind=msgspec.UNSET,
    )
    return JobSpec(**fields)


def scaled(ledger: LedgerState, e: ev.ServiceScaled) -> Refusal | None:
    tenants.note_fired(ledger, e)  # a time-of-day policy's replica change
    key = keys.job_key(ledger, e.tenant, e.job_id)
    svc = ledger.jobs.get(key) if key is not None else None
    if svc is None:
        message = f"no job {e.job_id!r} in tenant {e.tenant!r}: nothing to scale"
        return intake.answer(ledger, e, RequestReason.UnknownJob, message)
    problem = (
        "is not a service (submit it with kind: service)"
        if not svc.spec.is_service
        else f"is {svc.state}"
        if svc.state in TERMINAL
        else None
    )
    if problem is not None:
        message = f"job {e.job_id!r} {problem}: nothing to scale"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    svc.desired_replicas = e.replicas
    if svc.state != JobState.submitted:  # before admission: admission creates them
        reconcile(ledger, svc, e.occurred_at_ms)
    return None


def reconcile(ledger: LedgerState, svc: JobRecord, at_ms: int) -> None:
    """Make the service's replicas what it wants: replicas below `desired_replicas` exist
    and are queued (created, or a finished one queued again); those at and above it stop
    (a pending one at once, a placed one like a cancel, without requeue)."""
    for i in range(svc.desired_replicas):
        rid = replica_id(svc.job_id, i)
        rec = ledger.jobs.get(rid)
        if i >= svc.replicas_created:
            if rec is not None:  # the id is another job's: the replica cannot exist
                continue
            ledger.jobs[rid] = child_record(
                svc, replica_spec(svc.spec, i), at_ms, service=svc.job_id, replica=i
            )
            svc.replicas_created = i + 1
            queue.enqueue(ledger, rid)
        elif rec is not None and rec.service == svc.job_id and rec.state in TERMINAL:
            rec.state, rec.cancel_requested, rec.finished_ms = JobState.pending, False, None
            rec.reason, rec.message, rec.details = None, "", {}
            rec.pending_since_ms = at_ms
            queue.enqueue(ledger, rid)
    for i in range(svc.replicas_created - 1, svc.desired_replicas - 1, -1):  # highest first
        rec = ledger.jobs.get(replica_id(svc.job_id, i))
        if (
            rec is None
            or rec.service != svc.job_id
            or rec.state in TERMINAL
            or rec.cancel_requested
        ):
            continue
        queue.cancel(ledger, rec, EvictReason.ScaledDown, at_ms)


def replica_changed(ledger: LedgerState, replica: JobRecord, was_up: bool) -> None:
    """A service's count of placed replicas and state after an event about one of them."""
    if (replica.state in UP) == was_up or replica.service is None:
        return
    svc = ledger.jobs.get(replica.service)
    if svc is not None:
        svc.replicas_up += 1 if not was_up else -1
        service_state(svc)


def service_state(svc: JobRecord) -> None:
    """A service is `running` while at least one replica is placed, else `pending`
    (admitted, every replica waiting); submitted and terminal states are its own."""
    if svc.state not in TERMINAL and svc.state != JobState.submitted:
        svc.state = JobState.running if svc.replicas_up > 0 else JobState.pending


def replicas_of(ledger: LedgerState, service_id: str) -> list[JobRecord]:
    """The replica records of a service, by index (every one ever created)."""
    svc = ledger.jobs.get(service_id)
    if svc is None:
        return []
    ids = (replica_id(service_id, i) for i in range(svc.replicas_created))
    return [r for r in map(ledger.jobs.get, ids) if r is not None and r.service == service_id]
