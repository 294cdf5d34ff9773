"""The projector's writer: the only code that touches DuckDB.

`Projector` is the single writer. It folds events with the pure `Projection`, and commits a
batch in ONE transaction: appended rows and upserted rows through Arrow tables (never
row-by-row), plus the last applied stream sequence in `projector_meta`. After any crash the
next `Projector` reloads its state from the tables and resumes at `last_seq + 1`; a
duplicate (seq <= last_seq) is skipped and a gap raises `SequenceGap`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpuledger import events as ev
from gpuledger.projections.mappers import (
    APPEND_COLUMNS,
    JSON_COLUMNS,
    ROW_CLASSES,
    Batch,
    JsonColumn,
    Projection,
    SequenceGap,
    columns_of,
)
from gpuledger.projections.reading import (  # noqa: F401 - re-exported: the read side
    ProjectionBusy,
    ProjectionError,
    connect_locked,
    connect_readonly,
    damaged,
    is_damage,
    lock_holder,
)
from gpuledger.services.runtime.gctune import collector_paused

# 4: jobs.user; 5: tenants.submit_limits, tenants.user_limits; 6: maintenance_windows;
# 7: nodes.status_since_ms, nodes.status_reason, maintenance_windows.tenant
SCHEMA_VERSION = 7
_log = logging.getLogger("gpuledger.projector")

_ARROW_TYPES = {
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "BOOLEAN": pa.bool_(),
    "DOUBLE": pa.float64(),
    "VARCHAR[]": pa.list_(pa.string()),
}

_POOL = pa.system_memory_pool()
"""Where the batches' Arrow columns live: the C allocator, which gives a written batch's
memory back; pyarrow's default (mimalloc) kept about 50 MB more resident in a 1 M rebuild
(peak RSS 707 vs 655 MB, same time)."""


def _json_array(col: JsonColumn) -> pa.Array:
    """The Arrow array of a `JsonColumn`: its own buffer and offsets, not copied (a
    `large_string`: 64-bit offsets, so no batch is too large for it)."""
    return pa.Array.from_buffers(
        pa.large_string(), len(col), [None, pa.py_buffer(col.offsets), pa.py_buffer(col.data)]
    )


def _select(table: str) -> str:
    """The select list inserting a batch of `table`'s rows: every column, the `EXPANDED`
    ones unnested side by side (one table row per position)."""
    expanded = ROW_CLASSES[table].EXPANDED
    if not expanded:
        return "*"
    return ", ".join(f"unnest({c}) AS {c}" if c in expanded else c for c in columns_of(table))


def _sql(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


def schema_sql() -> str:
    return _sql("schema.sql")


def views_sql() -> str:
    return _sql("views.sql")


@dataclass(frozen=True)
class Prepared:
    """A batch ready to execute: Arrow tables by registered name, the statements reading
    them (in order), and the last sequence to store with them."""

    last_seq: int
    last_at_ms: int | None
    tables: dict[str, pa.Table]
    sql: list[str]


async def wait_for_projection(db_path, seq: int, timeout_s: float, poll_s: float = 0.3) -> bool:
    """Until the projection at `db_path` has applied `seq` (the projector commits in batches)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            con = connect_readonly(db_path)
            try:
                (last,) = con.execute("SELECT last_seq FROM projector_meta").fetchone()
            finally:
                con.close()
            if last >= seq:
                return True
        await asyncio.sleep(poll_s)
    return False


