"""The projector's writer: the only code that touches DuckDB.

`Projector` is the single writer. It folds events with the pure `Projection`, and commits a
batch in ONE transaction: appended rows and upserted rows through Arrow tables (never
row-by-row), plus the last applied stream sequence in `projector_meta`. After any crash the
next `Projector` reloads its state from the tables and resumes at `last_seq + 1`; a
duplicate (seq <= last_seq) is skipped and a gap raises `SequenceGap`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import events as ev
from projections.mappers import (
    APPEND_COLUMNS,
    ROW_CLASSES,
    Batch,
    Projection,
    SequenceGap,
    columns_of,
)

SCHEMA_VERSION = 1

_ARROW_TYPES = {
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "BOOLEAN": pa.bool_(),
    "DOUBLE": pa.float64(),
    "VARCHAR[]": pa.list_(pa.string()),
}


def _sql(name: str) -> str:
    return resources.files("projections").joinpath(name).read_text()


def schema_sql() -> str:
    return _sql("schema.sql")


def views_sql() -> str:
    return _sql("views.sql")


class ProjectionError(RuntimeError):
    """The projection database cannot be used as it is (schema mismatch, locked, ...)."""


def connect_readonly(path: str | Path, *, wait_s: float = 5.0) -> duckdb.DuckDBPyConnection:
    """Open a projection for reading. The single writer holds DuckDB's file lock while it
    writes; retry for up to `wait_s` seconds (a live projector releases it when idle)."""
    path = Path(path)
    if not path.exists():
        raise ProjectionError(
            f"no projection at {path}: run `gpuledger project --log FILE` or `gpuledger up` first"
        )
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=True)
        except duckdb.IOException as exc:
            if time.monotonic() >= deadline:
                raise ProjectionError(f"cannot open {path}: {exc}") from exc
            time.sleep(0.1)


class Store:
    """A projection database opened for writing (schema ensured)."""

    def __init__(self, path: str | Path, *, checkpoint_threshold: str = "128MB") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(self.path)
        self.con.execute("SET enable_progress_bar = false")
        # Automatic checkpoints at DuckDB's default 16MB WAL dominate the write cost of a busy
        # projector; checkpoint less often (and always on close / after a rebuild).
        self.con.execute(f"SET checkpoint_threshold = '{checkpoint_threshold}'")
        self._ensure_schema()
        self._types = {t: self._arrow_schema(t) for t in APPEND_COLUMNS.keys() | ROW_CLASSES.keys()}

    def _ensure_schema(self) -> None:
        con = self.con
        con.execute(schema_sql())
        row = con.execute(
            "SELECT last_seq, schema_version FROM projector_meta WHERE id = 1"
        ).fetchone()
        if row is None:
            con.execute("INSERT INTO projector_meta VALUES (1, 0, ?, NULL)", [SCHEMA_VERSION])
        elif row[1] != SCHEMA_VERSION:
            raise ProjectionError(
                f"{self.path} has projection schema v{row[1]}, this gpuledger writes "
                f"v{SCHEMA_VERSION}: run `gpuledger project --rebuild`"
            )
        con.execute(views_sql())

    def _arrow_schema(self, table: str) -> pa.Schema:
        cols = columns_of(table)
        described = {
            name: typ for name, typ, *_ in self.con.execute(f"DESCRIBE {table}").fetchall()
        }
        missing = [c for c in cols if c not in described]
        if missing or len(described) != len(cols):
            raise ProjectionError(f"table {table}: schema.sql and mappers disagree ({missing})")
        return pa.schema([(c, _ARROW_TYPES[described[c]]) for c in cols])

    # -------------------------------------------------------------- reading state

    @property
    def last_seq(self) -> int:
        return self.con.execute("SELECT last_seq FROM projector_meta WHERE id = 1").fetchone()[0]

    def load_projection(self) -> Projection:
        """The mapper state as stored: every current-state row still needed."""
        con = self.con
        tables: dict[str, list[tuple]] = {}
        for t, where in (
            ("jobs", ""),
            ("allocations", " WHERE ended_at_ms IS NULL"),
            ("preemptions", " WHERE outcome = 'requested'"),
            ("nodes", ""),
            ("gpus", ""),
            ("tenants", ""),
        ):
            cols = ", ".join(columns_of(t))
            tables[t] = con.execute(f"SELECT {cols} FROM {t}{where}").fetchall()
        return Projection.load(self.last_seq, tables)

    # -------------------------------------------------------------- writing

    def _arrow(self, table: str, cols: list[list], schema: pa.Schema | None = None) -> pa.Table:
        """An Arrow table from one Python list per column (in the schema's order)."""
        schema = schema or self._types[table]
        arrays = []
        for c, f in zip(cols, schema, strict=True):
            if f.name == "payload":
                # events.payload arrives as UTF-8 JSON bytes (msgspec's output): build a binary
                # array and view it as a string one, without decoding each payload in Python.
                arrays.append(pa.array(c, type=pa.binary()).view(pa.string()))
            else:
                arrays.append(pa.array(c, type=f.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    def _insert(self, table: str, tbl: pa.Table) -> None:
        self.con.register("_gl_batch", tbl)
        try:
            self.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _gl_batch")
        finally:
            self.con.unregister("_gl_batch")

    def write(self, batch: Batch, *, before_commit: Callable[[], None] | None = None) -> None:
        """Write one batch and its last sequence in one transaction (all or nothing)."""
        if batch.last_seq is None:
            return
        batch.freeze()
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for table, cols in batch.appends.items():
                if cols[0]:
                    self._insert(table, self._arrow(table, cols))
            for table, (keys, cols) in batch.frozen.items():
                cls = ROW_CLASSES[table]
                full = self._types[table]
                key_schema = pa.schema([full.field(k) for k in cls.KEY])
                self.con.register("_gl_keys", self._arrow(table, keys, key_schema))
                try:
                    cond = " AND ".join(f"t.{k} = k.{k}" for k in cls.KEY)
                    con.execute(f"DELETE FROM {table} t USING _gl_keys k WHERE {cond}")
                finally:
                    self.con.unregister("_gl_keys")
                if cols[0]:
                    self._insert(table, self._arrow(table, cols))
            at = batch.last_at_ms
            con.execute(
                "UPDATE projector_meta SET last_seq = ?, updated_at_ms = coalesce(?, updated_at_ms)"
                " WHERE id = 1",
                [batch.last_seq, at],
            )
            if before_commit is not None:
                before_commit()
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.con.close()


class Projector:
    """The single writer: fold events, commit in batches, resume after any crash.

    With `pipeline=True` a full batch is written by a background thread while the next one
    is folded (DuckDB releases the GIL while it executes); the batch is snapshotted first, and
    a failed write surfaces at the next commit with the state reloaded from the database."""

    def __init__(
        self,
        db_path: str | Path,
        *,
        batch_size: int = 20_000,
        checkpoint_threshold: str = "128MB",
        pipeline: bool = False,
    ) -> None:
        self.db_path = db_path
        self.checkpoint_threshold = checkpoint_threshold
        self.store: Store | None = Store(db_path, checkpoint_threshold=checkpoint_threshold)
        self.batch_size = batch_size
        self.projection = self.store.load_projection()
        self.applied = 0
        self.skipped = 0
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="projector-writer") if pipeline else None
        )
        self._inflight: Future | None = None

    @property
    def last_seq(self) -> int:
        """Last sequence committed to the database."""
        self._settle()
        return self._store().last_seq

    def apply(self, seq: int, subject: str, event: ev.Event) -> bool:
        """Fold one message (committing when the batch is full). False = duplicate skipped."""
        if self.projection.apply(seq, subject, event):
            self.applied += 1
            if self.projection.batch.count >= self.batch_size:
                self.commit(wait=self._pool is None)
            return True
        self.skipped += 1
        return False

    def apply_raw(self, seq: int, subject: str, payload: bytes) -> bool:
        """Fold one message given as bytes; an undecodable payload is recorded, not skipped."""
        try:
            event = ev.decode(payload)
        except ev.UndecodableEvent as exc:
            ok = self.projection.apply_undecodable(
                seq, subject, str(exc), payload[:200].decode("utf-8", "replace")
            )
            if ok and self.projection.batch.count >= self.batch_size:
                self.commit(wait=self._pool is None)
            return ok
        return self.apply(seq, subject, event)

    def release(self) -> None:
        """Close the database file (so read-only clients can open it) while keeping the
        folded state: this process stays the single writer and reopens it on the next commit."""
        self._settle()
        if self.store is not None:
            self.store.close()
            self.store = None

    def _store(self) -> Store:
        if self.store is None:
            self.store = Store(self.db_path, checkpoint_threshold=self.checkpoint_threshold)
        return self.store

    def _settle(self) -> None:
        """Wait for the batch being written; on failure reload the state and re-raise."""
        f, self._inflight = self._inflight, None
        if f is None:
            return
        try:
            f.result()
        except BaseException:
            self.projection = self._store().load_projection()
            raise

    def commit(self, *, before_commit: Callable[[], None] | None = None, wait: bool = True) -> int:
        """Write what was folded since the last commit; returns the committed last seq.

        On failure the transaction is rolled back and the in-memory state is reloaded from
        the database, so the projector is exactly at the last committed sequence again.
        `wait=False` (pipeline mode only) returns at once; the write completes in the
        background and its outcome is checked at the next commit."""
        self._settle()
        batch = self.projection.drain().freeze()
        store = self._store()
        if self._pool is not None and not wait:
            self._inflight = self._pool.submit(store.write, batch, before_commit=before_commit)
            return store.last_seq if batch.last_seq is None else batch.last_seq
        try:
            store.write(batch, before_commit=before_commit)
        except BaseException:
            self.projection = store.load_projection()
            raise
        return self.projection.last_seq

    def run(self, messages: Iterable[tuple[int, str, ev.Event]]) -> int:
        """Apply every message then commit; returns the last committed sequence."""
        for seq, subject, event in messages:
            self.apply(seq, subject, event)
        return self.commit()

    def close(self) -> None:
        try:
            self.release()
        finally:
            if self._pool is not None:
                self._pool.shutdown()

    def __enter__(self) -> Projector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _messages(source: Any) -> Iterator[tuple[int, str, ev.Event]]:
    if isinstance(source, (str, Path)):
        from projections.logio import read_log

        return read_log(source)
    return iter(source)


def rebuild(
    source: str | Path | Iterable[tuple[int, str, ev.Event]],
    db_path: str | Path,
    *,
    batch_size: int = 50_000,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Build a projection from scratch: drop `db_path` and fold the whole log into it.

    `source` is a JSONL log path or an iterable of `(seq, subject, event)`. Returns
    `{"events": n, "last_seq": s, "seconds": t}`."""
    db = Path(db_path)
    if str(db_path) != ":memory:":
        for p in (db, db.with_name(db.name + ".wal")):
            if p.exists():
                p.unlink()
    t0 = time.perf_counter()
    with Projector(
        db_path, batch_size=batch_size, checkpoint_threshold="64GB", pipeline=True
    ) as pj:
        n = 0
        for seq, subject, event in _messages(source):
            pj.apply(seq, subject, event)
            n += 1
            if progress is not None and n % 10_000 == 0:
                progress(n)
        last = pj.commit()
        pj._store().con.execute("CHECKPOINT")
    return {"events": n, "last_seq": last, "seconds": time.perf_counter() - t0}


def catch_up(
    source: str | Path | Iterable[tuple[int, str, ev.Event]],
    db_path: str | Path,
    *,
    batch_size: int = 20_000,
) -> dict[str, Any]:
    """Apply a log to an existing projection: already applied messages are skipped, the rest
    must follow `last_seq` without a gap."""
    t0 = time.perf_counter()
    with Projector(db_path, batch_size=batch_size) as pj:
        last = pj.run(_messages(source))
        return {
            "applied": pj.applied,
            "skipped": pj.skipped,
            "last_seq": last,
            "seconds": time.perf_counter() - t0,
        }


__all__ = [
    "Projector",
    "ProjectionError",
    "SequenceGap",
    "Store",
    "catch_up",
    "connect_readonly",
    "rebuild",
]
