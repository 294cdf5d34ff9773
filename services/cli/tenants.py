"""`gpuledger tenants`: each tenant's quota, allocation and jobs."""

from __future__ import annotations

from typing import Any

from gpuledger.projections.queries import (
    tenants_rows,
)
from gpuledger.services.cli.output import (
    NoHeadersOption,
    Output,
    OutputOption,
    _print_rows,
)
from gpuledger.services.cli.reading import (
    DEFAULT_DATA,
    DataOption,
    DbOption,
    _query,
    db_path,
)


def _num(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.{digits}f}"
    return str(int(v)) if isinstance(v, float) else str(v)


def _limit_text(gpus: Any, by_model: dict[str, float] | None) -> str:
    """A lending or borrowing limit: `2`, per model `H100-80GB=2`, both `4,H100-80GB=2`,
    `-` for none."""
    parts = [] if gpus is None else [_num(gpus)]
    parts += [f"{m}={_num(v)}" for m, v in sorted((by_model or {}).items())]
    return ",".join(parts) or "-"


def _tenant_table(rows, wide):
    headers = [
        "NAME",
        "GUARANTEED",
        "LIMIT",
        "BORROW-LIMIT",
        "LEND-LIMIT",
        "FAIR-SHARE",
        "ALLOCATED",
        "BORROWED-H",
        "RUNNING",
        "PENDING",
    ]
    if wide:
        headers += ["DEMAND", "WEIGHT", "GPU-H", "USED-H", "SM-ACTIVE", "LOST-H", "PREEMPTED"]
    out = []
    for r in rows:
        alloc_now = r["allocated_gpus_now"]
        line = [
            r["tenant"],
            _num(r["guaranteed_gpus"]),
            _num(r["limit_gpus"]),
            _limit_text(r.get("borrowing_limit_gpus"), r.get("borrowing_limit_by_model_gpus")),
            _limit_text(r.get("lending_limit_gpus"), r.get("lending_limit_by_model_gpus")),
            _num(r["fair_share_gpus"]),
            _num(alloc_now),
            _num(r["borrowed_gpu_hours"], 2),
            r["running_jobs"],
            r["pending_jobs"],
        ]
        if wide:
            sm = r["sm_active_avg"]
            line += [
                _num(r["demand_gpus"]),
                _num(r["over_quota_weight"]),
                _num(r["allocated_gpu_hours"], 2),
                _num(r["used_gpu_hours"], 2),
                f"{sm:.0%}" if sm is not None else "-",
                _num(r["lost_gpu_hours"], 3),
                r["times_preempted"],
            ]
        out.append(line)
    return headers, out


def tenants_command(
    output: OutputOption = Output.table,
    no_headers: NoHeadersOption = False,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
) -> None:
    """List tenants: quota (GPUs: guaranteed, limit, borrowing and lending limits), current
    allocation, borrowed GPU-hours, jobs."""
    _print_rows(_query(db_path(db, data), tenants_rows), _tenant_table, output, no_headers)
