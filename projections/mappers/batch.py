"""What a run of events changes: the `Batch` the writer turns into one transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuledger.projections.mappers.rows import (
    APPEND_COLUMNS,
    JSON_COLUMNS,
    ROW_CLASSES,
    JsonColumn,
    Row,
)
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side

# ---------------------------------------------------------------- the batch


class Batch:
    """What a run of events changes: appended rows and the latest version of touched rows.

    Appended rows are kept as columns (`appends[table]` is one list per column, in
    `APPEND_COLUMNS` order; `add[table](v0, v1, ...)` appends one row): the writer turns each
    column into an Arrow array directly, with no per-row tuples to build, collect and
    transpose. `rows(table)` gives tuples back (for tests and debugging). The `events`
    payload column is a `JsonColumn`: its value is the event (or a mapping), encoded on
    append."""

    __slots__ = (
        "appends",
        "add",
        "upserts",
        "first_seq",
        "last_seq",
        "last_at_ms",
        "count",
        "frozen",
    )

    def __init__(self) -> None:
        self.appends: dict[str, list[Any]] = {
            t: [JsonColumn() if (t, c) in JSON_COLUMNS else [] for c in cols]
            for t, cols in APPEND_COLUMNS.items()
        }
        self.add: dict[str, Callable[..., None]] = {
            t: _APPENDERS[len(cols)](*(c.append for c in cols)) for t, cols in self.appends.items()
        }
        self.upserts: dict[str, dict[tuple, Row | None]] = {t: {} for t in ROW_CLASSES}
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.last_at_ms: int | None = None
        self.count = 0
        self.frozen: dict[str, tuple[list[list], list[list]]] | None = None

    def __len__(self) -> int:
        return self.count

    def upsert(self, row: Row) -> None:
        self.upserts[row.TABLE][row.key()] = row

    def delete(self, table: str, key: tuple) -> None:
        self.upserts[table][key] = None

    def freeze(self) -> Batch:
        """Snapshot the upserted rows as columns (`frozen[table] = (key columns, row
        columns)`), so the batch can be written while the projection goes on folding (and
        mutating its rows). Idempotent."""
        if self.frozen is None:
            frozen = {}
            for t, ups in self.upserts.items():
                if ups:
                    cls = ROW_CLASSES[t]
                    keys = [list(c) for c in zip(*ups, strict=True)]
                    rows = [r for r in ups.values() if r is not None]
                    frozen[t] = (keys, cls._columns(rows))  # type: ignore[attr-defined]  # generated per row class
            self.frozen = frozen
        return self

    def rows(self, table: str) -> list[tuple]:
        """Final tuples of a table in this batch (appends, or upserted rows; deletes left out),
        as the table gets them (a row's `EXPANDED` columns one table row per position)."""
        if table in self.appends:
            return list(zip(*self.appends[table], strict=True))
        if self.frozen is not None:
            cols = self.frozen[table][1] if table in self.frozen else []
            rows = list(zip(*cols, strict=True))
        else:
            rows = [r.astuple() for r in self.upserts[table].values() if r is not None]
        cls = ROW_CLASSES[table]
        return rows if not cls.EXPANDED else [t for row in rows for t in cls.table_rows(row)]


def _appender_factory(n: int) -> Callable[..., Callable[..., None]]:
    """`make(append_0, ..., append_n-1)` -> `add(v_0, ..., v_n-1)` appending v_i with append_i."""
    ps = ", ".join(f"p{i}" for i in range(n))
    vs = ", ".join(f"v{i}" for i in range(n))
    body = "".join(f"\n        p{i}(v{i})" for i in range(n))
    ns: dict[str, Any] = {}
    exec(f"def make({ps}):\n    def add({vs}):{body}\n    return add", ns)  # noqa: S102
    return ns["make"]


_APPENDERS = {n: _appender_factory(n) for n in {len(c) for c in APPEND_COLUMNS.values()}}
