"""The log as Hive-partitioned Parquet history: what Spark, Trino and DuckDB read unchanged.

Layout of an export directory (docs/parquet.md):

    OUT/_gpuledger_manifest.json                             high-water mark, files written
    OUT/events/date=YYYY-MM-DD/part-<first>-<last>.parquet   one row per event, by UTC day
    OUT/tables/<table>.parquet                               the projection's tables

Invariants: a row per stream message (`seq` unique and every `seq` up to the manifest's
`last_seq` present once); an export appends only messages above the high-water mark; a part
file is listed in the manifest before anyone is told it exists, and files an interrupted
export left unlisted are removed by the next one (so a re-run writes every row exactly once).
Files and the manifest are written under a dot-name and renamed into place: readers that skip
hidden files (all of them) never see half a file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpuledger import events as ev

MANIFEST = "_gpuledger_manifest.json"
"""Underscore-named: Spark, Trino (Hive) and pyarrow skip it when they list the data files."""

FORMAT = 1

EVENTS = "events"
"""The events dataset's root: only `date=` directories below it (Hive partitioning)."""

TABLES = "tables"

COLUMNS = (
    "seq",
    "time",
    "type",
    "subject",
    "tenant",
    "job",
    "node",
    "reason",
    "event_id",
    "occurred_at_ms",
    "causation_id",
    "correlation_id",
    "producer",
    "input_seq",
    "config_digest",
    "leader_epoch",
    "body",
)
"""Columns of a part file, in order (`date` is the partition: the directory name)."""


class ParquetHistoryError(ValueError):
    """A directory that is not a readable Parquet history (one line naming it and why)."""


