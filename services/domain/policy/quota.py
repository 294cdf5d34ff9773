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
from typing import Any

from msgspec import UNSET, UnsetType

from gpuledger.events import TenantConfigured, TenantShare
from gpuledger.events.reasons import PendingReason


def tenant_children(tenants: Mapping[str, Any]) -> dict[str, list[str]]:
    """The tenant tree: each configured tenant under its nearest configured ancestor ("" for
    the roots), children in name order."""
    children: dict[str, list[str]] = {}
    for t in sorted(tenants):
        p = parent_of(t)
        while p and p not in tenants:
            p = parent_of(p)
        children.setdefault(p, []).append(t)
    return children


def parent_of(tenant: str) -> str:
    return tenant.rsplit("/", 1)[0] if "/" in tenant else ""


def cap_of(t: TenantConfigured) -> int | None:
    """The most the tenant's subtree may use: its `limit`, and its guarantee plus its
    `borrowing_limit` (Kueue nominalQuota + borrowingLimit), whichever is lower; None = no
    cap."""
    caps = [c for c in (t.limit_gpu_milli, _borrow_cap(t)) if c is not None]
    return min(caps) if caps else None


def borrowing_limit(t: TenantConfigured) -> int | None:
    """The tenant's `borrowing_limit` in milli-GPUs, None where it has none (the field is
    `UNSET` then, which a read-only view of the state hands out wrapped: hence the type
    test)."""
    b = t.borrowing_limit_gpu_milli
    return b if isinstance(b, int) else None


def lending_limit(t: TenantConfigured) -> int | None:
    """The tenant's `lending_limit` in milli-GPUs, None where it has none."""
    v = t.lending_limit_gpu_milli
    return v if isinstance(v, int) else None


def borrowing_limits_by_model(t: TenantConfigured) -> Mapping[str, int]:
    """The tenant's per-model borrowing limits (model -> milli-GPUs), empty when unset."""
    v = t.borrowing_limit_by_model
    return {} if isinstance(v, UnsetType) else v


def lending_limits_by_model(t: TenantConfigured) -> Mapping[str, int]:
    """The tenant's per-model lending limits (model -> milli-GPUs), empty when unset."""
    v = t.lending_limit_by_model
    return {} if isinstance(v, UnsetType) else v


def unset_if_none(v: int | None) -> Any:
    """`UNSET` for None (an absent limit in a `TenantConfigured`), else the value."""
    return UNSET if v is None else v


def _borrow_cap(t: TenantConfigured) -> int | None:
    b = borrowing_limit(t)
    return None if b is None else t.guaranteed_gpu_milli + b


def unlent(t: TenantConfigured, used: int) -> int:
    """The part of the tenant's unused guarantee that others may not borrow: what is unused
    beyond its `lending_limit` (Kueue lendingLimit); 0 without a lending limit."""
    lend = lending_limit(t)
    if lend is None:
        return 0
    return max(0, t.guaranteed_gpu_milli - used - lend)


