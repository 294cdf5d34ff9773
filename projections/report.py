"""`gpuledger report`'s numbers: a window's GPU-hours split like Slurm's `sreport cluster
utilization`, and the allocated part per tenant, per user and per GPU model.

The numbers are the table macros of projections/report.sql (`utilisation_between`,
`tenant_usage_between`, `user_usage_between`, `model_usage_between`) over [start, end): this
module only picks the window and the top rows, so SQL users read the same numbers. The
connection is the caller's (read-only)."""

from __future__ import annotations

from typing import Any

from gpuledger.projections.queries import records

CATEGORIES = ("allocated", "idle", "down", "planned_down", "reserved")
"""sreport's split of the reported GPU-hours (they sum to `reported`)."""


def window(con, start_ms: int | None, end_ms: int | None) -> tuple[int, int]:
    """[start, end) in epoch ms: the given bounds, else the log's first event and now."""
    first, now = con.execute(
        "SELECT (SELECT coalesce(start_ms, 0) FROM run_window), (SELECT now_ms FROM clock)"
    ).fetchone()
    return (first if start_ms is None else start_ms), (now if end_ms is None else end_ms)


def report(con, start_ms: int, end_ms: int, top: int = 10) -> dict[str, Any]:
    """The window's utilisation (GPU-hours and % per category), the `top` tenants and
    users by allocated GPU-hours, and every GPU model."""
    args = [start_ms, end_ms]
    (u,) = records(con.execute("SELECT * FROM utilisation_between(?, ?)", args))
    utilisation = {c: {"gpu_hours": u[f"{c}_gpu_hours"], "pct": u[f"{c}_pct"]} for c in CATEGORIES}
    return {
        "start_ms": start_ms,
        "end_ms": end_ms,
        "reported_gpu_hours": u["reported_gpu_hours"],
        "utilisation": utilisation,
        "tenants": records(
            con.execute("SELECT * FROM tenant_usage_between(?, ?) LIMIT ?", [*args, top])
        ),
        "users": records(
            con.execute("SELECT * FROM user_usage_between(?, ?) LIMIT ?", [*args, top])
        ),
        "models": records(con.execute("SELECT * FROM model_usage_between(?, ?)", args)),
    }
