"""Pure event -> row mappers.

`Projection` folds events (in stream order) into a small projection state and records what
must be written to each table in a `Batch`:

- *append* tables get one tuple per fact (`events`, `job_transitions`, `decisions`,
  `pending_reasons`, `quota_usage`, `gpu_metrics`, `refusals`);
- *current-state* tables (`jobs`, `allocations`, `preemptions`, `nodes`, `gpus`, `tenants`,
  `priority_classes`) get keyed upserts: the batch keeps the latest version of every row it
  touched, and the writer replaces those keys (delete + insert) inside one transaction. A key
  mapped to None is a delete.

Only accepted events become facts: every event is first folded into the services' own
`Ledger` under the shared acceptance rules (`services.domain.fold.acceptance.admit`); a refused
one is kept in `events` and recorded in `refusals` (code, message) and changes nothing else,
so the projection never shows what the services refused.

The state is the current-state rows (all jobs, nodes, GPUs, tenants; allocation intervals
and preemptions still open) plus that ledger, so a restarted writer rebuilds it from the
tables it wrote and the events it projected (`Projection.load`). No I/O, no clock, no
database here: this module is tested alone.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import Any

import msgspec

from gpuledger import events as ev
from gpuledger.events.catalog import ALL_EVENTS
from gpuledger.events.ids import tenant_job_key
from gpuledger.events.reasons import TERMINAL_STATES as TERMINAL
from gpuledger.events.reasons import EvictReason, JobState, RequestReason
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.fold.ledger import Ledger, run_end_state
from gpuledger.services.domain.fold.nodes import node_state
from gpuledger.services.domain.policy.quota import (
    borrowing_limit,
    borrowing_limits_by_model,
    lending_limit,
    lending_limits_by_model,
)

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


class SequenceGap(RuntimeError):
    """The next message's sequence is not last+1: the projector refuses to skip anything."""

    def __init__(self, expected: int, got: int, reason: str | None = None) -> None:
        what = reason or (
            f"expected stream sequence {expected}, got {got}; "
            f"refusing to skip {got - expected} message(s)"
        )
        super().__init__(
            f"sequence gap: {what}. The projection is intact up to "
            f"{expected - 1}; fix the source (or rebuild from a complete log) and restart."
        )
        self.expected = expected
        self.got = got


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
    """job_id tenant priority_class priority preemptible slo_class state replicas min_members
    member_gpus member_gpu_milli member_mig_profile gpu_models min_gpu_memory_mib gpu_milli
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
    registered_at_ms last_heartbeat_ms lost_at_ms lost_message running_members""",
    "node",
)

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
    lending_limit_by_model""",
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
    for c in (JobRow, AllocationRow, PreemptionRow, NodeRow, GpuRow, TenantRow, PriorityClassRow)
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


# ---------------------------------------------------------------- the projection


def _mig_milli(profile: str) -> int:
    return ev.Resources(mig_profile=profile).gpu_milli_total()


def _about(event: ev.Event) -> str | None:
    """The job (or node, or entity) an event is about, for `refusals.job_id`."""
    if isinstance(event, ev.JobSubmitted):
        return event.job.job_id
    return getattr(event, "job_id", None) or event.correlation_id or None


class Projection:
    """Folds events into projection state and records table changes in `self.batch`."""

    def __init__(self) -> None:
        self.last_seq = 0
        self.jobs: dict[str, Row] = {}
        self.open_allocs: dict[str, dict[int, Row]] = {}  # allocation -> rank -> member row
        self.open_preemptions: dict[str, Row] = {}  # allocation_id -> latest open request
        self.nodes: dict[str, Row] = {}
        self.gpus: dict[tuple[str, int], Row] = {}
        self.tenants: dict[str, Row] = {}
        self.ledger = Ledger()
        """The services' own fold: an event is mapped to rows only if it accepts it."""
        self._bind(Batch())

    def _bind(self, batch: Batch) -> None:
        """Record changes into `batch` (its appenders cached for the hot paths)."""
        self.batch = batch
        add = batch.add
        self._add_event = add["events"]
        self._add_decision = add["decisions"]
        self._add_transition = add["job_transitions"]
        self._add_pending = add["pending_reasons"]
        self._add_quota = add["quota_usage"]
        self._add_metric = add["gpu_metrics"]
        self._add_refusal = add["refusals"]
        self._up_jobs = batch.upserts["jobs"]
        self._up_allocs = batch.upserts["allocations"]

    # -------------------------------------------------------------- state from tables

    @classmethod
    def load(
        cls,
        last_seq: int,
        tables: dict[str, Iterable[tuple]],
        log: Iterable[tuple[int, str, ev.Event]] = (),
    ) -> Projection:
        """Rebuild the state from stored current-state rows (`jobs`, open `allocations` and
        `preemptions`, `nodes`, `gpus`, `tenants`), each tuple in the table's column order,
        and the acceptance fold from the events already projected (`log`: `(seq, subject,
        event)` in stream order, the stored `events` rows)."""
        p = cls()
        p.last_seq = last_seq
        ledger = p.ledger
        for seq, subject, event in log:
            admit(ledger, seq, event, subject)
        for t in tables.get("jobs", ()):
            r = JobRow.from_tuple(t)
            p.jobs[r.job_id] = r
        for r in AllocationRow.from_table_rows(tables.get("allocations", ())):
            if r.ended_at_ms is None:
                p.open_allocs.setdefault(r.allocation_id, {})[r.rank] = r
        for t in sorted(tables.get("preemptions", ()), key=lambda t: t[0]):
            r = PreemptionRow.from_tuple(t)
            if r.outcome == "requested":
                p.open_preemptions[r.allocation_id] = r
        for t in tables.get("nodes", ()):
            r = NodeRow.from_tuple(t)
            p.nodes[r.node] = r
        for t in tables.get("gpus", ()):
            r = GpuRow.from_tuple(t)
            p.gpus[(r.node, r.gpu_index)] = r
        for t in tables.get("tenants", ()):
            r = TenantRow.from_tuple(t)
            p.tenants[r.tenant] = r
        return p

    # -------------------------------------------------------------- entry points

    def accept(self, seq: int) -> bool:
        """False for a duplicate (seq already applied); raises SequenceGap on a gap."""
        if seq <= self.last_seq:
            return False
        if seq != self.last_seq + 1:
            raise SequenceGap(self.last_seq + 1, seq)
        return True

    def apply(self, seq: int, subject: str, event: ev.Event) -> bool:
        """Fold one stream message. Returns False when it was a duplicate (skipped)."""
        if seq != self.last_seq + 1 and not self.accept(seq):
            return False
        b = self.batch
        if b.first_seq is None:
            b.first_seq = seq
        b.last_seq = seq
        b.last_at_ms = event.occurred_at_ms
        b.count += 1
        self.last_seq = seq
        cls = type(event)
        name, decision = _KINDS.get(cls) or _kind(cls)
        self._add_event(
            seq,
            subject,
            name,
            event.event_id,
            event.occurred_at_ms,
            event.causation_id,
            event.correlation_id,
            event.producer,
            event.input_seq if decision else None,
            event.config_digest if decision else None,
            event.leader_epoch if decision else None,
            event,  # the payload: encoded onto the batch's JSON column
        )
        refusal = admit(self.ledger, seq, event, subject)
        if refusal is not None:
            self._add_refusal(
                seq,
                event.occurred_at_ms,
                name,
                _about(event),
                subject,
                event.producer,
                refusal.code,
                refusal.message,
            )
            return True
        if decision:
            details = getattr(event, "details", None)
            self._add_decision(
                seq,
                event.occurred_at_ms,
                name,
                getattr(event, "job_id", None) or event.correlation_id or None,
                event.event_id,
                event.producer,
                event.input_seq,
                event.config_digest,
                event.leader_epoch,
                getattr(event, "reason", None),
                getattr(event, "message", None),
                _dumps(details) if details else None,
            )
        handler = _HANDLERS.get(cls)
        if handler is not None:
            handler(self, seq, event)
            job_id = self._key_of(event)
            rec = self.ledger.jobs.get(job_id) if job_id is not None else None
            if rec is not None and rec.service is not None:
                self._service_row(rec.service, seq, event)
            if rec is not None and rec.array_parent is not None:
                self._service_row(rec.array_parent, seq, event)
            if rec is not None and rec.spec.array and isinstance(event, ev.JobCancelled):
                self._sync_replicas(rec.job_id, seq, event)  # its pending tasks stop at once
                self._service_row(rec.job_id, seq, event)
        return True

    def _service_row(self, service_id: str, seq: int, e: ev.Event) -> None:
        """A service's row after an event about one of its replicas: its state is the fold's
        (`running` while a replica is placed, else `pending`)."""
        row = self.jobs.get(service_id)
        svc = self.ledger.jobs.get(service_id)
        if row is not None and svc is not None and svc.spec.array and row.message != svc.message:
            row.message = svc.message  # an array's tasks counted by state
            self._touch(row, seq, e.occurred_at_ms)
        if row is not None and svc is not None and row.state != svc.state:
            if svc.state in TERMINAL:
                row.finished_at_ms = e.occurred_at_ms
            if svc.spec.array and svc.tasks_started and row.first_placed_at_ms is None:
                row.first_placed_at_ms = e.occurred_at_ms  # its first task placed
            self._transition(row, seq, e, None)
            self._touch(row, seq, e.occurred_at_ms)

    def apply_undecodable(self, seq: int, subject: str, error: str, head: str) -> bool:
        """Record a message that is not a valid event (the runtime dead-letters it)."""
        if not self.accept(seq):
            return False
        b = self.batch
        if b.first_seq is None:
            b.first_seq = seq
        b.last_seq = seq
        b.count += 1
        self.last_seq = seq
        self._add_event(
            seq,
            subject,
            "Undecodable",
            "",
            None,
            "",
            "",
            "",
            None,
            None,
            None,
            {"error": error, "payload_head": head},
        )
        return True

    def drain(self) -> Batch:
        """Hand over the changes recorded so far and start a new batch."""
        b = self.batch
        self._bind(Batch())
        return b

    # -------------------------------------------------------------- helpers

    def _key_of(self, event: ev.Event) -> str | None:
        """The fold's key of the job an event is about: a client event names the job by the
        id its tenant submitted (`Ledger.job_key`: job ids are per tenant), a decision by
        its key. Rows are keyed like the fold."""
        if isinstance(event, ev.JobSubmitted):
            name, tenant = event.job.job_id, event.job.tenant
        elif isinstance(event, (ev.JobCancelled, ev.ServiceScaled)):
            name, tenant = event.job_id, event.tenant
        else:
            return getattr(event, "job_id", None)
        return self.ledger.job_key(tenant, name) or name

    def _job(self, job_id: str, tenant: str | None = None) -> Row:
        job = self.jobs.get(job_id)
        if job is None:  # a partial log: keep what we know
            job = JobRow(job_id=job_id, tenant=tenant, state=JobState.submitted)
            self.jobs[job_id] = job
        return job

    def _touch(self, job: Row, seq: int, at_ms: int) -> None:
        job.updated_at_ms = at_ms
        job.updated_seq = seq
        self._up_jobs[(job.job_id,)] = job

    def _folded(self, job_id: str) -> JobState | None:
        """The job's state in the services' fold after the event being mapped (None for a
        job the fold does not hold)."""
        rec = self.ledger.jobs.get(job_id)
        return rec.state if rec is not None else None

    def _transition(self, job: Row, seq: int, e: ev.Event, reason: str | None) -> None:
        """Move the row to the state the services' fold has for the job after `e`: one job
        state machine (`services.domain.fold.ledger`), which this module never recomputes.
        Every event mapped here was folded first, so the fold holds the job of every row it
        moves; a row the fold does not hold keeps its state."""
        to = self._folded(job.job_id)
        if to is not None and job.state != to:
            self._add_transition(
                seq,
                e.occurred_at_ms,
                job.job_id,
                job.tenant,
                job.state,
                to,
                type(e).__name__,
                reason,
            )
            job.state = to

    def _close_alloc(self, allocation_id: str, at_ms: int, reason: str) -> None:
        ranks = self.open_allocs.pop(allocation_id, None)
        if not ranks:
            return
        for r in ranks.values():
            if r.ended_at_ms is None:
                r.ended_at_ms = at_ms
                r.end_reason = reason
                self._up_allocs[(r.allocation_id, r.rank, r.placed_seq)] = r

    def _end_preemption(self, allocation_id: str, at_ms: int, outcome: str) -> None:
        p = self.open_preemptions.pop(allocation_id, None)
        if p is not None:
            p.outcome = outcome
            p.ended_at_ms = at_ms
            self.batch.upsert(p)

    # -------------------------------------------------------------- handlers: jobs

    def _submitted(self, seq: int, e: ev.JobSubmitted) -> None:
        spec = e.job
        key = self._key_of(e) or spec.job_id
        existing = self.jobs.get(key)
        if existing is not None and existing.submitted_at_ms is not None:
            return  # a retried submission: first one wins
        res = spec.resources
        job = existing or JobRow(job_id=key, state=JobState.submitted)
        job.tenant = spec.tenant
        job.priority_class = spec.priority_class
        job.replicas = spec.replicas
        job.min_members = spec.members_min()
        job.member_gpus = res.gpus
        job.member_gpu_milli = res.gpu_milli
        job.member_mig_profile = res.mig_profile
        job.gpu_models = list(res.gpu_models)
        job.min_gpu_memory_mib = res.min_gpu_memory_mib
        job.gpu_milli = res.gpu_milli_total() * spec.replicas
        job.duration_s = spec.duration_s
        job.submitted_at_ms = e.occurred_at_ms
        self.jobs[key] = job
        if existing is None:
            self._add_transition(
                seq,
                e.occurred_at_ms,
                job.job_id,
                job.tenant,
                None,
                JobState.submitted,
                "JobSubmitted",
                None,
            )
        self._touch(job, seq, e.occurred_at_ms)

    def _admitted(self, seq: int, e: ev.JobAdmitted) -> None:
        job = self._job(e.job_id, e.tenant)
        if job.state != JobState.submitted:
            return
        job.priority_class = e.priority_class
        job.priority = e.priority
        job.preemptible = e.preemptible
        job.slo_class = e.slo_class
        job.admitted_at_ms = job.pending_since_ms = e.occurred_at_ms
        self._transition(job, seq, e, None)
        self._touch(job, seq, e.occurred_at_ms)
        svc = self.ledger.jobs.get(e.job_id)
        if svc is not None and (svc.spec.is_service or svc.spec.array):  # runs as its replicas
            self._sync_replicas(e.job_id, seq, e)  # (or tasks)

    def _request_refused(self, seq: int, e: ev.RequestRefused) -> None:
        """A submission refused while job ids were global created no job (the fold undid
        it: `Ledger.refused_creation`): neither does its row."""
        if e.request != "JobSubmitted" or e.reason != RequestReason.JobIdConflict:
            return
        key = tenant_job_key(e.tenant, e.job_id)
        row = self.jobs.get(key)
        if row is not None and key not in self.ledger.jobs and row.state == JobState.submitted:
            del self.jobs[key]
            self.batch.delete("jobs", (key,))

    def _scaled(self, seq: int, e: ev.ServiceScaled) -> None:
        key = self._key_of(e) or e.job_id
        job = self.jobs.get(key)
        if job is not None:
            job.replicas = e.replicas
            job.gpu_milli = self.ledger.jobs[key].spec.resources.gpu_milli_total() * e.replicas
            self._touch(job, seq, e.occurred_at_ms)
        self._sync_replicas(key, seq, e)

    def _sync_replicas(self, service_id: str, seq: int, e: ev.Event) -> None:
        """Rows of a service's replicas (or an array job's tasks) as the services' fold has
        them after `e`: created when queued, queued again or cancelled when the service is
        scaled (or the service or array cancelled)."""
        parent = self.ledger.jobs.get(service_id)
        records = (
            self.ledger.tasks_of(service_id)
            if parent is not None and parent.spec.array
            else self.ledger.replicas_of(service_id)
        )
        for rec in records:
            row = self.jobs.get(rec.job_id)
            if row is None:
                spec, res = rec.spec, rec.spec.resources
                row = JobRow(
                    job_id=rec.job_id,
                    tenant=rec.tenant,
                    state=JobState.submitted,
                    priority_class=spec.priority_class,
                    priority=rec.priority,
                    preemptible=rec.preemptible,
                    slo_class=rec.slo_class,
                    replicas=1,
                    min_members=1,
                    member_gpus=res.gpus,
                    member_gpu_milli=res.gpu_milli,
                    member_mig_profile=res.mig_profile,
                    gpu_models=list(res.gpu_models),
                    min_gpu_memory_mib=res.min_gpu_memory_mib,
                    gpu_milli=res.gpu_milli_total(),
                    duration_s=spec.duration_s,
                    submitted_at_ms=rec.submitted_ms,
                    admitted_at_ms=rec.admitted_ms,
                )
                self.jobs[rec.job_id] = row
            state = rec.state
            if state in (JobState.pending, JobState.cancelled) and row.state != state:
                if state == JobState.pending:
                    row.pending_since_ms, row.finished_at_ms = rec.pending_since_ms, None
                    row.cancel_requested, row.reason, row.message = False, None, None
                else:
                    row.finished_at_ms = e.occurred_at_ms
                    row.reason = rec.reason
                self._transition(row, seq, e, rec.reason)
                self._touch(row, seq, e.occurred_at_ms)
            elif rec.cancel_requested and not row.cancel_requested:
                row.cancel_requested, row.reason = True, rec.reason
                self._touch(row, seq, e.occurred_at_ms)

    def _rejected(self, seq: int, e: ev.JobRejected) -> None:
        job = self._job(e.job_id, e.tenant)
        if job.state in TERMINAL:
            return
        job.reason, job.message, job.details = e.reason, e.message, _dumps(e.details)
        job.finished_at_ms = e.occurred_at_ms
        self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)

    def _cancelled(self, seq: int, e: ev.JobCancelled) -> None:
        key = self._key_of(e) or e.job_id
        job = self.jobs.get(key)
        if job is None or job.tenant != e.tenant or job.state in TERMINAL:
            return  # refused as the ledger refuses it (`RequestRefused`, UnknownJob): no row
        job.cancel_requested = True
        job.reason, job.message = e.reason, "cancelled by the client"
        if job.allocation_id is None:  # nothing placed: it ends at once
            job.finished_at_ms = e.occurred_at_ms
            self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)
        self._sync_replicas(key, seq, e)

    def _withdrawn(self, seq: int, e: ev.JobWithdrawn) -> None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state != JobState.pending:
            return  # refused as the ledger refuses it
        job.reason, job.message, job.details = e.reason, e.message, _dumps(e.details or {})
        job.finished_at_ms = e.occurred_at_ms
        self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)

    def _pending_reason(self, seq: int, e: ev.PendingReasonChanged) -> None:
        job = self._job(e.job_id)
        details = e.details or {}
        qp = details.get("queue_position")
        help_ = details.get("preemption_would_help")
        self._add_pending(
            seq,
            e.occurred_at_ms,
            e.job_id,
            job.tenant,
            e.reason,
            e.message,
            _dumps(details),
            qp if isinstance(qp, int) and not isinstance(qp, bool) else None,
            help_ if isinstance(help_, bool) else None,
        )
        if job.state in TERMINAL:
            return
        job.reason, job.message, job.details = e.reason, e.message, _dumps(details)
        self._touch(job, seq, e.occurred_at_ms)

    def _placed(self, seq: int, e: ev.GangPlaced) -> None:
        job = self._job(e.job_id, e.tenant)
        if job.state in TERMINAL or e.allocation_id in self.open_allocs:
            return
        job.attempts = (job.attempts or 0) + 1
        job.allocation_id = e.allocation_id
        if job.first_placed_at_ms is None:
            job.first_placed_at_ms = e.occurred_at_ms
        job.placed_at_ms = e.occurred_at_ms
        job.reason = job.message = job.details = None
        attempt_s = e.allocation_id.rpartition("#")[2]
        attempt = int(attempt_s) if attempt_s.isdigit() else job.attempts
        ranks: dict[int, Row] = {}
        self._member_rows(
            seq,
            e.allocation_id,
            e.job_id,
            e.tenant or job.tenant,
            attempt,
            e.borrowing,
            e.members,
            e.occurred_at_ms,
            ranks,
        )
        self.open_allocs[e.allocation_id] = ranks
        self._transition(job, seq, e, None)
        self._touch(job, seq, e.occurred_at_ms)

    def _member_rows(
        self,
        seq: int,
        alloc_id: str,
        job_id: str,
        tenant: str,
        attempt: int,
        borrowing: bool,
        members,
        at: int,
        ranks: dict[int, Row],
    ) -> None:
        """One allocation row per member of `members` (per GPU index), into `ranks`."""
        gpus, ups, new_row = self.gpus, self._up_allocs, AllocationRow.new
        for m in members:
            rank, node, mig = m.rank, m.node, m.mig_profile
            if not m.gpus:
                sharing, milli, indices = "none", 0, (-1,)
            elif mig:
                sharing, milli, indices = "mig", _mig_milli(mig), m.gpus
            elif m.gpu_milli:
                sharing, milli, indices = "milli", m.gpu_milli, m.gpus
            else:
                sharing, milli, indices = "exclusive", 1000, m.gpus
            found = [gpus.get((node, idx)) for idx in indices]
            if None in found:  # GPUs the projection has not seen registered
                found = [g or _NO_GPU for g in found]
            ranks[rank] = ups[(alloc_id, rank, seq)] = new_row(  # AllocationRow.COLUMNS, in order
                alloc_id,
                job_id,
                tenant,
                attempt,
                rank,
                node,
                tuple(indices),  # (the same tuple when the event's is one)
                tuple([g.uuid for g in found]),
                tuple([g.model for g in found]),
                tuple([g.clique for g in found]),
                sharing,
                milli,
                mig,
                m.mig_start,
                borrowing,
                seq,
                at,
                None,  # started_at_ms
                None,  # ended_at_ms
                None,  # end_reason
            )

    def _member_started(self, seq: int, e: ev.MemberStarted) -> None:
        ranks = self.open_allocs.get(e.allocation_id)
        r = ranks.get(e.rank) if ranks else None
        if r is not None and r.started_at_ms is None:
            r.started_at_ms = e.occurred_at_ms
            self._up_allocs[(r.allocation_id, r.rank, r.placed_seq)] = r

    def _member_checkpointed(self, seq: int, e: ev.MemberCheckpointed) -> None:
        p = self.open_preemptions.get(e.allocation_id)
        if p is not None and p.checkpointed_at_ms is None:
            p.checkpointed_at_ms = e.occurred_at_ms
            self.batch.upsert(p)
        job = self.jobs.get(e.job_id)
        if job is not None and e.progress_ms and e.progress_ms > (job.progress_ms or 0):
            job.progress_ms = e.progress_ms
            self._touch(job, seq, e.occurred_at_ms)

    def _member_exited(self, seq: int, e: ev.MemberExited) -> None:
        ranks = self.open_allocs.get(e.allocation_id)
        if not ranks:
            return
        r = ranks.pop(e.rank, None)
        if r is not None and r.ended_at_ms is None:
            r.ended_at_ms = e.occurred_at_ms
            r.end_reason = e.outcome
            self._up_allocs[(r.allocation_id, r.rank, r.placed_seq)] = r
        if not ranks:
            del self.open_allocs[e.allocation_id]

    def _preemption_requested(self, seq: int, e: ev.PreemptionRequested) -> None:
        job = self._job(e.job_id)
        ben = self.jobs.get(e.beneficiary)
        if e.allocation_id in self.open_preemptions:
            return  # already being preempted: the first request stands
        p = PreemptionRow(
            request_seq=seq,
            requested_at_ms=e.occurred_at_ms,
            victim_job_id=e.job_id,
            victim_tenant=job.tenant,
            victim_priority=job.priority,
            allocation_id=e.allocation_id,
            beneficiary=e.beneficiary,
            beneficiary_tenant=ben.tenant if ben is not None else None,
            beneficiary_priority=ben.priority if ben is not None else None,
            reason=e.reason,
            message=e.message,
            deadline_ms=e.deadline_ms,
            details=_dumps(e.details or {}),
            outcome="requested",
        )
        self.open_preemptions[e.allocation_id] = p
        self.batch.upsert(p)
        if isinstance(e.ranks, tuple):
            return  # an elastic gang giving up members keeps running
        if job.state == JobState.running and job.allocation_id == e.allocation_id:
            self._transition(job, seq, e, e.reason)
            self._touch(job, seq, e.occurred_at_ms)

    def _resized(self, seq: int, e: ev.GangResized) -> None:
        """An elastic gang shrank: its partial preemption ends with outcome `shrunk` (the
        leavers' allocation rows were closed by their `MemberExited`)."""
        job = self.jobs.get(e.job_id)
        if e.to_members > e.from_members:  # a grow: rows for the members added
            ranks = self.open_allocs.get(e.allocation_id)
            if ranks is None or job is None:
                return
            first = next(iter(ranks.values()), None)
            attempt = first.attempt if first is not None else (job.attempts or 1)
            borrowing = bool(first.borrowing) if first is not None else False
            added = e.members[e.from_members :]
            self._member_rows(
                seq,
                e.allocation_id,
                e.job_id,
                job.tenant,
                attempt,
                borrowing,
                added,
                e.occurred_at_ms,
                ranks,
            )
            self._touch(job, seq, e.occurred_at_ms)
            return
        p = self.open_preemptions.pop(e.allocation_id, None)
        if p is not None:
            p.evicted_at_ms = p.ended_at_ms = e.occurred_at_ms
            p.eviction_reason = e.reason
            p.checkpointed = e.checkpointed
            p.lost_gpu_ms = e.lost_gpu_ms
            p.outcome = "shrunk"
            details = msgspec.json.decode(p.details) if p.details else {}
            details["resized"] = {"from": e.from_members, "to": e.to_members}
            p.details = _dumps(details)
            self.batch.upsert(p)
        if job is not None:
            self._touch(job, seq, e.occurred_at_ms)

    def _release(self, job: Row | None, allocation_id: str) -> None:
        if job is not None and job.allocation_id == allocation_id:
            job.allocation_id = None

    def _evicted(self, seq: int, e: ev.GangEvicted) -> None:
        self._close_alloc(e.allocation_id, e.occurred_at_ms, "evicted:" + e.reason)
        self._drained(e.allocation_id)
        p = self.open_preemptions.pop(e.allocation_id, None)
        if p is not None:
            p.evicted_at_ms = p.ended_at_ms = e.occurred_at_ms
            p.eviction_reason = e.reason
            p.checkpointed = e.checkpointed
            p.lost_gpu_ms = e.lost_gpu_ms
            p.progress_ms = e.progress_ms
            p.outcome = "evicted"
            self.batch.upsert(p)
        job = self.jobs.get(e.job_id)
        if job is None:
            return
        self._release(job, e.allocation_id)
        if job.state in TERMINAL:
            return
        job.progress_ms = e.progress_ms
        if e.reason in (EvictReason.Cancelled, EvictReason.ScaledDown) or job.cancel_requested:
            job.finished_at_ms = e.occurred_at_ms
            self._transition(job, seq, e, e.reason)
        else:
            job.preemptions = (job.preemptions or 0) + 1
            job.reason = e.reason
            job.message = (
                f"evicted from {e.allocation_id}"
                + (f" for {e.preempted_by}" if e.preempted_by else "")
                + f"; lost {e.lost_gpu_ms / 1000:.0f} GPU-s"
            )
            job.details = None
            job.pending_since_ms = e.occurred_at_ms
            self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)
        rec = self.ledger.jobs.get(e.job_id)
        if rec is not None and rec.service is not None:  # scaled up again while it stopped
            self._sync_replicas(rec.service, seq, e)

    def _requeued(self, seq: int, e: ev.GangRequeued) -> None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state in TERMINAL or job.allocation_id is not None:
            return
        job.pending_since_ms = e.occurred_at_ms
        self._transition(job, seq, e, "Requeued")
        self._touch(job, seq, e.occurred_at_ms)

    def _ended(self, seq: int, e: ev.GangCompleted | ev.GangFailed) -> None:
        """A run ended: its allocation rows and open preemption close with the run's outcome
        (the fold's `run_end_state`); the job moves to its folded state."""
        self._drained(e.allocation_id)
        outcome = run_end_state(e)
        self._close_alloc(e.allocation_id, e.occurred_at_ms, outcome)
        self._end_preemption(e.allocation_id, e.occurred_at_ms, outcome)
        job = self.jobs.get(e.job_id)
        if job is None:
            return
        self._release(job, e.allocation_id)
        if job.state in TERMINAL:
            return
        job.finished_at_ms = e.occurred_at_ms
        if isinstance(e, ev.GangFailed):
            job.reason, job.message = e.reason, e.message
        else:
            job.reason = job.message = job.details = None
        self._transition(job, seq, e, getattr(e, "reason", None))
        self._touch(job, seq, e.occurred_at_ms)

    # -------------------------------------------------------------- handlers: config, quota

    def _tenant(self, seq: int, e: ev.TenantConfigured) -> None:
        t = self.tenants.get(e.tenant) or TenantRow(tenant=e.tenant)
        t.parent = e.tenant.rpartition("/")[0] or None
        t.guaranteed_gpu_milli = e.guaranteed_gpu_milli
        t.limit_gpu_milli = e.limit_gpu_milli
        t.over_quota_weight = e.over_quota_weight
        t.borrowing_limit_gpu_milli = borrowing_limit(e)
        t.lending_limit_gpu_milli = lending_limit(e)
        t.borrowing_limit_by_model = _dumps(dict(borrowing_limits_by_model(e)) or None)
        t.lending_limit_by_model = _dumps(dict(lending_limits_by_model(e)) or None)
        t.configured_at_ms = e.occurred_at_ms
        t.updated_at_ms = e.occurred_at_ms
        self.tenants[e.tenant] = t
        self.batch.upsert(t)

    def _priority_class(self, seq: int, e: ev.PriorityClassConfigured) -> None:
        self.batch.upsert(
            PriorityClassRow(
                name=e.name,
                value=e.value,
                preemptible=e.preemptible,
                slo_class=e.slo_class,
                description=e.description,
                grace_s=e.grace_s,
                allow_timeslice=e.allow_timeslice,
                configured_at_ms=e.occurred_at_ms,
            )
        )

    def _fair_share(self, seq: int, e: ev.FairShareUpdated) -> None:
        add = self._add_quota
        at = e.occurred_at_ms
        for s in e.shares:
            add(
                seq,
                at,
                s.tenant,
                s.guaranteed_gpu_milli,
                s.fair_share_gpu_milli,
                s.allocated_gpu_milli,
                s.demand_gpu_milli,
                max(0, s.allocated_gpu_milli - s.guaranteed_gpu_milli),
            )
            t = self.tenants.get(s.tenant)
            if t is None:
                t = TenantRow(
                    tenant=s.tenant,
                    parent=s.tenant.rpartition("/")[0] or None,
                    guaranteed_gpu_milli=s.guaranteed_gpu_milli,
                )
                self.tenants[s.tenant] = t
            t.fair_share_gpu_milli = s.fair_share_gpu_milli
            t.allocated_gpu_milli = s.allocated_gpu_milli
            t.demand_gpu_milli = s.demand_gpu_milli
            t.updated_at_ms = at
            self.batch.upsert(t)

    # -------------------------------------------------------------- handlers: nodes

    def _node_registered(self, seq: int, e: ev.NodeRegistered) -> None:
        info = e.node
        n = self.nodes.get(info.name)
        if n is None:
            n = NodeRow(node=info.name, running_members=0)
            self.nodes[info.name] = n
        n.pool, n.leaf_switch = info.pool, info.leaf_switch
        n.cpu_milli, n.memory_mib = info.cpu_milli, info.memory_mib
        n.gpu_count = len(info.gpus)
        n.simulated = e.simulated
        n.status = node_state(self.ledger, info.name)  # a re-registration keeps a cordon
        n.labels = _dumps(info.labels or {})
        n.registered_at_ms = e.occurred_at_ms
        n.lost_at_ms = n.lost_message = None
        self.batch.upsert(n)
        seen = set()
        for g in info.gpus:
            key = (info.name, g.index)
            seen.add(key)
            row = GpuRow(
                node=info.name,
                gpu_index=g.index,
                uuid=g.uuid,
                model=g.model,
                memory_mib=g.memory_mib,
                clique=g.clique,
                sharing=g.sharing,
                healthy=g.healthy,
                registered_at_ms=e.occurred_at_ms,
            )
            self.gpus[key] = row
            self.batch.upsert(row)
        for key in [k for k in self.gpus if k[0] == info.name and k not in seen]:
            del self.gpus[key]
            self.batch.delete("gpus", key)

    def _heartbeat(self, seq: int, e: ev.NodeHeartbeat) -> None:
        n = self.nodes.get(e.node)
        if n is None:
            return
        n.last_heartbeat_ms = e.occurred_at_ms
        n.running_members = len(e.running)
        rec = self.ledger.nodes.get(e.node)
        if n.status == "lost" and rec is not None and not rec.lost:
            # the ledger's rule (the scheduler places on it again): heard from again, it is back
            n.lost_at_ms = n.lost_message = None
        if rec is not None:  # the ledger's state (a drain ends as `drained` between reports)
            n.status = node_state(self.ledger, e.node)
        self.batch.upsert(n)

    def _node_lost(self, seq: int, e: ev.NodeLost) -> None:
        n = self.nodes.get(e.node)
        if n is None:
            return
        n.status = "lost"
        n.lost_at_ms = e.occurred_at_ms
        n.lost_message = e.message
        self.batch.upsert(n)

    def _drained(self, allocation_id: str) -> None:
        """A run left: its draining nodes' status (`draining` -> `drained`) is the ledger's."""
        rec = self.ledger.allocations.get(allocation_id)
        for node in {m.node for m in rec.members} if rec is not None else ():
            n = self.nodes.get(node)
            if n is not None and n.status == "draining":
                n.status = node_state(self.ledger, node)
                self.batch.upsert(n)

    def _node_control(self, seq: int, e: ev.NodeCordoned | ev.NodeUncordoned) -> None:
        """The operator's cordon: the node's status is the ledger's (`nodes.node_state`)."""
        n = self.nodes.get(e.node)
        if n is not None:
            n.status = node_state(self.ledger, e.node)
            self.batch.upsert(n)

    def _metrics(self, seq: int, e: ev.GpuMetricsReported) -> None:
        add = self._add_metric
        at = e.occurred_at_ms
        node = e.node
        for s in e.samples:
            add(seq, at, node, s.uuid, s.mig_uuid, s.sm_active, s.util_source, s.memory_used_mib)