class Store:
    """A projection database opened for writing (schema ensured)."""

    def __init__(
        self,
        path: str | Path,
        *,
        checkpoint_threshold: str = "128MB",
        memory_limit: str | None = "128MB",
    ) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.con = connect_locked(self.path)  # ProjectionBusy while a reader holds it
        self.con.execute("SET enable_progress_bar = false")
        # One DuckDB thread: a batch's inserts and deletes are too small for DuckDB's own
        # parallelism to pay (its worker threads cost about a fifth of a rebuild's CPU and
        # saved no time), and a pipelined projector's folding thread needs the other core.
        self.con.execute("SET threads = 1")
        # Automatic checkpoints at DuckDB's default 16MB WAL dominate the write cost of a busy
        # projector; checkpoint less often (and always on close / after a rebuild).
        self.con.execute(f"SET checkpoint_threshold = '{checkpoint_threshold}'")
        if memory_limit:
            # DuckDB's default (80 % of RAM) lets its buffer pool keep every block written
            # since the start: most of a rebuild's resident memory. The writer only appends
            # and replaces keyed rows; a small pool suffices (DuckDB evicts or spills).
            self.con.execute(f"SET memory_limit = '{memory_limit}'")
        try:
            self._ensure_schema()
        except duckdb.Error as exc:  # a truncated file: its header opened, its tables do not
            if not is_damage(exc):
                raise
            self.con.close()
            raise damaged(self.path, str(exc).removeprefix("IO Error: ")) from None
        self._types = {t: self._arrow_schema(t) for t in APPEND_COLUMNS.keys() | ROW_CLASSES.keys()}
        self._key_types = {
            t: pa.schema([self._types[t].field(k) for k in cls.KEY])
            for t, cls in ROW_CLASSES.items()
        }

    def _ensure_schema(self) -> None:
        # One transaction for the whole schema, views and catalog: in autocommit mode each of
        # the ~600 DDL / COMMENT statements is its own commit (a WAL sync each, ~3 s wall
        # for a new file on a busy disk).
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            self._ensure_schema_in_tx()
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def _ensure_schema_in_tx(self) -> None:
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
        from gpuledger.projections import catalog

        base = schema_sql() + views_sql()
        if not catalog.is_current(con, base):  # views, comments: only when their SQL changed
            con.execute(views_sql())
            catalog.apply(con, base)

    def _arrow_schema(self, table: str) -> pa.Schema:
        cols = columns_of(table)
        described = {
            name: typ for name, typ, *_ in self.con.execute(f"DESCRIBE {table}").fetchall()
        }
        missing = [c for c in cols if c not in described]
        if missing or len(described) != len(cols):
            raise ProjectionError(f"table {table}: schema.sql and mappers disagree ({missing})")
        expanded = ROW_CLASSES[table].EXPANDED if table in ROW_CLASSES else ()
        return pa.schema(
            [
                (
                    c,
                    pa.list_(_ARROW_TYPES[described[c]])
                    if c in expanded
                    else pa.large_string()
                    if (table, c) in JSON_COLUMNS
                    else _ARROW_TYPES[described[c]],
                )
                for c in cols
            ]
        )

    # -------------------------------------------------------------- reading state

    @property
    def last_seq(self) -> int:
        rows = self.con.execute("SELECT last_seq FROM projector_meta WHERE id = 1").fetchall()
        return rows[0][0]

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
        return Projection.load(self.last_seq, tables, self._projected_log())

    def _projected_log(self, chunk: int = 10_000) -> Iterator[tuple[int, str, ev.Event]]:
        """The events projected so far, in order (to rebuild the acceptance fold)."""
        cur = self.con.cursor()
        cur.execute(
            "SELECT seq, subject, payload FROM events WHERE type <> 'Undecodable' ORDER BY seq"
        )
        try:
            while rows := cur.fetchmany(chunk):
                for seq, subject, payload in rows:
                    try:
                        yield seq, subject, ev.decode(payload)
                    except ev.UndecodableEvent:
                        continue
        finally:
            cur.close()

    # -------------------------------------------------------------- writing

    def _arrow(self, table: str, cols: list[list], schema: pa.Schema | None = None) -> pa.Table:
        """An Arrow table from one Python list per column (in the schema's order)."""
        schema = schema or self._types[table]
        arrays = []
        for c, f in zip(cols, schema, strict=True):
            if c.__class__ is JsonColumn:
                arrays.append(_json_array(c))
            else:
                arrays.append(pa.array(c, type=f.type, memory_pool=_POOL))
        return pa.Table.from_arrays(arrays, schema=schema)

    def prepare(self, batch: Batch) -> Prepared | None:
        """Turn a batch into Arrow tables and the statements that apply them (no database
        access: a pipelined projector prepares in the folding thread, so that the writer
        thread spends its time inside DuckDB, without the GIL)."""
        if batch.last_seq is None:
            return None
        batch.freeze()
        tables: dict[str, pa.Table] = {}
        sql: list[str] = []
        for table, cols in batch.appends.items():
            if cols[0]:
                tables[f"_gl_{table}"] = self._arrow(table, cols)
                sql.append(f"INSERT INTO {table} BY NAME SELECT * FROM _gl_{table}")
        for table, (keys, cols) in batch.frozen.items():
            key = ROW_CLASSES[table].KEY
            tables[f"_gl_{table}_keys"] = self._arrow(table, keys, self._key_types[table])
            if len(key) == 1:
                sql.append(
                    f"DELETE FROM {table} WHERE {key[0]} IN (SELECT {key[0]} FROM _gl_{table}_keys)"
                )
            else:
                cond = " AND ".join(f"t.{k} = k.{k}" for k in key)
                sql.append(f"DELETE FROM {table} t USING _gl_{table}_keys k WHERE {cond}")
            if cols[0]:
                tables[f"_gl_{table}"] = self._arrow(table, cols)
                sql.append(f"INSERT INTO {table} BY NAME SELECT {_select(table)} FROM _gl_{table}")
        return Prepared(batch.last_seq, batch.last_at_ms, tables, sql)

    def write(self, batch: Batch, *, before_commit: Callable[[], None] | None = None) -> None:
        """Write one batch and its last sequence in one transaction (all or nothing)."""
        self.execute(self.prepare(batch), before_commit=before_commit)

    def execute(
        self, prep: Prepared | None, *, before_commit: Callable[[], None] | None = None
    ) -> None:
        """Apply a prepared batch and its last sequence in one transaction (all or nothing).

        Every statement of the batch goes to DuckDB in one `execute` call: DuckDB releases the
        GIL while it works and must take it back when a call returns, which under a pipelined
        projector means waiting for the folding thread to yield it (`WRITER_SWITCH_INTERVAL_S`)
        after every call; one call per batch (then the commit) instead of one per statement."""
        if prep is None:
            return
        con = self.con
        registered: list[str] = []
        con.execute("BEGIN TRANSACTION")  # (this also completes any result left open)
        try:
            for name, tbl in prep.tables.items():
                con.register(name, tbl)
                registered.append(name)
            at = "NULL" if prep.last_at_ms is None else str(int(prep.last_at_ms))
            con.execute(
                ";\n".join(
                    [
                        *prep.sql,
                        f"UPDATE projector_meta SET last_seq = {int(prep.last_seq)},"
                        f" updated_at_ms = coalesce({at}, updated_at_ms) WHERE id = 1",
                    ]
                )
            )
            if before_commit is not None:
                before_commit()
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        finally:
            for name in registered:
                con.unregister(name)

    def close(self) -> None:
        self.con.close()


