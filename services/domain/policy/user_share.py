"""Fair share among a tenant's users (the Fair Tree's second level): what each user holds
now, and each user's standing, its own time-decayed past usage over its weight.

Within a tenant the queue puts first the jobs of the user with the lowest standing
(`standing`: usage the fold decays exactly as its tenant's, `policy.usage_half_life_s`, over
the user's `weight` from the tenant's `users:`, default 1), then of the user who holds the
least GPU capacity over its weight now (`holdings`; the order when usage is off, and among
users of equal standing). One derivation each: the fold keeps the usage
(`quota.user_usage`), the capacity held (`user_gpu_milli`) and the placed jobs
(`placed_jobs`); this module only reads them. Jobs that name no user count as the user `-`
(`DEFAULT_USER`); a tenant whose jobs all share one user is ordered exactly as before, since
its one user's usage and holdings are its tenant's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import UNSET

from gpuledger.events.specs import DEFAULT_USER_WEIGHT
from gpuledger.services.domain.fold.records import ALL_USERS

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.ledger import Ledger

Holdings = dict[tuple[str, str], list[int]]
"""(tenant, user) -> [placed jobs, GPU milli held]."""


def holdings(state: Ledger) -> Holdings:
    """[placed jobs, GPU milli held] per (tenant, user); a job without a user counts as `-`.
    Both are the fold's tallies (`placed_jobs`, `user_gpu_milli`)."""
    out: Holdings = {
        key: [n, 0] for key, n in sorted(state.placed_jobs.items()) if n and key[1] != ALL_USERS
    }
    for key, milli in sorted(state.user_gpu_milli.items()):
        out.setdefault(key, [0, 0])[1] = milli
    return out


def weight(state: Ledger, tenant: str, user: str) -> int:
    """`user`'s fair-share weight in `tenant`: its `users:` override's, else the tenant's
    default's, else 1."""
    conf = state.config.tenants.get(tenant)
    users = conf.user_limits if conf is not None else UNSET
    return DEFAULT_USER_WEIGHT if users is UNSET else users.weight_of(user)


def standing(state: Ledger, tenant: str, user: str, now_ms: int) -> int:
    """The user's decayed past usage per unit of weight (milli-GPU·ms, floored): among one
    tenant's users, the lower goes first (Fair Tree: usage over shares, ranked among
    siblings). 0 for everyone when `policy.usage_half_life_s` is off."""
    return state.user_usage_at(tenant, user, now_ms) // weight(state, tenant, user)


def held_share(state: Ledger, held: Holdings, tenant: str, user: str) -> int:
    """GPU milli the user holds now per unit of weight (floored)."""
    return held.get((tenant, user), (0, 0))[1] // weight(state, tenant, user)


def shares(state: Ledger, now_ms: int) -> dict[tuple[str, str], tuple[int, int]]:
    """(weight, decayed usage in milli-GPU·ms at `now_ms`) of every (tenant, user) with usage
    folded or capacity held: what the queue orders a tenant's users by (`gpuledger users
    --log`)."""
    keys = sorted(set(state.quota.user_usage) | set(state.user_gpu_milli))
    return {(t, u): (weight(state, t, u), state.user_usage_at(t, u, now_ms)) for t, u in keys}
