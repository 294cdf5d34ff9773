"""`gpuledger users`: each tenant's and user's use against its limits (projections/users.py)."""

from __future__ import annotations

from typing import Any

import typer

from gpuledger.services.cli.output import NoHeadersOption, Output, OutputOption, _print_rows
from gpuledger.services.cli.reading import DEFAULT_DATA, DataOption, DbOption, _query, db_path


def _of(value: Any, limit: Any) -> str:
    """`3/8` against a limit, `3` without one."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if limit is None:
        return text
    return f"{text}/{limit:g}" if isinstance(limit, float) else f"{text}/{limit}"


def _table(rows: list[dict[str, Any]], wide: bool) -> tuple[list[str], list[list[Any]]]:
    headers = ["TENANT", "USER", "RUNNING", "GPUS", "PENDING", "SUBMITTED", "ARRAY-SIZE"]
    out = [
        [
            r["tenant"],
            r["user"],
            _of(r["running_jobs"], r["running_jobs_limit"]),
            _of(r["gpus"], r["gpus_limit"]),
            r["pending_jobs"],
            _of(r["submit_jobs"], r["submit_jobs_limit"]),
            "-" if r["array_size_limit"] is None else r["array_size_limit"],
        ]
        for r in rows
    ]
    return headers, out


def users_command(
    tenant: str | None = typer.Option(
        None, "--tenant", help="Only this tenant (and its children)."
    ),
    output: OutputOption = Output.table,
    no_headers: NoHeadersOption = False,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
) -> None:
    """List each tenant (USER `*`) and each of its users with work or a limit of their own:
    jobs running, GPUs held, jobs pending, and SUBMITTED (pending plus running, what the
    submit limit bounds), each `used/limit` where a limit is in force (docs/users.md)."""
    from gpuledger.projections.users import users_rows

    path = db_path(db, data)
    _print_rows(
        _query(path, lambda con: users_rows(con, tenant=tenant)), _table, output, no_headers
    )
