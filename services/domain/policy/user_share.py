"""What each user of a tenant holds now: placed jobs and GPU capacity, from the active
allocations (one derivation, read by the queue order and the `user_limits` stage).

Within a tenant the queue puts the jobs of the user who holds the least GPU capacity first
(after priority and the tenant's own standing), so one user's sweep cannot keep a colleague's
single job waiting behind all of it. Jobs that name no user count as the user `-`
(`DEFAULT_USER`); a tenant whose jobs all share one user is ordered exactly as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger.services.domain.fold.records import ALL_USERS

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.ledger import Ledger

Holdings = dict[tuple[str, str], list[int]]
"""(tenant, user) -> [placed jobs, GPU milli held]."""


def holdings(state: Ledger) -> Holdings:
    """[placed jobs, GPU milli held] per (tenant, user); a job without a user counts as `-`.
    The job count is the fold's tally (`placed_jobs`); the capacity is summed over the active
    allocations, the one place it is derived."""
    out: Holdings = {
        key: [n, 0] for key, n in sorted(state.placed_jobs.items()) if n and key[1] != ALL_USERS
    }
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        owner = state.jobs.get(rec.job_id)
        if owner is not None:
            out.setdefault((rec.tenant, owner.spec.submitter), [0, 0])[1] += rec.gpu_milli
    return out
