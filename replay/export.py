"""Logs as files: export the live stream to JSONL (the log format) or Parquet (one row per
message, the event as JSON text plus its envelope columns); read any of them, a partitioned
Parquet history (`replay.parquet`: a directory), or the log a DuckDB projection recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.logio import write_log


async def stream_entries(
    bus,
    since_ms: int | None = None,
    until_ms: int | None = None,
    on_skip: Callable[[int, str], None] | None = None,
    after_seq: int = 0,
) -> AsyncIterator[tuple[int, str, ev.Event]]:
    """Decoded `(seq, subject, event)` from the stream after `after_seq`, optionally within a
    time window. Undecodable messages are reported through `on_skip` (they are dead-lettered
    live)."""
    async for rec in bus.read_all(after_seq):
        try:
            event = ev.at_receipt(ev.decode(rec.data), rec.received_ms)
        except Exception as exc:  # noqa: BLE001 - UndecodableEvent; no message stops an export
            if on_skip is not None:
                on_skip(rec.seq, str(exc))
            continue
        if since_ms is not None and event.occurred_at_ms < since_ms:
            continue
        if until_ms is not None and event.occurred_at_ms > until_ms:
            continue
        yield rec.seq, rec.subject, event


def write_parquet(path: str | Path, entries: list[tuple[int, str, ev.Event]]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "seq": pa.array([s for s, _, _ in entries], pa.int64()),
            "subject": [sub for _, sub, _ in entries],
            "type": [type(e).__struct_config__.tag for _, _, e in entries],
            "event_id": [e.event_id for _, _, e in entries],
            "occurred_at_ms": pa.array([e.occurred_at_ms for _, _, e in entries], pa.int64()),
            "correlation_id": [e.correlation_id for _, _, e in entries],
            "producer": [e.producer for _, _, e in entries],
            "event": [ev.encode(e).decode() for _, _, e in entries],
        }
    )
    pq.write_table(table, path)
    return table.num_rows


def read_parquet(path: str | Path):
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["seq", "subject", "event"])
    for seq, subject, raw in zip(
        *(table.column(c).to_pylist() for c in ("seq", "subject", "event")), strict=True
    ):
        yield seq, subject, ev.decode(raw)


def read_projection(path: str | Path):
    """The log as a DuckDB projection recorded it (its `events` table keeps every message's
    canonical JSON); undecodable messages are left out as they are in exports."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT seq, subject, payload::VARCHAR FROM events WHERE type <> 'Undecodable' ORDER BY seq"
        ).fetchall()
    finally:
        con.close()
    for seq, subject, payload in rows:
        yield seq, subject, ev.decode(payload)


def write_any(path: str | Path, entries: list[tuple[int, str, ev.Event]]) -> int:
    if str(path).endswith(".parquet"):
        return write_parquet(path, entries)
    return write_log(path, entries)


def read_any(path: str | Path):
    from gpuledger.replay import parquet
    from gpuledger.replay.logio import read_log

    if Path(path).is_dir():
        return parquet.read_history(path)  # `export --format parquet`: a partitioned history
    if str(path).endswith(".parquet"):
        return read_parquet(path)
    if str(path).endswith(".duckdb"):
        return read_projection(path)
    return read_log(path)
