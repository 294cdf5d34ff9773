"""The read side of a projection file: reading it through the projector that serves it
(projections/served.py) or else opening it read-only, and the errors that say why it cannot
be opened. Light on purpose (duckdb and the standard library only): `gpuledger jobs`,
`why`, `sql` and the UI import this, not the projector's writer (projections/store.py, which
pulls in pyarrow and the mappers); store.py re-exports every name here.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import duckdb


class ProjectionError(RuntimeError):
    """The projection database cannot be used as it is (schema mismatch, locked, ...)."""


class ProjectionBusy(ProjectionError):
    """Another process holds the projection file's lock (DuckDB allows one writing process,
    or any number of read-only ones, per file). `holder` names it as DuckDB reports it."""

    def __init__(self, path: str | Path, holder: str) -> None:
        self.path, self.holder = str(path), holder
        super().__init__(f"{path} is held by another process ({holder})")


def lock_holder(exc: BaseException) -> str | None:
    """`PID 1234` (or DuckDB's whole message) when `exc` is DuckDB's file-lock conflict,
    else None."""
    text = str(exc)
    if not isinstance(exc, duckdb.IOException) or "lock" not in text.lower():
        return None
    m = re.search(r"\(PID (\d+)\)", text)
    return f"PID {m.group(1)}" if m else text.splitlines()[0]


def damaged(path: str | Path, reason: str) -> ProjectionError:
    """The error for a projection file DuckDB cannot read whole (truncated, overwritten): one
    line naming the file and the way out. The projection is only a fold of the log, so
    rebuilding it loses nothing."""
    reason = " ".join(str(reason).split())[:200]
    return ProjectionError(
        f"{path}: not a readable projection ({reason}); rebuild it from the log with "
        f"`gpuledger project --rebuild --db {path}` (with `--log FILE`, or from NATS)"
    )


def connect_locked(path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect`, raising ProjectionBusy (instead of DuckDB's IOException) when another
    process holds the file, and ProjectionError (`damaged`) for a file that is not a DuckDB
    database or whose header cannot be read."""
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        holder = lock_holder(exc)
        if holder is None:
            raise damaged(path, str(exc).removeprefix("IO Error: ")) from None
        raise ProjectionBusy(path, holder) from exc
    except (duckdb.SerializationException, duckdb.InternalException) as exc:
        raise damaged(path, str(exc)) from None
    return con


def is_damage(exc: BaseException) -> bool:
    """Whether a DuckDB error from a query says the file is missing a part or garbled (a
    truncated file opens fine: its header is whole; only reading a missing block fails).
    Readers turn it into `damaged`."""
    if isinstance(exc, duckdb.SerializationException | duckdb.InternalException):
        return True
    text = str(exc)
    return isinstance(exc, duckdb.IOException) and (
        "Could not read enough bytes" in text or "not a valid DuckDB database" in text
    )


def connect_readonly(
    path: str | Path, *, wait_s: float = 10.0, poll_s: float = 0.05, served: bool = True
) -> Any:
    """Open a projection for reading. When a projector writes `path` and serves reads of it
    (projections/serving.py), a connection through it (`execute`, `close`: the queries'
    subset of DuckDB's API; nothing opens the file). Otherwise the file read-only: a
    projector that does not serve reads holds the file only while it writes and opens a read
    window at least every few seconds when caught up; retry every `poll_s` for up to
    `wait_s` seconds, then raise ProjectionBusy (it may be catching up a backlog, or another
    process holds the file)."""
    path = Path(path)
    if served:
        from gpuledger.projections.served import connect_served

        con = connect_served(path)
        if con is not None:
            return con
    if not path.exists():
        raise ProjectionError(
            f"no projection at {path}: run `gpuledger project --log FILE` or `gpuledger up` first"
        )
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return connect_locked(path, read_only=True)
        except ProjectionBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(poll_s)