WRITER_SWITCH_INTERVAL_S = 0.00002
"""The interpreter's thread switch interval while a pipelined projector runs. DuckDB's client
takes the GIL back many times within one call, the COMMIT included (measured: 20 k-event
batches written while a busy Python thread ran took 1.3 s alone, 2.3 s for their commits with
a 0.5 ms interval); each time the writer thread waits up to this interval for the folding
thread to yield. At 0.5 ms a 300 k-event rebuild's writer spent 5 of its 8 s waiting (2.8 s
CPU) and the fold waited for it; at 20 us the write overlaps the fold. The interval only
matters while a thread waits for the GIL."""


class Projector:
    """The single writer: fold events, commit in batches, resume after any crash.

    With `pipeline=True` a full batch is written by a background thread while the next ones
    are folded (DuckDB releases the GIL while it executes); the batch is snapshotted first.
    Up to `writes_in_flight` batches wait for or are in the writer, in order: one write that
    stalls (DuckDB checkpoints its WAL inside a COMMIT every `checkpoint_threshold`) does not
    stop the fold at once. A write runs only after the one before it succeeded; a failed
    write surfaces at a later commit (or `settle()`) with the state reloaded from the
    database. Only what `settle()` (or a waiting `commit()`) reports is committed: a live
    source acknowledges a fetch only after that."""

    def __init__(
        self,
        db_path: str | Path,
        *,
        batch_size: int = 20_000,
        checkpoint_threshold: str = "128MB",
        pipeline: bool = False,
        memory_limit: str | None = "128MB",
        writes_in_flight: int = 4,
    ) -> None:
        self.db_path = db_path
        self.checkpoint_threshold = checkpoint_threshold
        self.memory_limit = memory_limit
        self.store: Store | None = Store(
            db_path, checkpoint_threshold=checkpoint_threshold, memory_limit=memory_limit
        )
        self.batch_size = batch_size
        self.projection = self.store.load_projection()
        self.applied = 0
        self.skipped = 0
        self.failed = 0
        """Events the fold raised on (logged with the reason and skipped)."""
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="projector-writer") if pipeline else None
        )
        self._switch_interval: float | None = None
        if pipeline and sys.getswitchinterval() > WRITER_SWITCH_INTERVAL_S:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(WRITER_SWITCH_INTERVAL_S)
        self.writes_in_flight = max(1, writes_in_flight)
        self._inflight: deque[Future] = deque()
        """Background writes not settled yet, oldest first."""
        self._committed = self.projection.last_seq

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
                self._auto_commit()
            return True
        self.skipped += 1
        return False

    def apply_raw(self, seq: int, subject: str, payload: bytes, *, received_ms: int = 0) -> bool:
        """Fold one message given as bytes. Never raises for a bad message (only SequenceGap,
        or a failed commit): an undecodable payload is recorded as an `Undecodable` row with
        its reason; an event the fold cannot apply is logged once with its reason, counted in
        `failed`, and skipped (its events row stays, like the services' dead letter).
        `received_ms` (the stream's receive time) gives an external input its effective time
        (`events.at_receipt`), as the services fold it."""
        try:
            event = ev.at_receipt(ev.decode(payload), received_ms)
        except Exception as exc:  # noqa: BLE001 - UndecodableEvent, or anything decode missed
            reason = (
                str(exc) if isinstance(exc, ev.UndecodableEvent) else f"{type(exc).__name__}: {exc}"
            )
            ok = self.projection.apply_undecodable(
                seq, subject, reason[:1000], bytes(payload[:200]).decode("utf-8", "replace")
            )
        else:
            try:
                ok = self.projection.apply(seq, subject, event)
            except SequenceGap:
                raise
            except Exception as exc:  # noqa: BLE001 - one event must never stop the projector
                self.failed += 1
                _log.error(
                    "projector.apply_failed seq=%s subject=%s type=%s reason=%s: %.300s",
                    seq,
                    subject,
                    type(event).__name__,
                    type(exc).__name__,
                    exc,
                )
                ok = self.projection.last_seq >= seq or self.projection.apply_undecodable(
                    seq,
                    subject,
                    f"{type(exc).__name__}: {exc}"[:1000],
                    bytes(payload[:200]).decode("utf-8", "replace"),
                )
            if ok:
                self.applied += 1
            else:
                self.skipped += 1
        if ok and self.projection.batch.count >= self.batch_size:
            self._auto_commit()
        return ok

    def _auto_commit(self) -> None:
        """Commit a full batch; while a reader holds the file the batch keeps growing (the
        event is folded, nothing is lost) and the caller's next `commit()` retries."""
        try:
            self.commit(wait=self._pool is None)
        except ProjectionBusy:
            pass

    def release(self) -> None:
        """Close the database file (so read-only clients can open it) while keeping the
        folded state: this process stays the single writer and reopens it on the next commit."""
        self._settle()
        if self.store is not None:
            self.store.close()
            self.store = None

    def _store(self) -> Store:
        if self.store is None:
            self.store = Store(
                self.db_path,
                checkpoint_threshold=self.checkpoint_threshold,
                memory_limit=self.memory_limit,
            )
        return self.store

    def _settle(self, keep: int = 0) -> None:
        """Wait until at most `keep` writes are in flight, oldest first. On a failed write,
        wait for the ones after it (they write nothing), reload the state and re-raise."""
        while len(self._inflight) > keep:
            f = self._inflight.popleft()
            try:
                self._committed = f.result()
            except BaseException:
                for later in self._inflight:
                    later.exception()
                self._inflight.clear()
                self.projection = self._store().load_projection()
                self._committed = self.projection.last_seq
                raise

    def settle(self) -> int:
        """Wait for the writes in flight (pipeline mode) and return the last committed
        sequence; a failed write raises here (the state is reloaded from the database)."""
        self._settle()
        return self._committed

    def committed(self) -> int:
        """The last committed sequence, without waiting for a write in flight (a finished
        background write is settled here: a failure raises)."""
        while self._inflight and self._inflight[0].done():
            self._settle(keep=len(self._inflight) - 1)
        return self._committed

    def _execute(
        self,
        store: Store,
        prep: Prepared | None,
        before_commit: Callable[[], None] | None,
        after: Future | None = None,
    ) -> int:
        """Write `prep` once the write `after` (the one submitted before it) has succeeded
        (its failure is raised here instead); returns the last committed sequence."""
        committed = self._committed if after is None else after.result()
        store.execute(prep, before_commit=before_commit)
        return committed if prep is None else prep.last_seq

    def commit(self, *, before_commit: Callable[[], None] | None = None, wait: bool = True) -> int:
        """Write what was folded since the last commit; returns the committed last seq.

        On failure the transaction is rolled back and the in-memory state is reloaded from
        the database, so the projector is exactly at the last committed sequence again.
        `wait=False` (pipeline mode only) returns at once; the write completes in the
        background and its outcome is checked at a later commit."""
        pipelined = self._pool is not None and not wait
        self._settle(keep=self.writes_in_flight - 1 if pipelined else 0)
        if self.store is None and self.projection.batch.last_seq is None:
            return self._committed  # nothing to write: leave a released file to its readers
        store = self._store()  # first: a busy file (ProjectionBusy) must not lose the batch
        batch = self.projection.drain().freeze()
        try:
            # Arrow tables built here, also for the writer thread: holding the GIL, it would
            # trade it with the fold every switch interval; it then needs it only briefly.
            prep = store.prepare(batch)
            if pipelined:
                after = self._inflight[-1] if self._inflight else None
                self._inflight.append(
                    self._pool.submit(self._execute, store, prep, before_commit, after)
                )
                return self._committed if batch.last_seq is None else batch.last_seq
            self._committed = self._execute(store, prep, before_commit)
        except BaseException:
            with contextlib.suppress(Exception):
                self._settle()  # the writes before this batch end first (a failure reloads)
            self.projection = store.load_projection()
            self._committed = self.projection.last_seq
            raise
        return self._committed

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
            if self._switch_interval is not None:
                sys.setswitchinterval(self._switch_interval)
                self._switch_interval = None

    def __enter__(self) -> Projector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _messages(source: Any) -> Iterator[tuple[int, str, ev.Event]]:
    if isinstance(source, (str, Path)):
        from gpuledger.replay.logio import read_log

        return read_log(source)
    return iter(source)


def rebuild(
    source: str | Path | Iterable[tuple[int, str, ev.Event]],
    db_path: str | Path,
    *,
    batch_size: int = 20_000,
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
    with collector_paused():  # the fold makes no reference cycles; the collector only walked it
        with Projector(db_path, batch_size=batch_size, pipeline=True, memory_limit="64MB") as pj:
            n = 0
            for seq, subject, event in _messages(source):
                pj.apply(seq, subject, event)
                n += 1
                if progress is not None and n % 10_000 == 0:
                    progress(n)
            last = pj.commit()
            pj._store().con.execute("CHECKPOINT")
        # The folded state is garbage now: freed here by reference counting. Held until the
        # collector resumes, all of it (every object made while paused is in the youngest
        # generation) would be walked once for nothing (about 1 s after 1 M events).
        del pj
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
    "ProjectionBusy",
    "ProjectionError",
    "SequenceGap",
    "Store",
    "catch_up",
    "connect_readonly",
    "wait_for_projection",
    "rebuild",
]
