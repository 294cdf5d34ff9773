"""The projection's state (current-state rows and the services' own fold) and the helpers
every group of handlers shares: a job's row, its transitions, closing an allocation."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.events.control import CONTROL_EVENTS
from gpuledger.events.reasons import JobState
from gpuledger.events.subjects import subject_tenant
from gpuledger.projections.mappers.batch import Batch
from gpuledger.projections.mappers.rows import (
    JobRow,
    Row,
)
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.fold.nodes import node_status

# ---------------------------------------------------------------- the projection


def _mig_milli(profile: str) -> int:
    return ev.Resources(mig_profile=profile).gpu_milli_total()


_TENANT_REQUESTS = (ev.JobSubmitted, ev.JobCancelled, ev.ServiceScaled, *CONTROL_EVENTS)
"""A tenant's requests about one of its jobs: each names the job by the id its tenant gave."""


def _about(ledger: Ledger, event: ev.Event, subject: str | None) -> str | None:
    """The job (or node, or entity) an event is about, for `refusals.job_id`. A tenant's
    request is filed under its publisher's job of the name it gives (`Ledger.filed_under`, as
    admission files its own refusals): the publisher is the tenant its subject names, so a raw
    submission naming another tenant's key (`squat-1~~<digest>`) never lands under that job."""
    if isinstance(event, _TENANT_REQUESTS):
        if isinstance(event, ev.JobSubmitted):
            name, tenant = event.job.job_id, event.job.tenant
        else:
            name, tenant = event.job_id, event.tenant
        return ledger.filed_under(subject_tenant(subject or "") or tenant, name)
    return getattr(event, "job_id", None) or event.correlation_id or None


class ProjectionState:
    """The projection's state and the helpers its handlers share (the handlers:
    jobs.py, allocations.py, tenants.py, nodes.py; the entry points: projection.py)."""

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

    def _node_status(self, n: Row) -> None:
        """The row's status, since when and why: the ledger's (`nodes.node_status`)."""
        if n.node not in self.ledger.nodes:
            return
        n.status, n.status_since_ms, n.status_reason = node_status(self.ledger, n.node)
        n.status_reason = n.status_reason or None

    def _drained(self, allocation_id: str) -> None:
        """A run left: its draining nodes' status (`draining` -> `drained`) is the ledger's."""
        rec = self.ledger.allocations.get(allocation_id)
        for node in {m.node for m in rec.members} if rec is not None else ():
            n = self.nodes.get(node)
            if n is not None and n.status == "draining":
                self._node_status(n)
                self.batch.upsert(n)

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
