"""Audit commands over the DuckDB projection: `sql`, `why`, `jobs`, `nodes`, `tenants`,
`project`. Mounted on the main app with `register(app)`; the functions that compute the
answers (`why_report`, `jobs_rows`, ...) are usable without typer.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuledger.projections.queries import (
    UnknownJob,
    gpus_text,
    job_state_text,
    jobs_count,
    jobs_rows,
    nodes_rows,
    preemption_outlook,
    tenants_rows,
    why_report,
)
from gpuledger.services.cli.common import fail

DEFAULT_DATA = Path(".gpuledger")
DB_NAME = "projection.duckdb"
JOBS_LIMIT = 100
"""`gpuledger jobs` lists at most this many jobs unless told otherwise (`--limit`)."""


class Output(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


class SqlFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


class WhyOutput(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


def db_path(db: Path | None, data: Path | None) -> Path:
    """`--db` if given, else `<--data>/projection.duckdb` (default `.gpuledger/`)."""
    if db is not None:
        return db
    return (data or DEFAULT_DATA) / DB_NAME


def _connect(path: Path):
    """A read-only connection: through the projector that writes `path` when one runs
    (projections/served.py; duckdb is not even imported then), else the file opened
    read-only (nobody writes it; waiting up to 10 s, then exit 4 naming who holds it). A
    warning on stderr when the projection is behind the stream (per `gpuledger up`'s status
    file next to it)."""
    from gpuledger.projections.served import connect_served

    served = connect_served(path)
    if served is not None:
        _warn_if_stale(served, path)
        return served
    from gpuledger.projections.reading import ProjectionBusy, ProjectionError, connect_readonly

    try:
        con = connect_readonly(path)
    except ProjectionBusy as exc:
        fail(
            f"projection busy: {exc} for more than 10s (the projector writes it, or it is "
            "catching up a backlog: retry; `gpuledger status` shows its progress)",
            4,
        )
    except ProjectionError as exc:
        fail(str(exc))
    _warn_if_stale(con, path)
    return con


def _warn_if_stale(con, path: Path) -> None:
    from gpuledger.services.runtime.status_file import STATUS_FILE, read_json, staleness

    try:
        db_seq = con.execute("SELECT last_seq FROM projector_meta WHERE id = 1").fetchone()[0]
    except Exception:  # noqa: BLE001 - not a projection the projector wrote: nothing to say
        return
    warning = staleness(read_json(path.parent / STATUS_FILE), db_seq)
    if warning:
        typer.echo(f"warning: {warning}", err=True)


# ---------------------------------------------------------------- formatting helpers


def tenant_key(con, tenant: str, job: str) -> str | None:
    """The projection's key of `tenant`'s job `job` (the id itself, or the tenant key of a
    later tenant's job of a taken id); None when the tenant has neither."""
    from gpuledger.events.ids import tenant_job_key

    candidates = (job, tenant_job_key(tenant, job))
    rows = con.execute(
        "SELECT job_id FROM jobs WHERE job_id IN (?, ?) AND tenant = ?", [*candidates, tenant]
    ).fetchall()
    return rows[0][0] if rows else None


@contextlib.contextmanager
def _undamaged(path: Path):
    """A query over a truncated or garbled projection file ends the command with one line
    naming the file and `gpuledger project --rebuild`, never a traceback."""
    try:
        yield
    except Exception as exc:
        if "duckdb" not in sys.modules:  # a read through the projector: no file was read here
            raise
        from gpuledger.projections.reading import damaged, is_damage

        if not is_damage(exc):
            raise
        fail(str(damaged(path, str(exc).removeprefix("IO Error: "))))


def _query(path: Path, rows_fn, **filters: Any) -> list[dict[str, Any]]:
    """Rows from one read-only connection to the projection."""
    con = _connect(path)
    try:
        with _undamaged(path):
            return rows_fn(con, **filters)
    finally:
        con.close()


def humanize_ms(ms: int | float | None) -> str:
    """kubectl-like age: `45s`, `3m`, `2h`, `5d` (`<unknown>` when not known)."""
    if ms is None:
        return "<unknown>"
    s = max(0, int(ms // 1000))
    if s < 120:
        return f"{s}s"
    if s < 3600 * 2:
        return f"{s // 60}m"
    if s < 86400 * 2:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def render_table(
    headers: list[str], rows: list[list[Any]], *, no_headers: bool = False, upper: bool = True
) -> str:
    """Aligned columns with upper-case headers, like kubectl: the layout of a rich table with
    no box, three spaces between columns, cells as plain text (never markup) and never
    wrapped, whatever the terminal's width; trailing spaces removed. Cell widths are rich's
    (`cell_len`: wide characters count twice). Laid out here rather than by rich's Table,
    which takes about a millisecond per row: `render_table_rich` is the specification, and a
    test holds the two equal."""
    from rich.cells import cell_len

    head = [h.upper() for h in headers] if upper else list(headers)
    lines = [] if no_headers else [head]
    lines += [["<none>" if v is None else str(v) for v in r] for r in rows]
    if not lines:
        return ""
    if any(not v.isprintable() for r in lines for v in r):
        return render_table_rich(headers, rows, no_headers=no_headers, upper=upper)  # \n, \t
    widths = [0] * len(head)
    for r in lines:
        widths = [max(w, cell_len(v)) for w, v in zip(widths, r, strict=True)]
    out = []
    for r in lines:
        cells = [v + " " * (w - cell_len(v)) for v, w in zip(r, widths, strict=True)]
        out.append("   ".join(cells).rstrip())
    return "\n".join(out)


def render_table_rich(
    headers: list[str], rows: list[list[Any]], *, no_headers: bool = False, upper: bool = True
) -> str:
    """`render_table` as rich lays it out (the specification of its layout; slower)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    head = [h.upper() for h in headers] if upper else list(headers)
    table = Table(
        box=None,
        show_header=not no_headers,
        header_style="",
        pad_edge=False,
        padding=(0, 3, 0, 0),
        show_edge=False,
    )
    for h in head:
        table.add_column(Text(h), no_wrap=True, overflow="ignore")
    for r in rows:
        table.add_row(*(Text("<none>" if v is None else str(v)) for v in r))
    console = Console(
        width=1_000_000, color_system=None, force_terminal=False, highlight=False, soft_wrap=True
    )
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def _json_default(o: Any) -> Any:
    return str(o)


def _emit_structured(data: Any, fmt: str) -> None:
    if fmt == "yaml":
        import yaml

        typer.echo(
            yaml.safe_dump(
                json.loads(json.dumps(data, default=_json_default)), sort_keys=False
            ).rstrip()
        )
    else:
        typer.echo(json.dumps(data, indent=2, default=_json_default))


# ---------------------------------------------------------------- sql


def run_sql(path: Path, query: str) -> tuple[list[str], list[tuple]]:
    con = _connect(path)
    try:
        with _undamaged(path):
            cur = con.execute(query)
            if cur.description is None:
                return [], []
            return [d[0] for d in cur.description], cur.fetchall()
    finally:
        con.close()


def iso_ms(ms: int) -> str:
    """An epoch-ms point in time as ISO 8601 UTC with milliseconds: `2026-11-27T09:03:57.120Z`."""
    import datetime as dt

    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def readable_rows(cols: list[str], rows: list[tuple]) -> list[list[Any]]:
    """Rows with every point in time in ISO 8601 UTC: epoch-ms integer columns named `*_ms`
    (not durations: projections/catalog.py `is_time_column`) and TIMESTAMP values."""
    import datetime as dt

    from gpuledger.projections.catalog import is_time_column

    times = [is_time_column(c) for c in cols]
    out = []
    for r in rows:
        row = []
        for v, is_time in zip(r, times, strict=True):
            if is_time and isinstance(v, int) and not isinstance(v, bool):
                v = iso_ms(v)
            elif isinstance(v, dt.datetime):
                v = (v if v.tzinfo else v.replace(tzinfo=dt.UTC)).isoformat().replace("+00:00", "Z")
            row.append(v)
        out.append(row)
    return out


def sql_command(
    query: Annotated[str, typer.Argument(help="A DuckDB SQL query over the projection.")],
    format: Annotated[
        SqlFormat,
        typer.Option(
            "--output",
            "-o",
            "--format",
            "-f",
            help="table (and the row count), csv, json, or parquet (typed columns, to --to FILE "
            "or a redirected stdout).",
        ),
    ] = SqlFormat.table,
    to: Annotated[
        Path | None, typer.Option("--to", help="Write the result to FILE instead of stdout.")
    ] = None,
    epoch_ms: Annotated[
        bool,
        typer.Option(
            "--epoch-ms", help="Print `*_ms` points in time as the stored integers, not ISO 8601."
        ),
    ] = False,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="Projection database (default <data>/projection.duckdb)."),
    ] = None,
    data: Annotated[Path, typer.Option("--data", help="Data directory.")] = DEFAULT_DATA,
) -> None:
    """Run a SQL query over the projection (tables: events, jobs, allocations, preemptions,
    ...; views: why_pending, who_preempted, tenant_usage, utilisation, fragmentation, slo,
    gpu_hours_daily, job_wait_total, longest_waiters, preemptions_daily, job_accounting, and
    <table>_ts with TIMESTAMP columns; `gpuledger schema --projection` lists every column).
    Points in time (`*_ms` columns, TIMESTAMPs) print as ISO 8601 UTC (`--epoch-ms`: as
    stored). The table ends with its row count, on stdout like the rows; csv, json and parquet
    carry the rows only. Exit codes: 1 the query failed, 2 invalid options, 4 projection
    busy."""
    import duckdb

    if format == SqlFormat.parquet:
        _sql_parquet(db_path(db, data), query, to)
        return
    try:
        cols, rows = run_sql(db_path(db, data), query)
    except duckdb.Error as exc:
        fail("query failed: " + " ".join(str(exc).split()))
    shown = [list(r) for r in rows] if epoch_ms else readable_rows(cols, rows)
    if format == SqlFormat.json:
        text = json.dumps(
            [dict(zip(cols, r, strict=True)) for r in shown], indent=2, default=_json_default
        )
    elif format == SqlFormat.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        w.writerows(shown)
        text = buf.getvalue().rstrip("\n")
    else:
        table = render_table(cols, shown, upper=False) + "\n" if cols else ""
        text = f"{table}({len(rows)} row{'s' if len(rows) != 1 else ''})"
    if to is None:
        typer.echo(text)
        return
    try:
        to.write_text(text + "\n")
    except OSError as exc:
        fail(f"{to}: cannot write: {exc.strerror}", 2)


def _sql_parquet(path: Path, query: str, to: Path | None) -> None:
    """`sql -o parquet`: the query's rows with their own column types, written by DuckDB."""
    import tempfile

    import duckdb

    if to is None and sys.stdout.isatty():
        fail("-o parquet is binary: pass --to FILE, or redirect stdout to a file or a pipe", 2)
    con = _connect(path)
    if getattr(con, "served", False):
        _served_parquet(con, query, to)
        return
    try:
        with tempfile.TemporaryDirectory(prefix="gpuledger-sql-") as tmp:
            target = Path(tmp) / "result.parquet" if to is None else to
            quoted = str(target).replace("'", "''")
            try:
                con.execute(f"COPY ({query.rstrip().rstrip(';')}) TO '{quoted}' (FORMAT parquet)")
            except duckdb.Error as exc:
                fail("query failed: " + " ".join(str(exc).split()))
            if to is None:
                sys.stdout.flush()
                sys.stdout.buffer.write(target.read_bytes())
                sys.stdout.buffer.flush()
    finally:
        con.close()


def _served_parquet(con, query: str, to: Path | None) -> None:
    """`sql -o parquet` through the projector: its Arrow answer written as Parquet here."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.ipc.open_stream(con.arrow_ipc(query.rstrip().rstrip(";"))).read_all()
    except duckdb.Error as exc:
        fail("query failed: " + " ".join(str(exc).split()))
    finally:
        con.close()
    if to is not None:
        pq.write_table(table, to)
        return
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    sys.stdout.flush()
    sys.stdout.buffer.write(sink.getvalue().to_pybytes())
    sys.stdout.buffer.flush()


# ---------------------------------------------------------------- why


def _fmt_details(d: Any, indent: str = "    ") -> list[str]:
    if not d:
        return []
    if isinstance(d, dict):
        lines = []
        for k, v in d.items():
            if isinstance(v, (dict, list)):
                lines.append(f"{indent}{k}: {json.dumps(v, default=_json_default)}")
            else:
                lines.append(f"{indent}{k}: {v}")
        return lines
    return [f"{indent}{json.dumps(d, default=_json_default)}"]


def refused_lines(refused: list[dict[str, Any]]) -> list[str]:
    """One line per refused request naming the job (conflicting submission, unknown cancel)."""
    return [
        f"Refused:   {x['request']} at seq {x['request_seq']} from {x['tenant']}: "
        f"{x['reason']}: {x['message']}"
        for x in refused
    ]


def refusal_text(x: dict[str, Any]) -> str:
    """One refused event, as `why` shows it."""
    return (
        f"{x['event']} (seq {x['seq']}, from {x['producer'] or '?'}): {x['code']}: "
        f"{x['message']}; the ledger and this projection ignore it"
    )


def _why_header(r: dict[str, Any]) -> list[str]:
    """Job, tenant, class, priority, size; state and age; reason and message."""
    lines = [
        f"Job:       {r['job']}  (tenant {r['tenant']}, class {r['priority_class'] or '-'}, "
        f"priority {'-' if r['priority'] is None else r['priority']}, {r['gpus']} GPUs)",
        f"State:     {r.get('state_text') or r['state']}"
        + (
            f" for {humanize_ms((r['age_s'] or 0) * 1000)} since submission"
            if r.get("age_s") is not None
            else ""
        ),
    ]
    if r["reason"]:
        lines.append(f"Reason:    {r['reason']}")
    if r["message"]:
        lines.append(f"Message:   {r['message']}")
    return lines


def _why_service(s: dict[str, Any] | None) -> list[str]:
    """A service's replicas (running, being preempted, pending) and its disruption budget."""
    if not s:
        return []
    lines = [
        f"Replicas:  {s['running']} running, {s['preempting']} being preempted, {s['pending']} "
        f"pending of {s['replicas']} wanted"
        + (f"; {s['stopping']} stopping" if s["stopping"] else ""),
        f"Budget:    min_available {s['min_available']}: at most {s['disruption_budget']} down "
        f"at once by preemption; {s['evictable_now']} more may be evicted now",
    ]
    for x in s["replica_states"]:
        if x["state"] in ("pending", "preempting"):
            lines.append(
                f"           {x['replica']}: {x['state']}"
                + (f" ({x['reason']})" if x["reason"] else "")
            )
    return lines


def _why_pending(p: dict[str, Any] | None) -> list[str]:
    """How long, where in the queue, whether preemption would help, the node histogram."""
    if not p:
        return []
    lines = [
        f"Waiting:   {humanize_ms(p['waiting_s'] * 1000)}; queue position {p['queue_position']}"
    ]
    lines += preemption_outlook(p)
    if p["node_histogram"]:
        hist = p["node_histogram"]
        if isinstance(hist, dict):
            lines.append("Nodes:     " + ", ".join(f"{v} {k}" for k, v in hist.items()))
        else:
            lines.append(f"Nodes:     {json.dumps(hist)}")
    return lines


def _why_details(r: dict[str, Any]) -> list[str]:
    """The decision's details not already shown by the pending block."""
    shown = (
        {"queue_position", "preemption_would_help", "nodes", "node_histogram"}
        if r.get("pending")
        else set()
    )
    rest = (
        {k: v for k, v in r["details"].items() if k not in shown}
        if isinstance(r["details"], dict)
        else r["details"]
    )
    return ["Details:", *_fmt_details(rest)] if rest else []


def _why_allocation(r: dict[str, Any]) -> list[str]:
    a = r.get("allocation")
    return [f"Allocation: {a['id']} on {a['nodes']} ({a['gpus']} GPUs)"] if a else []


def _alternative_lines(alts: Any) -> list[str]:
    """The victim sets the preemption service considered and why it rejected each."""
    if not alts:
        return []
    lines = ["    alternatives considered and rejected:"]
    for alt in alts if isinstance(alts, list) else [alts]:
        if isinstance(alt, dict):
            victims = alt.get("victims", alt.get("victim", "?"))
            why = alt.get("rejected", alt.get("reason", alt.get("why", "")))
            lines.append(f"      - {json.dumps(victims)}: {why}")
        else:
            lines.append(f"      - {json.dumps(alt)}")
    return lines


def _preemption_lines(i: int, x: dict[str, Any]) -> list[str]:
    """One preemption the job suffered: by whom, why, the lost work, the alternatives."""
    from gpuledger.events.reasons import PreemptionReason

    lost = x["lost_gpu_seconds"]
    resized = (x.get("details") or {}).get("resized") if x["outcome"] == "shrunk" else None
    what = (
        f"Migrated #{i}: for {x['by']}"
        if x["reason"] == PreemptionReason.Consolidate
        else f"Preempted #{i}: shrunk from {resized['from']} to {resized['to']} members by {x['by']}"
        if resized
        else f"Preempted #{i}: by {x['by']}"
        if x["by"]
        else f"Evicted #{i}: by the operator"  # a drain (docs/operators-day.md)
    )
    by = f" (tenant {x['by_tenant']}, priority {x['by_priority']})," if x["by"] else ","
    lines = [
        f"{what}{by} reason {x['reason']}, allocation {x['allocation']}, outcome {x['outcome']}"
    ]
    if x["message"]:
        lines.append(f"    why:          {x['message']}")
    lines.append(
        f"    lost work:    {lost:.0f} GPU-seconds ({lost / 3600:.2f} GPU-hours); "
        f"checkpointed: {'yes' if x['checkpointed'] else 'no'}"
        + (
            f"; resumes from {x['saved_progress_s']:.0f}s of progress"
            if x["saved_progress_s"]
            else ""
        )
    )
    return lines + _alternative_lines(x["alternatives"])


def _why_preemptions(r: dict[str, Any]) -> list[str]:
    """Preemptions the job suffered, then the ones it caused."""
    from gpuledger.events.reasons import PreemptionReason

    lines: list[str] = []
    for i, x in enumerate(r["preempted"], 1):
        lines += _preemption_lines(i, x)
    for x in r["preempted_others"]:
        consolidated = x["reason"] == PreemptionReason.Consolidate
        verb = "Migrated" if consolidated else "Preempted"  # prose, not a code
        lines.append(
            f"{verb} {x['victim']} ({x['reason']}, lost {x['lost_gpu_seconds']:.0f} GPU-seconds)"
        )
    return lines


def _why_defrag(r: dict[str, Any]) -> list[str]:
    """Consolidations and MIG re-geometries decided for the job (issue 16)."""
    return [f"Defrag:    {x['message']}" for x in r.get("defrag") or ()]


def _why_history(r: dict[str, Any]) -> list[str]:
    if not r["transitions"]:
        return []
    return [
        "History:   "
        + " -> ".join(
            t["to"] + (f"({t['reason']})" if t["reason"] else "") for t in r["transitions"]
        )
    ]


def render_why(r: dict[str, Any]) -> str:
    """The `why` report as text: header, pending block, details, allocation, preemptions,
    refused requests, history (each a named step; a missing part prints nothing)."""
    lines = [
        *_why_header(r),
        *_why_service(r.get("service")),
        *_why_pending(r.get("pending")),
        *_why_details(r),
        *_why_allocation(r),
        *_why_preemptions(r),
        *_why_defrag(r),
        *refused_lines(r.get("refused") or []),
        *(f"Refused:   {refusal_text(x)}" for x in r.get("refusals") or ()),
        *_why_history(r),
    ]
    return "\n".join(lines)


def why_command(
    job: Annotated[str, typer.Argument(help="Job id.")],
    output: Annotated[
        WhyOutput, typer.Option("-o", "--output", help="text, json or yaml.")
    ] = WhyOutput.text,
    db: Annotated[Path | None, typer.Option("--db", help="Projection database.")] = None,
    data: Annotated[Path, typer.Option("--data", help="Data directory.")] = DEFAULT_DATA,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The job's tenant: JOB is then the id that tenant submitted (job ids are per "
            "tenant; `jobs` shows a later tenant's job of a taken id under its key, ID~~DIGEST).",
        ),
    ] = None,
) -> None:
    """Why is JOB pending (reason, message, node histogram, queue position, whether
    preemption would help) or why was it preempted (by whom, why, lost work, alternatives)?"""
    path = db_path(db, data)
    con = _connect(path)
    try:
        with _undamaged(path):
            key = job if tenant is None else tenant_key(con, tenant, job)
            if key is None:
                fail(f"no job {job!r} of tenant {tenant!r} in the projection at {path}", 1)
            report = why_report(con, key)
    except UnknownJob as unknown:
        typer.echo(f"error: no job {job!r} in the projection at {path}", err=True)
        for line in refused_lines(unknown.refused):  # e.g. a refused cancel of this id
            typer.echo(line, err=True)
        for x in unknown.refusals:  # e.g. a submission on another tenant's subject
            typer.echo(f"Refused:   {refusal_text(x)}", err=True)
        raise typer.Exit(1) from None
    finally:
        con.close()
    if output == WhyOutput.text:
        typer.echo(render_why(report))
    else:
        _emit_structured(report, output.value)


# ---------------------------------------------------------------- jobs / nodes / tenants


def _job_table(rows: list[dict[str, Any]], wide: bool) -> tuple[list[str], list[list[Any]]]:
    from gpuledger.events.ids import job_name
    from gpuledger.projections.queries import gpus_label

    headers = ["NAME", "TENANT", "PRIORITY", "STATE", "GPUS", "AGE", "REASON"]
    if wide:
        headers += ["PRIO", "SLO", "ATTEMPTS", "PREEMPTED", "NODES", "MESSAGE"]
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
                r["priority"],
                r["slo_class"],
                r["attempts"],
                r["preemptions"],
                r["nodes"] or "",
                r["message"] or "",
            ]
        out.append(line)
    return headers, out