def _schema():
    import pyarrow as pa

    s, i = pa.string(), pa.int64()
    return pa.schema(
        [
            ("seq", i),
            ("time", pa.timestamp("ms", tz="UTC")),
            ("type", s),
            ("subject", s),
            ("tenant", s),
            ("job", s),
            ("node", s),
            ("reason", s),
            ("event_id", s),
            ("occurred_at_ms", i),
            ("causation_id", s),
            ("correlation_id", s),
            ("producer", s),
            ("input_seq", i),
            ("config_digest", s),
            ("leader_epoch", i),
            ("body", s),
        ]
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def row(seq: int, subject: str, event: ev.Event) -> tuple:
    """One event as a row of `COLUMNS` (tenant/job/node/reason where the event has them)."""
    job = getattr(event, "job", None)
    node = getattr(event, "node", None)
    tenant = getattr(event, "tenant", None) or getattr(job, "tenant", None)
    job_id = getattr(event, "job_id", None) or getattr(job, "job_id", None)
    decision = isinstance(getattr(event, "input_seq", None), int)
    return (
        seq,
        event.occurred_at_ms,
        type(event).__name__,
        subject,
        _text(tenant),
        _text(job_id),
        _text(node if isinstance(node, str) else getattr(node, "name", None)),
        _text(getattr(event, "reason", None)),
        event.event_id,
        event.occurred_at_ms,
        event.causation_id,
        event.correlation_id,
        event.producer,
        event.input_seq if decision else None,
        event.config_digest if decision else None,
        event.leader_epoch if decision else None,
        ev.encode(event).decode(),
    )


def day(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d")


def read_manifest(out: Path) -> dict[str, Any]:
    path = out / MANIFEST
    if not path.exists():
        return {"format": FORMAT, "last_seq": 0, "rows": 0, "files": []}
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != FORMAT or not isinstance(doc.get("last_seq"), int):
            raise ValueError(f"format {doc.get('format')!r}")
    except (OSError, ValueError) as exc:
        raise ParquetHistoryError(f"{path}: not a gpuledger Parquet manifest ({exc})") from None
    return doc


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _orphans(out: Path, listed: set[str]) -> list[Path]:
    """Part files an interrupted export wrote but never listed (and dot-named leftovers)."""
    found = []
    for part in out.glob(f"{EVENTS}/date=*/*"):
        rel = part.relative_to(out).as_posix()
        if part.name.startswith(".") or (part.suffix == ".parquet" and rel not in listed):
            found.append(part)
    return found


BATCH_ROWS = 200_000
"""Rows held in memory before they are written (one part file per day in the batch)."""


def _write_batch(
    out: Path, rows_by_day: dict[str, list[tuple]], first: int, last: int
) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _schema()
    written = []
    for date in sorted(rows_by_day):
        rows = rows_by_day[date]
        table = pa.Table.from_arrays(
            [pa.array(col, schema.field(i).type) for i, col in enumerate(zip(*rows, strict=True))],
            schema=schema,
        )
        rel = f"{EVENTS}/date={date}/part-{first:012d}-{last:012d}.parquet"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        tmp = out / rel.replace("part-", ".part-")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, out / rel)
        written.append(rel)
    return written


def export_events(out: str | Path, entries: Iterable[tuple[int, str, ev.Event]]) -> dict[str, Any]:
    """Append every entry above the manifest's high-water mark; returns
    `{"appended": n, "last_seq": s, "rows": total, "files": [new part files]}`.

    Entries must come in increasing `seq` (a log's order); they are written in batches of
    `BATCH_ROWS` (bounded memory). The manifest is renamed into place after every part file,
    so an interruption leaves the previous manifest in force and the next export removes the
    unlisted files and writes their rows again."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(out)
    listed = set(manifest["files"])
    for stale in _orphans(out, listed):
        stale.unlink()
    mark = manifest["last_seq"]
    written: list[str] = []
    by_day: dict[str, list[tuple]] = {}
    first = last = None
    held = appended = 0
    for seq, subject, event in entries:
        if seq <= mark:
            continue
        if last is not None and seq <= last:
            raise ParquetHistoryError(f"seq {seq} after {last}: a log's entries come in order")
        first = seq if first is None else first
        last = seq
        by_day.setdefault(day(event.occurred_at_ms), []).append(row(seq, subject, event))
        held += 1
        if held >= BATCH_ROWS:
            written += _write_batch(out, by_day, first, last)
            appended += held
            by_day, first, held = {}, None, 0
    if by_day:
        written += _write_batch(out, by_day, first, last)  # type: ignore[arg-type]
        appended += held
    if last is None:
        return {"appended": 0, "last_seq": mark, "rows": manifest["rows"], "files": []}
    manifest = {
        "format": FORMAT,
        "last_seq": last,
        "rows": manifest["rows"] + appended,
        "files": sorted(listed | set(written)),
        "columns": list(COLUMNS),
        "partitioning": "hive: date=YYYY-MM-DD (UTC day of occurred_at_ms)",
    }
    _write_atomic(out / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return {"appended": appended, "last_seq": last, "rows": manifest["rows"], "files": written}


def export_tables(out: str | Path, db: str | Path) -> list[str]:
    """Copy every base table of the projection `db` except `events` (the rows above are the
    events) to `OUT/tables/<table>.parquet`, each replaced atomically; returns the names."""
    import duckdb

    target = Path(out) / TABLES
    target.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_type = 'BASE TABLE' AND table_schema = 'main' ORDER BY table_name"
            ).fetchall()
            if r[0] != "events"
        ]
        for name in names:
            tmp = target / f".{name}.parquet.tmp"
            con.execute(f"COPY \"{name}\" TO '{tmp}' (FORMAT parquet, COMPRESSION zstd)")
            os.replace(tmp, target / f"{name}.parquet")
    finally:
        con.close()
    return names


def is_history(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).exists()


def read_history(out: str | Path) -> Iterator[tuple[int, str, ev.Event]]:
    """The log a Parquet history holds, `(seq, subject, event)` in seq order: the files its
    manifest lists (so an interrupted export's leftovers are never read)."""
    import pyarrow.parquet as pq

    out = Path(out)
    manifest = read_manifest(out)
    if not (out / MANIFEST).exists():
        raise ParquetHistoryError(f"{out}: no {MANIFEST} (not a gpuledger Parquet export)")
    parts = []
    for rel in manifest["files"]:
        try:
            parts.append(pq.read_table(out / rel, columns=["seq", "subject", "body"]))
        except (OSError, ValueError) as exc:
            raise ParquetHistoryError(f"{out / rel}: {exc}") from None
    if not parts:
        return
    import pyarrow as pa

    table = pa.concat_tables(parts).sort_by("seq")
    seqs = table.column("seq").to_pylist()
    subjects = table.column("subject").to_pylist()
    for seq, subject, body in zip(seqs, subjects, table.column("body").to_pylist(), strict=True):
        try:
            yield seq, subject, ev.decode(body.encode())
        except ev.UndecodableEvent as exc:
            raise ParquetHistoryError(f"{out}: seq {seq}: {exc}") from None


def connect(out: str | Path):
    """An in-memory DuckDB connection with a view per dataset of the export: `events` (every
    part file, with its `date` partition column) and one per table under `tables/`."""
    import duckdb

    out = Path(out)
    read_manifest(out)
    if not (out / MANIFEST).exists():
        raise ParquetHistoryError(f"{out}: no {MANIFEST} (not a gpuledger Parquet export)")
    con = duckdb.connect(":memory:")
    glob = (out / EVENTS / "date=*" / "*.parquet").as_posix().replace("'", "''")
    con.execute(
        f"CREATE VIEW events AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true)"
    )
    for table in sorted((out / TABLES).glob("*.parquet")):
        path = table.as_posix().replace("'", "''")
        con.execute(f"CREATE VIEW \"{table.stem}\" AS SELECT * FROM read_parquet('{path}')")
    return con