def fair_shares(
    tenants: Mapping[str, TenantConfigured],
    capacity_milli: int,
    allocated: Mapping[str, int],
    demand: Mapping[str, int],
    used_by_model: Mapping[tuple[str, str], int] | None = None,
    models: Mapping[str, int] | None = None,
) -> dict[str, TenantShare]:
    """Fair share of every configured tenant. `demand` and `allocated` are per tenant, own
    work only; subtree totals are computed here. Per-model limits count where given:
    `used_by_model` (per (tenant, model), own work) for `lending_limit_by_model`, and the
    fleet's GPU `models` for `borrowing_limit_by_model` (`model_held`, `model_cap`)."""
    children = tenant_children(tenants)

    subtree_demand: dict[str, int] = {}
    for root in children.get("", []):
        _total_demand(root, children, demand, subtree_demand)
    share: dict[str, int] = {}
    per_model = _PerModel()
    if model_limits_set(tenants):
        sub = subtree_by_model(tenants, used_by_model or {})
        for t in sorted(tenants):
            per_model.used[t] = {m: v for (k, m), v in sorted(sub.items()) if k == t}
            per_model.cap[t] = model_cap(tenants[t], models or {})
    _split(
        capacity_milli,
        children.get("", []),
        0,
        tenants,
        children,
        demand,
        subtree_demand,
        share,
        per_model,
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
    per_model: _PerModel,
) -> int:
    """Split `capacity` among `kids` (plus the parent's own work) and, recursively, each
    kid's part among its children, into `share`; returns what the parent's own work gets."""
    entries = [
        (
            k,
            tenants[k].guaranteed_gpu_milli,
            _lower(cap_of(tenants[k]), per_model.cap.get(k)),
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
    # the unused guarantee a kid does not lend (`lending_limit`) stays out of the surplus
    # and so does its idle per-model guarantee it does not lend (`lending_limit_by_model`)
    held = sum(
        max(
            unlent(tenants[k], give[k]),
            model_held(tenants[k], per_model.used.get(k, {}), give[k]),
        )
        for k in kids
    )
    _hand_out(entries, give, max(0, capacity - granted - held))
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
            per_model,
        )
    return give.get("", 0)


def _hand_out(
    entries: list[tuple[str, int, int | None, int, int]], give: dict[str, int], surplus: int
) -> None:
    """Add `surplus` to `give` by weight among the entries (name, guarantee, cap, weight,
    demand) that want more than they got, up to their demand and cap, round after round
    until none wants more or nothing is left; an integer remainder one milli at a time, in
    path order."""
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


class _PerModel:
    """Per tenant, for `_split`: its subtree's use per GPU model, and the cap its per-model
    borrowing limits put on it (`model_cap`); both empty without per-model limits."""

    __slots__ = ("cap", "used")

    def __init__(self) -> None:
        self.used: dict[str, dict[str, int]] = {}
        self.cap: dict[str, int | None] = {}


def _lower(a: int | None, b: int | None) -> int | None:
    """The lower of two caps, None meaning none."""
    if a is None:
        return b
    return a if b is None else min(a, b)


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
            PendingReason.NonPreemptibleOverQuota,
            f"non-preemptible work may only use guaranteed quota: tenant {name} runs "
            f"{fixed / 1000:g} non-preemptible of {tenant.guaranteed_gpu_milli / 1000:g} "
            f"guaranteed GPUs, job needs {need / 1000:g}",
        )
    if tenant.limit_gpu_milli is not None and allocated + need > tenant.limit_gpu_milli:
        return (
            PendingReason.ExceedsLimit,
            f"tenant {name} uses {allocated / 1000:g} of its {tenant.limit_gpu_milli / 1000:g}-GPU "
            f"limit, job needs {need / 1000:g}",
        )
    cap = _borrow_cap(tenant)
    if cap is not None and allocated + need > cap:
        borrowed = max(0, allocated - tenant.guaranteed_gpu_milli)
        return (
            PendingReason.ExceedsLimit,
            f"tenant {name} borrows {borrowed / 1000:g} of its "
            f"{(borrowing_limit(tenant) or 0) / 1000:g}-GPU borrowing_limit (uses "
            f"{allocated / 1000:g}, guaranteed {tenant.guaranteed_gpu_milli / 1000:g}), "
            f"job needs {need / 1000:g}",
        )
    return None


def lends_limited(tenants: Mapping[str, TenantConfigured]) -> bool:
    """Whether any tenant sets a lending limit (else `lending_block` never blocks)."""
    return any(lending_limit(t) is not None for t in tenants.values())


def lending_block(
    tenants: Mapping[str, TenantConfigured],
    usage: Mapping[str, int],
    capacity_milli: int,
    tenant: str,
    need: int,
) -> tuple[str, str, dict[str, Any]] | None:
    """Why a job of `tenant` needing `need` milli-GPUs may not borrow them now, or None.

    A job borrows when its tenant's own use would go above its guarantee. The borrowed
    capacity must not come from the unused guarantee that other tenants keep back with
    `lending_limit`: after the placement, everything in use plus what the others keep back
    fits the capacity. Tenants on the job's own line (its ancestors, whose guarantee covers
    it, and its descendants, whose guarantee is its own) do not count; for nested tenants the
    larger of a tenant's own hold and its children's together counts once. Counted in
    milli-GPUs over the whole fleet, as Kueue counts quota (not per node or model).
    """
    conf = tenants.get(tenant)
    if conf is None:
        return None
    sub = _subtree_usage(tenants, usage)
    if sub.get(tenant, 0) + need <= conf.guaranteed_gpu_milli:
        return None  # within its own guarantee: not borrowing
    children = tenant_children(tenants)
    holders: list[tuple[str, int]] = []
    held = sum(_held_out(r, tenant, tenants, children, sub, holders) for r in children.get("", []))
    if held == 0:
        return None
    used = sum(usage.values())
    free = capacity_milli - used
    if used + need + held <= capacity_milli:
        return None
    names = ", ".join(
        f"{t} keeps {h / 1000:g} (lends {(lending_limit(tenants[t]) or 0) / 1000:g} of "
        f"{tenants[t].guaranteed_gpu_milli / 1000:g} guaranteed, uses {sub.get(t, 0) / 1000:g})"
        for t, h in holders
    )
    return (
        PendingReason.LendingLimit,
        f"tenant {tenant} would borrow; {min(free, held) / 1000:g} of the {max(free, 0) / 1000:g} "
        f"free GPUs are unused guarantee not lent: {names}; job needs {need / 1000:g}",
        {
            "need_gpu_milli": need,
            "free_gpu_milli": free,
            "held_gpu_milli": held,
            "held_by": {t: h for t, h in holders},
        },
    )


