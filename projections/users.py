"""Each user's use against its limits, from the projection (`gpuledger users`).

Use is read from the `jobs` and `allocations` tables (a job counts as the jobs it runs as: an
array's tasks and a service's replicas each, never the array or service row itself; an
array's tasks not released yet, which have no row, from the array's counts); limits
from `tenants.user_limits` and `tenants.submit_limits` (what the configuration in force set),
resolved per user by the same rule the scheduler and admission apply (`UserLimits.of`). The
tenant's own line (user `*`) holds its totals against its own bounds.
"""

from __future__ import annotations

import json
from typing import Any

from gpuledger.projections.queries import ARRAY_TASKS, REPLICAS_UP, records

TENANT_LINE = "*"
"""The user column of a tenant's own line (no user name is `*`)."""

USE = f"""
WITH {REPLICAS_UP}, {ARRAY_TASKS}, leaves AS (
    SELECT j.tenant, j.user, j.state, j.job_id FROM jobs j
    WHERE j.job_id NOT IN (SELECT job_id FROM services)
      AND j.job_id NOT IN (SELECT job_id FROM arrays)
), held AS (
    SELECT j.tenant, j.user, sum(a.gpu_milli) AS gpu_milli
    FROM allocations a JOIN jobs j USING (job_id)
    WHERE a.ended_at_ms IS NULL GROUP BY ALL
), unreleased AS (
    SELECT j.tenant, j.user, sum(a.tasks_unreleased) AS n
    FROM arrays a JOIN jobs j USING (job_id) WHERE a.tasks_unreleased > 0 GROUP BY ALL
)
SELECT l.tenant, l.user,
       count(*) FILTER (WHERE l.state IN ('running', 'preempting')) AS running_jobs,
       count(*) FILTER (WHERE l.state = 'pending') + coalesce(any_value(u.n), 0)
         AS pending_jobs,
       coalesce(any_value(h.gpu_milli), 0) AS gpu_milli
FROM leaves l LEFT JOIN held h ON h.tenant = l.tenant AND h.user = l.user
     LEFT JOIN unreleased u ON u.tenant = l.tenant AND u.user = l.user
WHERE l.state IN ('running', 'preempting', 'pending') {{tenant}}
GROUP BY l.tenant, l.user
"""

BY_MODEL = """
SELECT j.tenant, j.user, a.gpu_model AS model, sum(a.gpu_milli) AS gpu_milli
FROM allocations a JOIN jobs j USING (job_id)
WHERE a.ended_at_ms IS NULL GROUP BY ALL
"""
"""GPU milli each (tenant, user) holds per GPU model now (what `gpus_by_model` bounds)."""


def _limits(con, tenant: str | None) -> dict[str, tuple[dict[str, Any], Any]]:
    """Per tenant: (its own bounds, its `UserLimits` or None)."""
    import msgspec

    from gpuledger.events.specs import UserLimits

    q = "SELECT tenant, submit_limits, user_limits FROM tenants"
    out = {}
    for r in records(con.execute(q)):
        if tenant and not (
            r["tenant"] == tenant or r["tenant"].startswith(tenant.rstrip("/") + "/")
        ):
            continue
        users = r["user_limits"]
        out[r["tenant"]] = (
            json.loads(r["submit_limits"]) if r["submit_limits"] else {},
            msgspec.convert(json.loads(users), UserLimits) if users else None,
        )
    return out


def users_rows(con, *, tenant: str | None = None) -> list[dict[str, Any]]:
    """One row per tenant (user `*`) and per user with work pending or running or a limit
    of its own: running jobs, GPUs held, pending jobs, and the limits in force for each
    (None: no bound); a user bound per GPU model also has `gpus_by_model` ({model: {gpus,
    limit}}). Sorted by tenant, the tenant's line first, then user."""
    use = _use(con, tenant)
    limits = _limits(con, tenant)
    keys = set(use) | {(t, u) for t, (_, ul) in limits.items() if ul for u in ul.overrides}
    by_model: dict[tuple[str, str], dict[str, int]] | None = None
    out = []
    for t in sorted({t for t, _ in keys} | set(limits)):
        own, users = limits.get(t, ({}, None))
        mine = [use[k] for k in use if k[0] == t]
        out.append(
            _row(t, TENANT_LINE, mine, own.get("submit_jobs"), own.get("array_size"), None, None)
        )
        for u in sorted(u for tt, u in keys if tt == t):
            lim = users.of(u) if users is not None and u != "-" else None
            out.append(_user_row(t, u, [use[(t, u)]] if (t, u) in use else [], lim))
            bounds = lim.gpu_milli_by_model if lim else None
            if isinstance(bounds, dict) and bounds:
                if by_model is None:
                    by_model = _held_by_model(con)
                mine = by_model.get((t, u), {})
                out[-1]["gpus_by_model"] = {
                    m: {"gpus": mine.get(m, 0) / 1000, "limit": b / 1000}
                    for m, b in sorted(bounds.items())
                }
    return out


def _use(con, tenant: str | None) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (tenant, user), its running and pending jobs and GPUs held (of `tenant` and its
    sub-tenants, or of all)."""
    where, args = "", []
    if tenant:
        where = "AND (l.tenant = ? OR starts_with(l.tenant, ?))"
        args = [tenant, tenant.rstrip("/") + "/"]
    return {
        (r["tenant"], r["user"]): r for r in records(con.execute(USE.format(tenant=where), args))
    }


def _held_by_model(con) -> dict[tuple[str, str], dict[str, int]]:
    """Per (tenant, user), GPU milli held now per GPU model (`BY_MODEL`)."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for r in records(con.execute(BY_MODEL)):
        held = out.setdefault((r["tenant"], r["user"]), {})
        held[r["model"]] = held.get(r["model"], 0) + r["gpu_milli"]
    return out


def _user_row(tenant: str, user: str, use: list[dict[str, Any]], lim: Any) -> dict[str, Any]:
    """A user's row: its use and the limits its tenant sets for it (`lim`; None: none)."""
    if lim is None:
        return _row(tenant, user, use, None, None, None, None)
    return _row(
        tenant,
        user,
        use,
        _set(lim.submit_jobs),
        _set(lim.array_size),
        lim.running_jobs,
        lim.gpu_milli,
    )


def _set(v: Any) -> Any:
    import msgspec

    return None if v is msgspec.UNSET else v


def _row(tenant, user, use, submit_jobs, array_size, running_limit, gpu_limit) -> dict[str, Any]:
    running = sum(r["running_jobs"] for r in use)
    pending = sum(r["pending_jobs"] for r in use)
    gpus = sum(r["gpu_milli"] for r in use) / 1000
    return {
        "tenant": tenant,
        "user": user,
        "running_jobs": running,
        "running_jobs_limit": running_limit,
        "gpus": gpus,
        "gpus_limit": None if gpu_limit is None else gpu_limit / 1000,
        "pending_jobs": pending,
        "submit_jobs": running + pending,
        "submit_jobs_limit": submit_jobs,
        "array_size_limit": array_size,
    }
