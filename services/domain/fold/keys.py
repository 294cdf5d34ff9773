"""Job keys: which job a tenant's name means. Job ids are per tenant: a job is kept under
the id its tenant submitted, or under `events.ids.tenant_job_key` when another tenant's job
(or unreadable first submission) already holds that id. Reads only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger.events.ids import (
    ARRAY_SEPARATOR,
    REPLICA_SEPARATOR,
    TENANT_KEY_SEPARATOR,
    tenant_job_key,
)
from gpuledger.services.domain.fold import arrays

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def job_key(ledger: LedgerState, tenant: str, name: str) -> str | None:
    """The key of `tenant`'s job named `name` (the id it submitted, or a task
    `<array>@<i>` or replica `<service>~<i>` of one), None when the tenant has no such
    job: another tenant's job of that id is no answer, so nothing a tenant asks reveals
    another tenant's ids. A key (`~~`) is no name. A task not released yet has a key but no
    record (`Ledger.job_record`)."""
    if TENANT_KEY_SEPARATOR in name:
        return None
    base, suffix = name, ""
    for sep in (ARRAY_SEPARATOR, REPLICA_SEPARATOR):
        head, found, index = name.rpartition(sep)
        if found and head and index.isdigit():
            base, suffix = head, sep + index
            break
    for key in (base, tenant_job_key(tenant, base)):
        rec = ledger.jobs.get(key)
        if rec is not None and rec.tenant == tenant and rec.name in (None, base):
            if rec.service is not None or rec.array_parent is not None:
                return None  # a task or replica is named through its job
            full = key + suffix
            got = ledger.jobs.get(full)
            if got is None and suffix.startswith(ARRAY_SEPARATOR):
                got = arrays.stand_in(ledger, full)  # a task not released (or dropped)
            return full if got is not None and got.tenant == tenant else None
    return None


def new_key(ledger: LedgerState, tenant: str, name: str) -> str:
    """The key of a new job of `tenant` named `name`: the id itself, unless another
    tenant's job (or unreadable first submission) holds it."""
    if name not in ledger.jobs and name not in ledger.intake.invalid_submissions:
        return name
    return tenant_job_key(tenant, name)


def filed_under(ledger: LedgerState, tenant: str, name: str) -> str:
    """The job a refused request or event of `tenant` naming `name` is filed under (admission's
    `RequestRefused.correlation_id`, the projection's `refusals.job_id`): the tenant's own job
    of that name, else `name` unless another tenant's job holds it as its key, else the tenant
    key of `name`. A request never lands under another tenant's job, whatever it names (a raw
    submission of `squat-1~~<digest>`, a cancel of another tenant's id)."""
    own = job_key(ledger, tenant, name)
    if own is not None:
        return own
    held = ledger.jobs.get(name)
    if held is None or held.tenant == tenant:
        return name
    return tenant_job_key(tenant, name)


def invalid_key(ledger: LedgerState, tenant: str, name: str) -> str | None:
    """The key of `tenant`'s unreadable first submission of `name`, if it has one."""
    for key in (name, tenant_job_key(tenant, name)):
        bad = ledger.intake.invalid_submissions.get(key)
        if bad is not None and bad.tenant == tenant:
            return key
    return None
