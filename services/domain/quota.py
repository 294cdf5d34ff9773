"""Hierarchical quota arithmetic: fair shares by water-filling, and quota checks.

Tenants form a tree by path (`org` is the parent of `org/team`). At every level the capacity
of the parent is split among its children: each first gets its guarantee (up to its demand),
then the idle surplus is shared in proportion to `over_quota_weight` among children that still
want more, each capped by its `limit` and its demand; this repeats until nothing more can be
given. A child's fair share is then split among its own children the same way. All amounts
are integer milli-GPUs; remainders go to children in path order, so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuledger.events import TenantConfigured, TenantShare


def parent_of(tenant: str) -> str:
    return tenant.rsplit("/", 1)[0] if "/" in tenant else ""


def fair_shares(
    tenants: Mapping[str, TenantConfigured],
    capacity_milli: int,
    allocated: Mapping[str, int],
    demand: Mapping[str, int],
) -> dict[str, TenantShare]:
    """Fair share of every configured tenant. `demand` and `allocated` are per tenant, own
    work only; subtree totals are computed here."""
    children: dict[str, list[str]] = {}
    for t in sorted(tenants):
        p = parent_of(t)
        while p and p not in tenants:
            p = parent_of(p)
        children.setdefault(p, []).append(t)

    subtree_demand: dict[str, int] = {}
    for root in children.get("", []):
        _total_demand(root, children, demand, subtree_demand)
    share: dict[str, int] = {}
    _split(
        capacity_milli, children.get("", []), 0, tenants, children, demand, subtree_demand, share
    )
    return {
        t: TenantShare(
            tenant=t,
            guaranteed_gpu_milli=tenants[t].guaranteed_gpu_milli,
            fair_share_gpu_milli=share.get(t, 0),
            allocated_gpu_milli=allocated.get(t, 0),
            demand_gpu_milli=subtree_demand.get(t, 0),
        )
        for t in sorted(tenants)
    }


def _total_demand(
    t: str, children: Mapping[str, list[str]], demand: Mapping[str, int], out: dict[str, int]
) -> int:
    """Own demand of `t` plus its subtree's, recorded for `t` and every descendant in `out`
    (module functions, not closures: recursive closures make reference cycles, garbage for
    the cyclic collector on every call)."""
    d = demand.get(t, 0) + sum(_total_demand(c, children, demand, out) for c in children.get(t, []))
    out[t] = d
    return d


def _split(
    capacity: int,
    kids: list[str],
    own_demand: int,
    tenants: Mapping[str, TenantConfigured],
    children: Mapping[str, list[str]],
    demand: Mapping[str, int],
    subtree_demand: Mapping[str, int],
    share: dict[str, int],
) -> int:
    """Split `capacity` among `kids` (plus the parent's own work) and, recursively, each
    kid's part among its children, into `share`; returns what the parent's own work gets."""
    entries = [
        (
            k,
            tenants[k].guaranteed_gpu_milli,
            tenants[k].limit_gpu_milli,
            tenants[k].over_quota_weight,
            subtree_demand[k],
        )
        for k in kids
    ]
    if own_demand:
        entries.append(("", 0, None, 1, own_demand))
    give = {name: min(g, d) for name, g, _, _, d in entries}
    granted = sum(give.values())
    if granted > capacity:  # guarantees oversubscribed: scale down by guarantee
        scaled = {n: give[n] * capacity // granted for n in give}
        give, granted = scaled, sum(scaled.values())
    surplus = capacity - granted
    while surplus > 0:
        wanting = [
            (n, w, min(d, lim if lim is not None else d) - give[n])
            for n, _, lim, w, d in entries
            if min(d, lim if lim is not None else d) > give[n] and w > 0
        ]
        if not wanting:
            break
        total_w = sum(w for _, w, _ in wanting)
        handed = 0
        for n, w, room in wanting:
            part = min(room, surplus * w // total_w)
            give[n] += part
            handed += part
        if handed == 0:  # integer remainder: one milli at a time, in path order
            for n, _, room in wanting:
                if surplus - handed <= 0:
                    break
                if room > 0:
                    give[n] += 1
                    handed += 1
        surplus -= handed
    for k in kids:
        share[k] = give[k]
        _split(
            give[k],
            children.get(k, []),
            demand.get(k, 0) if children.get(k) else 0,
            tenants,
            children,
            demand,
            subtree_demand,
            share,
        )
    return give.get("", 0)


def quota_block(
    tenant: TenantConfigured, allocated: int, need: int, fixed: int | None = None
) -> tuple[str, str] | None:
    """Why a job of `need` milli-GPUs may not start under its tenant's quota now, or None.

    `fixed` is the tenant's non-preemptible usage when the job itself is non-preemptible
    (None for preemptible jobs): non-preemptible work may only use guaranteed quota, and
    only non-preemptible work counts against that (preemptible work can be evicted)."""
    name = tenant.tenant
    if fixed is not None and fixed + need > tenant.guaranteed_gpu_milli:
        return (
            "NonPreemptibleOverQuota",
            f"non-preemptible work may only use guaranteed quota: tenant {name} runs "
            f"{fixed / 1000:g} non-preemptible of {tenant.guaranteed_gpu_milli / 1000:g} "
            f"guaranteed GPUs, job needs {need / 1000:g}",
        )
    if tenant.limit_gpu_milli is not None and allocated + need > tenant.limit_gpu_milli:
        return (
            "ExceedsLimit",
            f"tenant {name} uses {allocated / 1000:g} of its {tenant.limit_gpu_milli / 1000:g}-GPU "
            f"limit, job needs {need / 1000:g}",
        )
    return None
