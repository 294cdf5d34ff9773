"""How the read commands (`sql`, `why`, `jobs`, `nodes`, `tenants`, `acct`) open the
projection: through the projector when one runs, else the file read-only; a damaged file
ends in one line."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.runtime.status_file import DEFAULT_DATA

DB_NAME = "projection.duckdb"


DbOption = Annotated[Path | None, typer.Option("--db", help="Projection database.")]
"""`--db` of the read commands (default: `--data`'s projection.duckdb)."""
DataOption = Annotated[Path, typer.Option("--data", help="Data directory.")]
"""`--data` of the read commands."""


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


def query_result(con: Any, query: str) -> tuple[list[str], list[tuple]]:
    """The column names and rows `query` answers on the DuckDB connection `con` (none for a
    statement that answers no rows)."""
    cur = con.execute(query)
    if cur.description is None:
        return [], []
    return [d[0] for d in cur.description], cur.fetchall()
