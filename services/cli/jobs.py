"""`gpuledger jobs`: the jobs table (kubectl-like, `--watch`)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpuledger.projections.queries import (
    job_state_text,
    jobs_count,
    jobs_rows,
)
from gpuledger.services.cli.output import (
    NoHeadersOption,
    Output,
    OutputOption,
    _print_rows,
    humanize_ms,
)
from gpuledger.services.cli.reading import (
    DEFAULT_DATA,
    DataOption,
    DbOption,
    _query,
    db_path,
)

JOBS_LIMIT = 100
"""`gpuledger jobs` lists at most this many jobs unless told otherwise (`--limit`)."""
# ---------------------------------------------------------------- jobs / nodes / tenants


def _job_table(rows: list[dict[str, Any]], wide: bool) -> tuple[list[str], list[list[Any]]]:
    from gpuledger.events.ids import job_name
    from gpuledger.projections.queries import gpus_label

    headers = ["NAME", "TENANT", "PRIORITY", "STATE", "GPUS", "AGE", "REASON"]
    if wide:
        headers += ["USER", "PRIO", "SLO", "ATTEMPTS", "PREEMPTED", "NODES", "MESSAGE"]
    out = []
    for r in rows:
        age = r["now_ms"] - r["submitted_at_ms"] if r["submitted_at_ms"] is not None else None
        gl = gpus_label(
            r["replicas"], r["member_gpus"], r["member_gpu_milli"], r["member_mig_profile"]
        )
        up = r.get("members_up")
        if up and r["replicas"] and up != r["replicas"]:  # a gang running with fewer members
            gl = (
                gpus_label(up, r["member_gpus"], r["member_gpu_milli"], r["member_mig_profile"])
                + f"/{r['replicas']}"
            )
        line = [
            job_name(r["job_id"]),  # the id its tenant submitted (ids are per tenant)
            r["tenant"],
            r["priority_class"],
            job_state_text(r),
            gl,
            humanize_ms(age),
            r["reason"] or "",
        ]
        if wide:
            line += [
                r.get("user") or "-",
                r["priority"],
                r["slo_class"],
                r["attempts"],
                r["preemptions"],
                r["nodes"] or "",
                r["message"] or "",
            ]
        out.append(line)
    return headers, out


def jobs_command(
    output: OutputOption = Output.table,
    no_headers: NoHeadersOption = False,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant (and its children).")
    ] = None,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
    tasks: Annotated[
        bool,
        typer.Option(
            "--tasks", help="Also list array tasks (<array>@<i>), not only their array's line."
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "-w",
            "--watch",
            help="Then print each job again when its state or reason changes (Ctrl-C stops).",
        ),
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between polls with --watch.")
    ] = 1.0,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=0,
            help="At most this many jobs, the most recently submitted (0: every job); a line "
            "on stderr says how many were left out.",
        ),
    ] = JOBS_LIMIT,
    user: Annotated[
        str | None,
        typer.Option("--user", help="Only this user's jobs (`-`: the jobs that name no user)."),
    ] = None,
) -> None:
    """List jobs: NAME TENANT PRIORITY STATE GPUS AGE REASON (oldest submission first)."""
    path = db_path(db, data)
    filters: dict[str, Any] = {"state": state, "tenant": tenant, "tasks": tasks, "user": user}

    total: list[int] = []

    def rows_and_total(con, **kw: Any) -> list[dict[str, Any]]:
        rows = jobs_rows(con, **kw, limit=limit or None)
        if limit and len(rows) >= limit and not total:  # one connection for both
            total.append(jobs_count(con, **kw))
        return rows

    def fetch() -> list[dict[str, Any]]:
        return _query(path, rows_and_total, **filters)

    rows = fetch()
    _print_rows(rows, _job_table, output, no_headers)
    if total and total[0] > len(rows):
        typer.echo(
            f"(the {len(rows):,} most recently submitted of {total[0]:,} jobs; "
            "--limit 0 lists every job)",
            err=True,
        )
    if not watch:
        return
    seen = {r["job_id"]: (r["state"], r.get("reason")) for r in rows}
    try:
        while True:  # kubectl -w: one more line per change, no repeated header
            time.sleep(interval)
            changed = [r for r in fetch() if seen.get(r["job_id"]) != (r["state"], r.get("reason"))]
            for r in changed:
                seen[r["job_id"]] = (r["state"], r.get("reason"))
            if changed:
                _print_rows(changed, _job_table, output, no_headers=True)
    except KeyboardInterrupt:
        return