def _subtree_usage(
    tenants: Mapping[str, TenantConfigured], usage: Mapping[str, int]
) -> dict[str, int]:
    """Per configured tenant: use of its whole subtree (own work included)."""
    out: dict[str, int] = {}
    for k in sorted(usage):
        v = usage[k]
        t = k
        while t:
            if t in tenants:
                out[t] = out.get(t, 0) + v
            t = parent_of(t)
    return out


def _held_out(
    t: str,
    job_tenant: str,
    tenants: Mapping[str, TenantConfigured],
    children: Mapping[str, list[str]],
    sub: Mapping[str, int],
    holders: list[tuple[str, int]],
    model: str | None = None,
) -> int:
    """Capacity the subtree of `t` keeps back from the job's tenant (see `lending_block`;
    with `model`, GPUs of that model under per-model lending limits, `model_limit_blocks`);
    the tenants that keep some back are appended to `holders` in path order."""
    if t == job_tenant or t.startswith(job_tenant + "/"):
        return 0  # the job's tenant and its descendants: its own guarantee
    mark = len(holders)
    kids = sum(
        _held_out(c, job_tenant, tenants, children, sub, holders, model)
        for c in children.get(t, [])
    )
    if job_tenant.startswith(t + "/"):
        return kids  # an ancestor: its guarantee covers the job
    if model is None:
        own = unlent(tenants[t], sub.get(t, 0))
    else:
        own = unlent_model(tenants[t], model, sub.get(t, 0))
    if own > kids:  # its own hold covers its children's: named alone
        del holders[mark:]
        holders.append((t, own))
    return max(own, kids)


def unlent_model(t: TenantConfigured, model: str, used: int) -> int:
    """The part of the tenant's unused guarantee for `model` (`guaranteed_by_model`) that
    others may not borrow: what is unused beyond its per-model lending limit; 0 without one."""
    lend = lending_limits_by_model(t).get(model)
    if lend is None:
        return 0
    return max(0, t.guaranteed_by_model.get(model, 0) - used - lend)


def model_held(t: TenantConfigured, used_by_model: Mapping[str, int], share: int) -> int:
    """For fair share: the tenant's idle per-model guarantees it does not lend (each model's
    guarantee less its use less its lending limit), at most its per-model guarantees with
    lending limits less its `share` (a tenant that wants its guarantee keeps nothing idle)."""
    limits = lending_limits_by_model(t)
    if not limits:
        return 0
    held = sum(unlent_model(t, m, used_by_model.get(m, 0)) for m in sorted(limits))
    guaranteed = sum(t.guaranteed_by_model.get(m, 0) for m in sorted(limits))
    return min(held, max(0, guaranteed - share))


def model_cap(t: TenantConfigured, models: Mapping[str, int]) -> int | None:
    """For fair share: when the tenant has a per-model borrowing limit for every GPU model of
    the fleet (`models`), it can use at most the sum of each model's guarantee plus limit;
    else None (a model without a per-model cap leaves it uncapped here)."""
    limits = borrowing_limits_by_model(t)
    if not limits or not models or any(m not in limits for m in models):
        return None
    return sum(t.guaranteed_by_model.get(m, 0) + limits[m] for m in sorted(models))


def subtree_by_model(
    tenants: Mapping[str, TenantConfigured], used_by_model: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], int]:
    """Per (configured tenant, model): use of its whole subtree (own work included)."""
    out: dict[tuple[str, str], int] = {}
    for k in sorted(used_by_model):
        tenant, model = k
        t = tenant
        while t:
            if t in tenants:
                out[(t, model)] = out.get((t, model), 0) + used_by_model[k]
            t = parent_of(t)
    return out


def model_limits_set(tenants: Mapping[str, TenantConfigured]) -> bool:
    """Whether any tenant sets a per-model borrowing or lending limit."""
    return any(borrowing_limits_by_model(t) or lending_limits_by_model(t) for t in tenants.values())


