"""Aging among a tenant's users: a user's aged jobs never pass a colleague who stands ahead of
them in the tenant's user order (`user_share`, the Fair Tree's second level).

Aging (`queue.effective_priority`) lifts a job that has waited or been preempted; it leads
the queue order, across tenants as well. Inside one tenant, left alone, it would let an old
sweep's tasks pass a colleague's fresh job although that colleague has used and holds less.
So, within a tenant, a pending job J of user U is ordered at no lower a priority than any
pending job C of a colleague whose user order is behind U's (higher standing, then higher
held share) and whose own priority (before aging) is at most J's: J takes C's effective
priority when aging raised C above J. At the same priority the tenant's own terms are equal,
and the user order then puts J first, so the colleague's single job goes next, while the
tenant's work as a whole keeps the place aging earned it against other tenants.

Invariants: only the order changes (preemption and protection from eviction read each job's
own effective priority); users of equal order and jobs of one user are untouched; a tenant
whose pending jobs all share one user (every log without users) is ordered exactly as
before; a higher class stays ahead (C's own priority must not exceed J's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Rank = tuple[int, int]
"""A user's place in its tenant's order (standing, held share): less goes first."""


def lifted(
    jobs: Iterable[tuple[str, str, str, int, int]], rank: Callable[[str, str], Rank]
) -> dict[str, int]:
    """The priority that orders each lifted job (job id -> priority), for the jobs whose
    colleagues' aging would otherwise pass them. `jobs`: (job id, tenant, user, own
    priority, effective priority) of each pending job; `rank(tenant, user)` the user order."""
    by_tenant: dict[str, list[tuple[str, str, int, int]]] = {}
    for job_id, tenant, user, base, level in jobs:
        by_tenant.setdefault(tenant, []).append((job_id, user, base, level))
    out: dict[str, int] = {}
    for tenant, mine in sorted(by_tenant.items()):
        aged: dict[tuple[str, int], int] = {}  # (user, own priority) -> highest effective
        for _, user, base, level in mine:
            if level > base and level > aged.get((user, base), level - 1):
                aged[(user, base)] = level
        if not aged or len({user for _, user, _, _ in mine}) < 2:
            continue  # nothing aged, or one user: aging orders its jobs as it always has
        behind = sorted((rank(tenant, user), base, level) for (user, base), level in aged.items())
        floor: dict[tuple[str, int], int] = {}  # (user, own priority) -> what lifts its jobs
        for job_id, user, base, level in mine:
            top = floor.get((user, base))
            if top is None:
                own = rank(tenant, user)
                top = floor[(user, base)] = max(
                    (lv for r, b, lv in behind if r > own and b <= base), default=0
                )
            if top > level:
                out[job_id] = top
    return out
