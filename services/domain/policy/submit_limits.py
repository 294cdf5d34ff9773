"""Submit limits: whether a tenant, and the user inside it, may have one more submission
queued (issues 43 and 44; Slurm `MaxSubmitJobs`, `MaxSubmitJobsPerUser`, `MaxArraySize`).

One rule for both scopes. A scope has two bounds: `submit_jobs`, its jobs pending and running
at once, and `array_size`, the most tasks of one array. A submission counts as the jobs it
will run as (an array its tasks, a service its replicas, else 1) and is refused whole, with
`SubmitLimit` and one line naming the scope and the bound, when the scope's live jobs plus
it would pass `submit_jobs`, or it is an array larger than `array_size`. The tenant's bounds
are its `submit_limits` (a bound it leaves unset: `DEFAULT_SUBMIT_JOBS`,
`DEFAULT_ARRAY_SIZE`; None: none); its users' are `user_limits` (default, overrides), and a
job that names no user is bound by its tenant's only.

Pure: the live counts are the fold's (`Ledger.live_jobs`: pending plus running, an array task
and a service replica each); a decide that admits several jobs adds what it admitted itself
(`Admitted`). Admission refuses with it (`JobRejected`), and so does the intake before it
stores a CI key's submission (then nothing at all is stored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from gpuledger.events.catalog import TenantConfigured
from gpuledger.events.reasons import RejectReason
from gpuledger.events.specs import (
    DEFAULT_ARRAY_SIZE,
    DEFAULT_SUBMIT_JOBS,
    JobSpec,
    SubmitLimit,
    UserLimits,
)
from gpuledger.services.domain.fold.records import ALL_USERS

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.ledger import Ledger


@dataclass(frozen=True)
class Bounds:
    """One scope's bounds (None: no bound)."""

    scope: str
    """`tenant research` or `user alice of tenant research`: how the refusal names it."""
    user: str
    """The key of its live count: the user, or `ALL_USERS` for the tenant."""
    submit_jobs: int | None
    array_size: int | None


@dataclass
class Admitted:
    """What one decide has admitted so far, per (tenant, user key): added to the fold's
    counts until its events are folded."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    scopes: dict[tuple[str, str | None], list[Bounds]] = field(default_factory=dict)
    """The bounds per (tenant, user), worked out once per decide (its configuration is one)."""

    def add(self, spec: JobSpec) -> None:
        for key in keys(spec):
            self.jobs[key] = self.jobs.get(key, 0) + weight(spec)

    def bounds(self, tenant: TenantConfigured, spec: JobSpec) -> list[Bounds]:
        key = (tenant.tenant, spec.user if isinstance(spec.user, str) else None)
        found = self.scopes.get(key)
        if found is None:
            found = self.scopes[key] = bounds(tenant, spec)
        return found


@dataclass(frozen=True)
class Refusal:
    """A submission over a bound: `SubmitLimit`, one line, and its numbers."""

    message: str
    details: dict[str, Any]
    reason: str = RejectReason.SubmitLimit


def weight(spec: JobSpec) -> int:
    """The jobs a submission runs as: an array its tasks, a service its replicas, else 1."""
    if spec.array:
        return spec.array.count
    return spec.replicas if spec.is_service else 1


def keys(spec: JobSpec) -> list[tuple[str, str]]:
    """The live counts a submission adds to: its tenant's, and its user's when it names one."""
    out = [(spec.tenant, ALL_USERS)]
    if isinstance(spec.user, str):
        out.append((spec.tenant, spec.user))
    return out


def _value(v: int | None | msgspec.UnsetType, default: int | None) -> int | None:
    return default if isinstance(v, msgspec.UnsetType) else v


def bounds(tenant: TenantConfigured, spec: JobSpec) -> list[Bounds]:
    """The bounds a submission of `spec` to `tenant` is held to: the tenant's, then its
    user's (when the job names a user and the tenant has per-user limits)."""
    t = tenant.submit_limits if isinstance(tenant.submit_limits, SubmitLimit) else SubmitLimit()
    out = [
        Bounds(
            f"tenant {tenant.tenant}",
            ALL_USERS,
            _value(t.submit_jobs, DEFAULT_SUBMIT_JOBS),
            _value(t.array_size, DEFAULT_ARRAY_SIZE),
        )
    ]
    users = tenant.user_limits
    if isinstance(spec.user, str) and isinstance(users, UserLimits):
        u = users.of(spec.user)
        out.append(
            Bounds(
                f"user {spec.user} of tenant {tenant.tenant}",
                spec.user,
                _value(u.submit_jobs, None),
                _value(u.array_size, None),
            )
        )
    return out


def tenant_submit_limits(tenant: TenantConfigured) -> dict[str, int | None]:
    """The tenant's own bounds in force, defaults applied (its projection row's)."""
    b = bounds(tenant, JobSpec(job_id="-", tenant=tenant.tenant))[0]
    return {"submit_jobs": b.submit_jobs, "array_size": b.array_size}


def problem(
    tenant: TenantConfigured,
    spec: JobSpec,
    live: dict[tuple[str, str], int],
    admitted: Admitted | None = None,
) -> Refusal | None:
    """Why a submission of `spec` to `tenant` is over a bound, or None. `live` holds the
    fold's pending-plus-running counts per (tenant, user key) (`Ledger.live_jobs`'s);
    `admitted`, what the deciding pass admitted on top of them."""
    w = weight(spec)
    extra = admitted.jobs if admitted is not None else {}
    scopes = admitted.bounds(tenant, spec) if admitted is not None else bounds(tenant, spec)
    for b in scopes:
        key = (spec.tenant, b.user)
        if spec.array and b.array_size is not None and w > b.array_size:
            return Refusal(
                f"array of {w} tasks: {b.scope} may submit arrays of at most {b.array_size}"
                " tasks (array_size)",
                {"limit": "array_size", "scope": b.scope, "array_size": b.array_size, "tasks": w},
            )
        if b.submit_jobs is None:
            continue
        have = live.get(key, 0) + extra.get(key, 0)
        if have + w > b.submit_jobs:
            return Refusal(
                f"{b.scope} has {have} jobs pending or running and this submission adds {w};"
                f" at most {b.submit_jobs} at once (submit_jobs)",
                {
                    "limit": "submit_jobs",
                    "scope": b.scope,
                    "submit_jobs": b.submit_jobs,
                    "jobs": have,
                    "adds": w,
                },
            )
    return None


def live_counts(state: Ledger, spec: JobSpec) -> dict[tuple[str, str], int]:
    """The fold's live counts a submission of `spec` is judged against (`Ledger.live_jobs`)."""
    return {key: state.live_jobs(*key) for key in keys(spec)}
