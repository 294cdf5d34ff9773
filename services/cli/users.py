"""`gpuledger users`: each tenant's and user's use against its limits (projections/users.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.output import NoHeadersOption, Output, OutputOption, _print_rows
from gpuledger.services.cli.reading import DEFAULT_DATA, DataOption, DbOption, _query, db_path

GPU_HOUR_MS = 3_600_000 * 1000
"""Milli-GPU·ms in one GPU-hour."""


def _of(value: Any, limit: Any) -> str:
    """`3/8` against a limit, `3` without one."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if limit is None:
        return text
    return f"{text}/{limit:g}" if isinstance(limit, float) else f"{text}/{limit}"


def _table(rows: list[dict[str, Any]], wide: bool) -> tuple[list[str], list[list[Any]]]:
    headers = ["TENANT", "USER", "RUNNING", "GPUS", "PENDING", "SUBMITTED", "ARRAY-SIZE"]
    share = bool(rows) and "weight" in rows[0]
    if share:
        headers += ["WEIGHT", "USAGE", "USAGE/WEIGHT"]
    models = any("gpus_by_model" in r for r in rows)
    if models:
        headers.append("GPUS-BY-MODEL")
    out = [
        [
            r["tenant"],
            r["user"],
            _of(r["running_jobs"], r["running_jobs_limit"]),
            _of(r["gpus"], r["gpus_limit"]),
            r["pending_jobs"],
            _of(r["submit_jobs"], r["submit_jobs_limit"]),
            "-" if r["array_size_limit"] is None else r["array_size_limit"],
            *(
                [_num(r["weight"]), _num(r["usage_gpu_hours"]), _num(r["standing_gpu_hours"])]
                if share
                else []
            ),
            *([_by_model(r.get("gpus_by_model"))] if models else []),
        ]
        for r in rows
    ]
    return headers, out


def _by_model(held: dict[str, dict[str, float]] | None) -> str:
    """`H100-80GB 2/4`, one per bound model (comma-separated); `-` without bounds."""
    if not held:
        return "-"
    return ",".join(f"{m} {_of(h['gpus'], h['limit'])}" for m, h in held.items())


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _with_shares(rows: list[dict[str, Any]], log: Path, tenant: str | None) -> list[dict[str, Any]]:
    """`rows` with each user's fair-share numbers from the log folded as the services fold
    it (`user_share.shares` at the log's last event): its weight, decayed usage and usage
    over weight in GPU-hours; a user with usage but no work now gets a row of its own. The
    tenant's line has its own decayed usage."""
    from gpuledger.replay.logio import LogFormatError, read_log
    from gpuledger.services.domain.fold.acceptance import admit
    from gpuledger.services.domain.fold.ledger import Ledger
    from gpuledger.services.domain.policy.user_share import shares, weight

    ledger, now = Ledger(), 0
    try:
        for seq, subject, event in read_log(log):
            admit(ledger, seq, event, subject)
            now = max(now, event.occurred_at_ms)
    except (OSError, LogFormatError) as exc:
        fail(f"--log: {exc}", 2)
    folded = shares(ledger, now)
    mine = tenant.rstrip("/") if tenant else None
    for t, u in folded:
        if mine and not (t == mine or t.startswith(mine + "/")):
            continue
        if not any(r["tenant"] == t and r["user"] == u for r in rows):
            rows.append(_idle_row(t, u))
    rows.sort(key=lambda r: (r["tenant"], r["user"] != "*", r["user"]))
    for r in rows:
        if r["user"] == "*":
            used, w = ledger.usage_at(r["tenant"], now), None
        else:
            w, used = folded.get((r["tenant"], r["user"]), (None, 0))
            if w is None:
                w = weight(ledger, r["tenant"], r["user"])
        r["weight"] = w
        r["usage_gpu_hours"] = round(used / GPU_HOUR_MS, 4)
        r["standing_gpu_hours"] = None if w is None else round(used / w / GPU_HOUR_MS, 4)
    return rows


def _idle_row(tenant: str, user: str) -> dict[str, Any]:
    """A user with past usage and no work now, no limits shown."""
    return {
        "tenant": tenant,
        "user": user,
        "running_jobs": 0,
        "running_jobs_limit": None,
        "gpus": 0.0,
        "gpus_limit": None,
        "pending_jobs": 0,
        "submit_jobs": 0,
        "submit_jobs_limit": None,
        "array_size_limit": None,
    }


def users_command(
    tenant: str | None = typer.Option(
        None, "--tenant", help="Only this tenant (and its children)."
    ),
    log: Path | None = typer.Option(
        None,
        "--log",
        help="Also fold this event log (JSONL) for each user's fair-share WEIGHT, decayed "
        "USAGE and USAGE/WEIGHT in GPU-hours at its last event (docs/users.md).",
    ),
    output: OutputOption = Output.table,
    no_headers: NoHeadersOption = False,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
) -> None:
    """List each tenant (USER `*`) and each of its users with work or a limit of their own:
    jobs running, GPUs held, jobs pending, and SUBMITTED (pending plus running, what the
    submit limit bounds), each `used/limit` where a limit is in force (docs/users.md), and
    GPUS-BY-MODEL for users bound per GPU model.
    With `--log`, also each user's fair-share weight, time-decayed usage and usage over
    weight: within a tenant, the queue puts the lowest USAGE/WEIGHT's jobs first. Exit 2
    for a log that cannot be read."""
    from gpuledger.projections.users import users_rows

    path = db_path(db, data)
    rows = _query(path, lambda con: users_rows(con, tenant=tenant))
    if log is not None:
        rows = _with_shares(rows, log, tenant)
    _print_rows(rows, _table, output, no_headers)
