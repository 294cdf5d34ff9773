"""`gpuledger export --format parquet DIR` and `export --from LOG`: the log as a Parquet
history (replay/parquet.py), appended to incrementally from the live stream or a log file."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.services.cli.common import fail


def _within(entries, since: int | None, until: int | None):
    for seq, subject, event in entries:
        if since is not None and event.occurred_at_ms < since:
            continue
        if until is not None and event.occurred_at_ms > until:
            continue
        yield seq, subject, event


def _live(out: Path, nats_url, creds, since, until, after_seq: int) -> list:
    import asyncio

    from gpuledger.replay.export import stream_entries
    from gpuledger.services.cli.connect import cli_bus, resolve_access

    access = resolve_access(nats_url, creds)

    async def main() -> list:
        bus = await cli_bus(access, ensure=False)
        try:
            return [e async for e in stream_entries(bus, since, until, after_seq=after_seq)]
        finally:
            await bus.close()

    return asyncio.run(main())


def export_history(
    out: Path,
    format_: str,
    from_log: list | None,
    nats_url: str | None,
    creds: Path | None,
    window: tuple[int | None, int | None],
    tables: bool,
) -> None:
    """Write `from_log`'s entries (or, when None, the live stream's) within `window` (epoch ms,
    either end open) to `out`: a log file (`format_` file) or a Parquet history."""
    from gpuledger.replay import parquet

    since_ms, until_ms = window
    if format_ == "file":
        from gpuledger.replay.export import write_any

        n = write_any(out, list(_within(from_log or [], since_ms, until_ms)))
        typer.echo(f"exported {n} events to {out}")
        return
    if out.exists() and not out.is_dir():
        fail(f"{out}: --format parquet writes a directory, and this is a file", 2)
    try:
        mark = parquet.read_manifest(out)["last_seq"]
        if from_log is not None:
            entries = _within(from_log, since_ms, until_ms)
        else:
            entries = _live(out, nats_url, creds, since_ms, until_ms, mark)
        done = parquet.export_events(out, entries)
    except parquet.ParquetHistoryError as exc:
        fail(str(exc), 2)
    typer.echo(
        f"appended {done['appended']} events to {out} (high-water mark seq {done['last_seq']}; "
        f"{done['rows']} rows in all)"
    )
    if tables and (done["appended"] or not (out / parquet.TABLES).exists()):
        import tempfile

        from gpuledger.projections.store import rebuild

        with tempfile.TemporaryDirectory(prefix="gpuledger-export-") as tmp:
            db = Path(tmp) / "projection.duckdb"
            rebuild(parquet.read_history(out), db)
            names = parquet.export_tables(out, db)
        typer.echo(f"wrote the projection's {len(names)} tables to {out / parquet.TABLES}")


def parquet_sql(out: Path, query: str) -> tuple[list[str], list[tuple]]:
    """`gpuledger sql --parquet DIR`: the query over the export's views (replay.parquet.connect)."""
    from gpuledger.replay import parquet
    from gpuledger.services.cli.reading import query_result

    try:
        con = parquet.connect(out)
    except parquet.ParquetHistoryError as exc:
        fail(str(exc), 2)
    try:
        return query_result(con, query)
    finally:
        con.close()