def _structured_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "now_ms"} for r in rows]


def _print_rows(rows, table_fn, output: Output, no_headers: bool) -> None:
    if output in (Output.json, Output.yaml):
        _emit_structured(_structured_rows(rows), output.value)
        return
    headers, lines = table_fn(rows, output == Output.wide)
    if lines or not no_headers:
        typer.echo(render_table(headers, lines, no_headers=no_headers))


def jobs_command(
    output: Annotated[
        Output, typer.Option("-o", "--output", help="table, wide, json or yaml.")
    ] = Output.table,
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="Leave out the header line.")
    ] = False,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant (and its children).")
    ] = None,
    db: Annotated[Path | None, typer.Option("--db", help="Projection database.")] = None,
    data: Annotated[Path, typer.Option("--data", help="Data directory.")] = DEFAULT_DATA,
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
) -> None:
    """List jobs: NAME TENANT PRIORITY STATE GPUS AGE REASON (oldest submission first)."""
    path = db_path(db, data)
    filters: dict[str, Any] = {"state": state, "tenant": tenant, "tasks": tasks}

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


def _node_table(rows, wide):
    headers = ["NAME", "STATUS", "GPUS", "ALLOCATED", "FREE", "MODEL", "AGE"]
    if wide:
        headers += ["POOL", "LEAF", "CLIQUES", "RUNNING", "LAST-HEARTBEAT", "SIMULATED"]
    out = []
    for r in rows:
        line = [
            r["node"],
            r["status"],
            r["gpus"],
            gpus_text(r["allocated_milli"]),
            gpus_text(r["free_milli"] if r["status"] == "ready" else 0),
            r["models"] or "",
            humanize_ms(r["now_ms"] - r["registered_at_ms"]),
        ]
        if wide:
            hb = r["last_heartbeat_ms"]
            line += [
                r["pool"],
                r["leaf_switch"] or "",
                r["cliques"],
                r["running_members"],
                humanize_ms(r["now_ms"] - hb) + " ago" if hb is not None else "<never>",
                r["simulated"],
            ]
        out.append(line)
    return headers, out


