"""`Projection`: the entry points of the fold into rows (load, apply, drain) and the table of
event handlers."""

from __future__ import annotations

from collections.abc import Iterable

from gpuledger import events as ev
from gpuledger.events.catalog import ALL_EVENTS
from gpuledger.events.reasons import TERMINAL_STATES as TERMINAL
from gpuledger.projections.mappers.allocations import AllocationMappers
from gpuledger.projections.mappers.batch import Batch
from gpuledger.projections.mappers.jobs import JobMappers
from gpuledger.projections.mappers.nodes import NodeMappers
from gpuledger.projections.mappers.rows import (
    AllocationRow,
    GpuRow,
    JobRow,
    NodeRow,
    PreemptionRow,
    TenantRow,
    _dumps,
)
from gpuledger.projections.mappers.state import _about
from gpuledger.projections.mappers.tenants import TenantMappers
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side
from gpuledger.services.domain.fold.acceptance import admit


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


class Projection(JobMappers, AllocationMappers, TenantMappers, NodeMappers):
    """Folds events into projection state and records table changes in `self.batch`."""

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
                _about(self.ledger, event, subject),
                subject,
                event.producer,
                refusal.code,
                refusal.message,
            )
            return True
        if decision:
            self._decision_row(seq, name, event)  # type: ignore[arg-type]  # a Decision: _kind says so
        handler = _HANDLERS.get(cls)
        if handler is not None:
            handler(self, seq, event)
            self._parent_rows(seq, event)
        if self.ledger.released_tasks:  # (also on an event no handler here maps)
            self._released_rows(seq, event)
        return True

    def _decision_row(self, seq: int, name: str, event: ev.Decision) -> None:
        """A decision's row: who decided it from what, its reason, message and details."""
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

    def _parent_rows(self, seq: int, event: ev.Event) -> None:
        """The rows of the service or array a folded event's job belongs to (a cancelled
        array's pending tasks stop at once), and an array's counts."""
        job_id = self._key_of(event)
        rec = self.ledger.jobs.get(job_id) if job_id is not None else None
        if rec is None:
            return
        if rec.service is not None:
            self._service_row(rec.service, seq, event)
        if rec.array_parent is not None:
            self._service_row(rec.array_parent, seq, event)
        if rec.spec.array and isinstance(event, ev.JobCancelled):
            self._sync_replicas(rec.job_id, seq, event)
            self._service_row(rec.job_id, seq, event)
        if rec.spec.array:
            self._array_counts(rec.job_id, seq, event)
        elif rec.array_parent is not None:
            self._array_counts(rec.array_parent, seq, event)

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
    ev.JobPriorityChanged: Projection._priority_changed,
    ev.MaintenanceScheduled: Projection._maintenance,
    ev.MaintenanceCancelled: Projection._maintenance,
    ev.GpuMetricsReported: Projection._metrics,
}


def _kind(cls: type) -> tuple[str, bool]:
    """What `Projection.apply` needs to know of an event type: its name, and whether it is a
    decision."""
    return cls.__name__, issubclass(cls, ev.Decision)


_KINDS = {cls: _kind(cls) for cls in ALL_EVENTS}
"""`_kind` of every event type (computed once; a pure function of the type)."""
