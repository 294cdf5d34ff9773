"""`gpuledger sql`: a DuckDB query over the projection, as a table, CSV, JSON or Parquet."""

from __future__ import annotations

import csv
import io
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.output import (
    _json_default,
    render_table,
)
from gpuledger.services.cli.reading import (
    DEFAULT_DATA,
    DataOption,
    _connect,
    _undamaged,
    db_path,
    query_result,
)


class SqlFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


# ---------------------------------------------------------------- sql


def run_sql(path: Path, query: str) -> tuple[list[str], list[tuple]]:
    con = _connect(path)
    try:
        with _undamaged(path):
            return query_result(con, query)
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
    data: DataOption = DEFAULT_DATA,
    parquet: Annotated[
        Path | None,
        typer.Option("--parquet", help="Query an `export --format parquet` directory instead."),
    ] = None,
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
        if parquet is not None:
            fail("-o parquet reads a projection: query --parquet DIR with -o csv, json or table", 2)
        _sql_parquet(db_path(db, data), query, to)
        return
    try:
        if parquet is not None:
            from gpuledger.services.cli.history import parquet_sql

            cols, rows = parquet_sql(parquet, query)
        else:
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