def nodes_command(
    output: Annotated[
        Output, typer.Option("-o", "--output", help="table, wide, json or yaml.")
    ] = Output.table,
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="Leave out the header line.")
    ] = False,
    db: Annotated[Path | None, typer.Option("--db", help="Projection database.")] = None,
    data: Annotated[Path, typer.Option("--data", help="Data directory.")] = DEFAULT_DATA,
) -> None:
    """List nodes: NAME STATUS GPUS ALLOCATED FREE MODEL AGE."""
    _print_rows(_query(db_path(db, data), nodes_rows), _node_table, output, no_headers)


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
    output: Annotated[
        Output, typer.Option("-o", "--output", help="table, wide, json or yaml.")
    ] = Output.table,
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="Leave out the header line.")
    ] = False,
    db: Annotated[Path | None, typer.Option("--db", help="Projection database.")] = None,
    data: Annotated[Path, typer.Option("--data", help="Data directory.")] = DEFAULT_DATA,
) -> None:
    """List tenants: quota (GPUs: guaranteed, limit, borrowing and lending limits), current
    allocation, borrowed GPU-hours, jobs."""
    _print_rows(_query(db_path(db, data), tenants_rows), _tenant_table, output, no_headers)


# ---------------------------------------------------------------- project


def project_command(
    rebuild_: Annotated[
        bool, typer.Option("--rebuild", help="Drop the projection and rebuild it from the log.")
    ] = False,
    log: Annotated[
        Path | None, typer.Option("--log", help="JSONL log (seq, subject, event per line).")
    ] = None,
    nats_url: Annotated[
        str | None, typer.Option("--nats-url", help="Project live from JetStream.")
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow/--no-follow",
            help="With --nats-url: keep consuming (default) or stop when caught up.",
        ),
    ] = True,
    db: Annotated[Path | None, typer.Option("--db", help="Projection database.")] = None,
    data: Annotated[Path, typer.Option("--data", help="Data directory.")] = DEFAULT_DATA,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON only.")
    ] = False,
    creds: Annotated[
        Path | None,
        typer.Option(
            "--creds",
            envvar="GPULEDGER_CREDS",
            help="With --nats-url: credential file (projector, auditor or admin).",
        ),
    ] = None,
) -> None:
    """Fold the log into the DuckDB projection (exactly once; resumes where it stopped)."""
    from gpuledger.projections.mappers import SequenceGap
    from gpuledger.projections.store import ProjectionError, catch_up, rebuild
    from gpuledger.replay.logio import LogFormatError

    path = db_path(db, data)
    if (log is None) == (nats_url is None):
        fail("give exactly one source: --log FILE.jsonl or --nats-url URL")
    try:
        if log is not None:
            if not log.exists():
                fail(f"no log file {log}")
            progress = None
            if not json_out and sys.stderr.isatty():

                def progress(n: int) -> None:
                    typer.echo(f"\r{n:,} events", err=True, nl=False)

            if rebuild_:
                stats = rebuild(log, path, progress=progress)
            else:
                stats = catch_up(log, path)
        else:
            import asyncio

            from gpuledger.projections.nats_source import run_projector

            if rebuild_:
                for p in (path, path.with_name(path.name + ".wal")):
                    if p.exists():
                        p.unlink()
            import nats.errors

            # --no-follow is one-shot: a few connection attempts, then a clear error.
            from gpuledger.services.cli.connect import resolve_access

            access = resolve_access(nats_url, creds, data)
            once = {} if follow else {"connect_attempts": 3, "connect_timeout": 2, "quiet": True}
            try:
                last = asyncio.run(
                    run_projector(
                        access.url,
                        path,
                        follow=follow,
                        connect_options={**once, **access.options()},
                        serve_reads=follow,
                    )
                )
            except KeyboardInterrupt:
                last = None
            except (OSError, nats.errors.Error) as exc:
                fail(f"cannot reach NATS at {nats_url}: {exc!r}", code=3)
            stats = {"last_seq": last}
    except SequenceGap as exc:
        fail(str(exc), code=3)
    except (ProjectionError, LogFormatError) as exc:
        fail(str(exc))
    stats["db"] = str(path)
    if json_out:
        typer.echo(json.dumps(stats))
    else:
        typer.echo(
            ", ".join(
                f"{k}={v if not isinstance(v, float) else round(v, 2)}" for k, v in stats.items()
            )
        )


def register(app: typer.Typer, nodes: bool = True) -> None:
    """Add `sql`, `why`, `jobs`, `nodes`, `tenants` and `project` to an app (the main app
    has a `nodes` group of its own, whose default is `nodes_command`)."""
    if nodes:
        app.command("nodes")(nodes_command)
    app.command("sql")(sql_command)
    app.command("why")(why_command)
    app.command("jobs")(jobs_command)
    app.command("tenants")(tenants_command)
    app.command("project")(project_command)