def model_limit_blocks(
    tenants: Mapping[str, TenantConfigured],
    used_by_model: Mapping[tuple[str, str], int],
    capacity_by_model: Mapping[str, int],
    tenant: str,
    need: int,
) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Per GPU model a job of `tenant` needing `need` milli-GPUs may not be placed on now:
    (reason, message, details), in model order. A member counts under its GPU's model.

    - `ExceedsLimit`: the tenant (or an ancestor) would use more of the model than its
      guarantee for it plus its `borrowing_limit_by_model`.
    - `LendingLimit`: the job would take GPUs of the model that other tenants keep back
      (their unused per-model guarantee beyond `lending_limit_by_model`): everything of the
      model in use + the job + what others keep back exceeds the model's GPUs. A job within
      its own tenant's guarantee for the model is never held back; tenants on the job's own
      line do not count (as for `lending_block`)."""
    sub = subtree_by_model(tenants, used_by_model)
    out = _borrowing_blocks(tenants, sub, tenant, need)
    lent = sorted({m for c in tenants.values() for m in lending_limits_by_model(c)})
    if not lent:
        return out
    own = tenants.get(tenant)
    children = tenant_children(tenants)
    for model in lent:
        if model in out or model not in capacity_by_model:
            continue
        if own is not None and model in own.guaranteed_by_model:
            if sub.get((tenant, model), 0) + need <= own.guaranteed_by_model[model]:
                continue  # within its own guarantee for the model
        block = _lending_block(
            tenants, used_by_model, capacity_by_model[model], sub, children, tenant, need, model
        )
        if block is not None:
            out[model] = block
    return dict(sorted(out.items()))


Block = tuple[str, str, dict[str, Any]]
"""(reason, message, details) of a GPU model closed to a job."""


def _borrowing_blocks(
    tenants: Mapping[str, TenantConfigured],
    sub: Mapping[tuple[str, str], int],
    tenant: str,
    need: int,
) -> dict[str, Block]:
    """`ExceedsLimit` per model where `tenant` or an ancestor (the nearest first) would use
    more than its guarantee for the model plus its `borrowing_limit_by_model`."""
    out: dict[str, Block] = {}
    t = tenant
    while t:
        conf = tenants.get(t)
        limits = borrowing_limits_by_model(conf) if conf is not None else {}
        for model in sorted(limits):
            if model in out or conf is None:
                continue
            g = conf.guaranteed_by_model.get(model, 0)
            used = sub.get((t, model), 0)
            if used + need > g + limits[model]:
                out[model] = (
                    PendingReason.ExceedsLimit,
                    f"tenant {t} borrows {max(0, used - g) / 1000:g} of its "
                    f"{limits[model] / 1000:g}-GPU borrowing_limit_by_model for {model} (uses "
                    f"{used / 1000:g} {model}, guaranteed {g / 1000:g}), job needs {need / 1000:g}",
                    {"model": model, "tenant": t, "used_gpu_milli": used},
                )
        t = parent_of(t)
    return out


def _lending_block(
    tenants: Mapping[str, TenantConfigured],
    used_by_model: Mapping[tuple[str, str], int],
    cap: int,
    sub: Mapping[tuple[str, str], int],
    children: Mapping[str, list[str]],
    tenant: str,
    need: int,
    model: str,
) -> Block | None:
    """`LendingLimit` when the job's `need` of `model` (of `cap` milli-GPUs) would take what
    other tenants keep back (their unused guarantee beyond their lending limit), else None."""
    sub_m = {k[0]: v for k, v in sub.items() if k[1] == model}
    holders: list[tuple[str, int]] = []
    held = sum(
        _held_out(r, tenant, tenants, children, sub_m, holders, model) for r in children.get("", [])
    )
    if held == 0:
        return None
    used = sum(v for k, v in sorted(used_by_model.items()) if k[1] == model)
    if used + need + held <= cap:
        return None
    free = cap - used
    names = ", ".join(
        f"{h} keeps {n / 1000:g} (lends "
        f"{lending_limits_by_model(tenants[h]).get(model, 0) / 1000:g} of "
        f"{tenants[h].guaranteed_by_model.get(model, 0) / 1000:g} guaranteed {model}, uses "
        f"{sub_m.get(h, 0) / 1000:g})"
        for h, n in holders
    )
    return (
        PendingReason.LendingLimit,
        f"tenant {tenant} would borrow {model} GPUs; {min(free, held) / 1000:g} of the "
        f"{max(free, 0) / 1000:g} free {model} GPUs are unused guarantee not lent: {names}; "
        f"job needs {need / 1000:g}",
        {"model": model, "free_gpu_milli": free, "held_by": {h: n for h, n in holders}},
    )