_HANDLERS = {
    ev.RequestRefused: Projection._request_refused,
    ev.JobSubmitted: Projection._submitted,
    ev.JobAdmitted: Projection._admitted,
    ev.JobRejected: Projection._rejected,
    ev.JobCancelled: Projection._cancelled,
    ev.JobWithdrawn: Projection._withdrawn,
    ev.ServiceScaled: Projection._scaled,
    ev.PendingReasonChanged: Projection._pending_reason,
    ev.GangPlaced: Projection._placed,
    ev.MemberStarted: Projection._member_started,
    ev.MemberCheckpointed: Projection._member_checkpointed,
    ev.MemberExited: Projection._member_exited,
    ev.PreemptionRequested: Projection._preemption_requested,
    ev.GangEvicted: Projection._evicted,
    ev.GangResized: Projection._resized,
    ev.GangRequeued: Projection._requeued,
    ev.GangCompleted: Projection._ended,
    ev.GangFailed: Projection._ended,
    ev.TenantConfigured: Projection._tenant,
    ev.PriorityClassConfigured: Projection._priority_class,
    ev.FairShareUpdated: Projection._fair_share,
    ev.NodeRegistered: Projection._node_registered,
    ev.NodeHeartbeat: Projection._heartbeat,
    ev.NodeLost: Projection._node_lost,
    ev.NodeCordoned: Projection._node_control,
    ev.NodeUncordoned: Projection._node_control,
    ev.GpuMetricsReported: Projection._metrics,
}


def _kind(cls: type) -> tuple[str, bool]:
    """What `Projection.apply` needs to know of an event type: its name, and whether it is a
    decision."""
    return cls.__name__, issubclass(cls, ev.Decision)


_KINDS = {cls: _kind(cls) for cls in ALL_EVENTS}
"""`_kind` of every event type (computed once; a pure function of the type)."""
