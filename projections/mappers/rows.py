"""The projection's rows: the current-state row classes (one per table, keyed), the append
tables' columns, and the JSON column of the `events` payloads."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import Any

import msgspec

from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side

_json = msgspec.json.Encoder()


class JsonColumn:
    """An append column of JSON documents held as one UTF-8 buffer and the offsets of its
    values: `append(obj)` encodes `obj` straight onto the buffer (msgspec's `encode_into`),
    so the fold makes no bytes object per value and the writer no joined copy; `data` and
    `offsets` are an Arrow `large_string` array's buffers as they stand. Iterating gives
    each value's bytes (tests, debugging). Appending after the buffer was handed to Arrow
    raises `BufferError` (a prepared batch is never appended to)."""

    __slots__ = ("data", "offsets")

    def __init__(self) -> None:
        self.data = bytearray()
        self.offsets = array("q", (0,))

    def append(self, obj: Any) -> None:
        _json.encode_into(obj, self.data, -1)
        self.offsets.append(len(self.data))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self) -> Iterator[bytes]:
        data, offsets = self.data, self.offsets
        return (bytes(data[offsets[i] : offsets[i + 1]]) for i in range(len(offsets) - 1))


def _dumps(obj: Any) -> str | None:
    if obj is None:
        return None
    return _json.encode(obj).decode()


# ---------------------------------------------------------------- current-state rows


class Row:
    """A mutable current-state row; columns in `COLUMNS` order, key in `KEY`."""

    __slots__ = ()
    TABLE = ""
    COLUMNS: tuple[str, ...] = ()
    KEY: tuple[str, ...] = ()
    DEFAULTS: dict[str, Any] = {}
    EXPANDED: tuple[str, ...] = ()
    """Columns holding one value per table row of this row (a tuple): the writer inserts one
    table row per position, the other columns repeated (`UNNEST`); `KEY` names them all."""
    _expanded_at: tuple[int, ...] = ()  # positions of the EXPANDED columns in COLUMNS

    @classmethod
    def from_tuple(cls, values: Iterable[Any]) -> Row:
        row = cls.__new__(cls)
        for c, v in zip(cls.COLUMNS, values, strict=True):
            setattr(row, c, v)
        return row

    def astuple(self) -> tuple:
        return self._get(self)  # type: ignore[attr-defined]  # generated per row class

    @classmethod
    def table_rows(cls, values: tuple) -> list[tuple]:
        """The table's rows of one row's values (`astuple`): one per position of its
        `EXPANDED` columns, the other columns repeated."""
        at = cls._expanded_at
        if not at:
            return [values]
        out = []
        for per_position in zip(*(values[i] for i in at), strict=True):
            row = list(values)
            for i, v in zip(at, per_position, strict=True):
                row[i] = v
            out.append(tuple(row))
        return out

    @classmethod
    def from_table_rows(cls, rows: Iterable[tuple]) -> list[Row]:
        """Rows from stored table rows (the inverse of `table_rows`): those of one `KEY`
        become one row, its `EXPANDED` columns in the order of the first of them."""
        at = cls._expanded_at
        if not at:
            return [cls.from_tuple(t) for t in rows]
        key = [cls.COLUMNS.index(c) for c in cls.KEY]
        groups: dict[tuple, list[tuple]] = {}
        for t in sorted(rows, key=lambda t: (*(t[i] for i in key), t[at[0]])):
            groups.setdefault(tuple(t[i] for i in key), []).append(t)
        out = []
        for group in groups.values():
            values = list(group[0])
            for i in at:
                values[i] = tuple(t[i] for t in group)
            out.append(cls.from_tuple(values))
        return out

    def key(self) -> tuple:
        return self._key(self)  # type: ignore[attr-defined]  # generated per row class

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(zip(self.COLUMNS, self.astuple(), strict=True))})"

    def __init_subclass__(cls) -> None:
        cls._get = staticmethod(_tuple_getter(cls.COLUMNS))
        cls._expanded_at = tuple(cls.COLUMNS.index(c) for c in cls.EXPANDED)
        cls._key = staticmethod(_tuple_getter(cls.KEY))
        # A generated keyword-only __init__ (every column optional): several times faster
        # than a generic loop, and it rejects unknown columns.
        params = ", ".join(f"{c}=_d_{c}" for c in cls.COLUMNS)
        body = "".join(f"\n    self.{c} = {c}" for c in cls.COLUMNS)
        ns = {f"_d_{c}": cls.DEFAULTS.get(c) for c in cls.COLUMNS}
        exec(f"def __init__(self, *, {params}):{body}", ns)  # noqa: S102
        cls.__init__ = ns["__init__"]
        # `new(v0, ..., vn)`: every column positionally, in `COLUMNS` order; for hot paths
        # (about 4x cheaper than the keyword `__init__` for a 20-column row).
        ns["_alloc"], ns["_cls"] = object.__new__, cls
        sets = "".join(f"\n    r.{c} = {c}" for c in cls.COLUMNS)
        exec(f"def new({', '.join(cls.COLUMNS)}):\n    r = _alloc(_cls){sets}\n    return r", ns)  # noqa: S102
        cls.new = staticmethod(ns["new"])
        # `_columns(rows)`: the rows as one list per column (what the writer turns into Arrow).
        comps = ", ".join(f"[r.{c} for r in rows]" for c in cls.COLUMNS)
        exec(f"def _columns(rows):\n    return [{comps}]", ns)  # noqa: S102
        cls._columns = staticmethod(ns["_columns"])


def _tuple_getter(cols: tuple[str, ...]):
    if not cols:
        return lambda _o: ()
    if len(cols) == 1:
        g = attrgetter(cols[0])
        return lambda o: (g(o),)
    return attrgetter(*cols)


def _row_class(
    name: str, table: str, columns: str, key: str, expanded: str = "", **defaults: Any
) -> type[Row]:
    cols = tuple(columns.split())
    ns = {
        "__slots__": cols,
        "TABLE": table,
        "COLUMNS": cols,
        "KEY": tuple(key.split()),
        "DEFAULTS": defaults,
        "EXPANDED": tuple(expanded.split()),
    }
    return type(name, (Row,), ns)


JobRow = _row_class(
    "JobRow",
    "jobs",
    """job_id tenant user priority_class priority preemptible slo_class state replicas
    min_members member_gpus member_gpu_milli member_mig_profile gpu_models min_gpu_memory_mib gpu_milli
    duration_s submitted_at_ms admitted_at_ms first_placed_at_ms placed_at_ms finished_at_ms
    pending_since_ms allocation_id attempts preemptions progress_ms cancel_requested reason
    message details updated_at_ms updated_seq""",
    "job_id",
    attempts=0,
    preemptions=0,
    progress_ms=0,
    cancel_requested=False,
)

AllocationRow = _row_class(
    "AllocationRow",
    "allocations",
    """allocation_id job_id tenant attempt rank node gpu_index gpu_uuid gpu_model clique
    sharing gpu_milli mig_profile mig_start borrowing placed_seq placed_at_ms started_at_ms
    ended_at_ms end_reason""",
    "allocation_id rank placed_seq",  # placed_seq: a rank an elastic gang gave up and grew back
    expanded="gpu_index gpu_uuid gpu_model clique",
)
"""One gang member: the table has a row per GPU (`gpu_index` -1 for a member without one), the
projection one per member, its GPU columns a tuple each in GPU order (a member's GPUs never
change, and starts and exits update all of them at once: a gang of 8-GPU members is one row
to fold and freeze per member, not eight)."""

PreemptionRow = _row_class(
    "PreemptionRow",
    "preemptions",
    """request_seq requested_at_ms victim_job_id victim_tenant victim_priority allocation_id
    beneficiary beneficiary_tenant beneficiary_priority reason message deadline_ms details
    checkpointed_at_ms checkpointed evicted_at_ms eviction_reason lost_gpu_ms progress_ms
    outcome ended_at_ms""",
    "request_seq",
)

NodeRow = _row_class(
    "NodeRow",
    "nodes",
    """node pool leaf_switch cpu_milli memory_mib gpu_count simulated status labels
    registered_at_ms last_heartbeat_ms lost_at_ms lost_message running_members status_since_ms
    status_reason""",
    "node",
)

MaintenanceRow = _row_class(
    "MaintenanceRow",
    "maintenance_windows",
    "window_id node start_ms end_ms until_ms reason scheduled_at_ms cancelled_at_ms tenant",
    "window_id",
    expanded="node",
)
"""A maintenance window (the fold's `MaintenanceWindow`): the table has a row per node."""

GpuRow = _row_class(
    "GpuRow",
    "gpus",
    "node gpu_index uuid model memory_mib clique sharing healthy registered_at_ms",
    "node gpu_index",
)

TenantRow = _row_class(
    "TenantRow",
    "tenants",
    """tenant parent guaranteed_gpu_milli limit_gpu_milli over_quota_weight
    fair_share_gpu_milli allocated_gpu_milli demand_gpu_milli configured_at_ms updated_at_ms
    borrowing_limit_gpu_milli lending_limit_gpu_milli borrowing_limit_by_model
    lending_limit_by_model submit_limits user_limits""",
    "tenant",
)

PriorityClassRow = _row_class(
    "PriorityClassRow",
    "priority_classes",
    "name value preemptible slo_class description grace_s allow_timeslice configured_at_ms",
    "name",
)

ROW_CLASSES: dict[str, type[Row]] = {
    c.TABLE: c
    for c in (
        JobRow,
        AllocationRow,
        PreemptionRow,
        NodeRow,
        GpuRow,
        TenantRow,
        PriorityClassRow,
        MaintenanceRow,
    )
}

APPEND_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": tuple(
        """seq subject type event_id occurred_at_ms causation_id correlation_id producer
        input_seq config_digest leader_epoch payload""".split()
    ),
    "job_transitions": tuple(
        "seq at_ms job_id tenant from_state to_state event_type reason".split()
    ),
    "decisions": tuple(
        """seq at_ms type job_id event_id producer input_seq config_digest leader_epoch reason
        message details""".split()
    ),
    "pending_reasons": tuple(
        """seq at_ms job_id tenant reason message details queue_position
        preemption_would_help""".split()
    ),
    "quota_usage": tuple(
        """seq at_ms tenant guaranteed_gpu_milli fair_share_gpu_milli allocated_gpu_milli
        demand_gpu_milli borrowed_gpu_milli""".split()
    ),
    "gpu_metrics": tuple(
        "seq at_ms node uuid mig_uuid sm_active util_source memory_used_mib".split()
    ),
    "refusals": tuple("seq at_ms type job_id subject producer code message".split()),
}

JSON_COLUMNS: frozenset[tuple[str, str]] = frozenset({("events", "payload")})
"""(table, column) of the append columns held as a `JsonColumn` (Arrow `large_string`)."""

ALL_TABLES: tuple[str, ...] = tuple(APPEND_COLUMNS) + tuple(ROW_CLASSES)


_NO_GPU = GpuRow(uuid=None, model=None, clique=None)
"""What an allocation row says of a GPU the projection does not know (or of none)."""


def columns_of(table: str) -> tuple[str, ...]:
    if table in APPEND_COLUMNS:
        return APPEND_COLUMNS[table]
    return ROW_CLASSES[table].COLUMNS
