"""The ledger: the one fold of the event log that every decider reads.

`Ledger.apply(seq, event)` is `evolve`: it updates the state in place and never raises on an
event that refers to something unknown (such events are ignored, so a replayed or partial log
cannot wedge a service). Indexes (`submitted`, `pending`, `active`) are kept incrementally so
deciders never rescan every job.

The `Ledger` is the state and its query API; the folding is done by small per-aggregate folds
(`FOLDS`), each in its own module owning the fields it writes and the events it handles
(services/domain/fold/aggregate.py): jobs (with arrays and services), allocations (with
elastic resizes), nodes, tenants (configuration, fair shares, capacity in use and usage), MIG
and intake (the acceptance step and the requests to refuse). `fold` runs the acceptance step,
then the one handler of the event's type, then lets an array or a service follow its task or
replica (`jobs.child_changed`), then lets arrays with unreleased tasks top up their window of
released ones (`arrays.refill_open`).

Invariants: an allocation is either active (its capacity booked in `fleet`) or ended; a job
has at most one active allocation; `tenant_gpu_milli` equals the sum of the tenant's active
allocations.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from gpuledger import events as ev
from gpuledger.events import MemberPlacement
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.services.domain.fold import (
    allocations,
    arrays,
    intake,
    jobs,
    keys,
    mig,
    nodes,
    replicas,
    tenants,
)
from gpuledger.services.domain.fold.aggregate import Handler, handlers_of
from gpuledger.services.domain.fold.arrays import task_id, task_spec
from gpuledger.services.domain.fold.jobs import run_end_state, spec_differences
from gpuledger.services.domain.fold.records import (
    ALL_USERS,
    TERMINAL,
    UP,
    AgentIndexes,
    AllocationRecord,
    ArrayWindow,
    Intake,
    JobRecord,
    LedgerState,
    MigLedger,
    NodeRecord,
    PreemptionRecord,
    QuotaLedger,
    RequestRefusal,
    SchedulerIndexes,
    child_record,
)
from gpuledger.services.domain.fold.refusals import Refusal
from gpuledger.services.domain.fold.replicas import replica_id, replica_spec
from gpuledger.services.placement import GangRequest

__all__ = [
    "FOLDS",
    "TERMINAL",
    "AgentIndexes",
    "AllocationRecord",
    "ArrayWindow",
    "Intake",
    "JobRecord",
    "Ledger",
    "LedgerState",
    "MigLedger",
    "NodeRecord",
    "PreemptionRecord",
    "QuotaLedger",
    "RequestRefusal",
    "SchedulerIndexes",
    "child_record",
    "replica_id",
    "replica_spec",
    "run_end_state",
    "spec_differences",
    "task_id",
    "task_spec",
]

FOLDS = (
    intake.FOLD,
    jobs.FOLD,
    allocations.FOLD,
    nodes.FOLD,
    tenants.FOLD,
    mig.FOLD,
)
"""The aggregate folds the ledger is composed of; each event type has one handler among them."""

_HANDLERS = handlers_of(FOLDS)


BY_TENANT = (
    ev.JobCancelled,
    ev.ServiceScaled,
    ev.JobHeld,
    ev.JobReleased,
    ev.JobRequeued,
    ev.JobPriorityChanged,
    ev.JobMovedToTop,
)
"""Client requests that name a job by its tenant and the id the tenant submitted."""


class Ledger(LedgerState):
    """Folded state of the whole log (`LedgerState`: what every decider reads, plus named
    sub-records for what one service or the acceptance step reads alone) and its query API.
    Which fold writes a field: `Fold.owns` of `FOLDS`."""

    # ------------------------------------------------------------------ evolve

    def apply(self, seq: int, event: ev.Event) -> Ledger:
        """Fold one event (stream sequence `seq`); `fold` says what it did. Raises `Refused`
        (changing nothing) for an event that contradicts the folded state."""
        self.fold(seq, event)
        return self

    def fold(self, seq: int, event: ev.Event) -> Refusal | None:
        """Fold one event under the acceptance rules (services/domain/fold/acceptance.py): None if
        it was accepted, else why it changed nothing. A decision or node fact whose producer is
        not of the role that produces its type (`events.subjects.role_of`) raises
        `Refused` (`WrongProducer`). A decision carrying a leader epoch older than one already
        seen for the role of its type is ignored: it comes from a deposed leader. Raises
        `Refused` before any change for an event that contradicts the state."""
        if self.released_tasks:
            arrays.forget_released(self)
        refusal = intake.accept(self, seq, event)
        if refusal is not None:
            return refusal
        handler = _HANDLERS.get(type(event))
        if handler is None:
            return None
        if not self.open_arrays:
            return self._fold_job_event(handler, event)
        refusal = self._fold_job_event(handler, event)
        arrays.refill_open(self)  # arrays' windows follow what the event changed
        return refusal

    def _fold_job_event(self, handler: Handler, event: ev.Event) -> Refusal | None:
        """The handler, then an array or service follows the task or replica it was about."""
        job_id = getattr(event, "job_id", None)
        if isinstance(event, BY_TENANT):  # named by its tenant
            if self.open_arrays:  # one task of an array named: released first
                arrays.release_named(self, self._task_key(event.tenant, event.job_id))
            job_id = keys.job_key(self, event.tenant, event.job_id)
        elif job_id is not None and self.open_arrays and job_id not in self.jobs:
            arrays.release_named(self, job_id)
        job = self.jobs.get(job_id) if job_id is not None else None
        if job is None or (job.array_parent is None and job.service is None):
            return handler(self, event)
        was_up, was_over = job.state in UP, job.state in TERMINAL
        apart = job.array_parent is not None and arrays.waits_apart(self, job)
        refusal = handler(self, event)
        jobs.child_changed(self, job, was_up, was_over, event.occurred_at_ms)
        if job.array_parent is not None:
            arrays.apart_changed(self, job, apart)
        return refusal

    def _task_key(self, tenant: str, name: str) -> str:
        """The key task `name` (`<array>@<i>`) of `tenant`'s array would have ('' if none)."""
        head, sep, index = name.rpartition(ARRAY_SEPARATOR)
        key = keys.job_key(self, tenant, head) if sep and head else None
        return f"{key}{sep}{index}" if key is not None else ""

    # ------------------------------------------------------------------ queries

    def job_key(self, tenant: str, name: str) -> str | None:
        """The key of `tenant`'s job named `name` (services/domain/fold/keys.py), None when
        the tenant has no such job."""
        return keys.job_key(self, tenant, name)

    def filed_under(self, tenant: str, name: str) -> str:
        """The job a refusal of `tenant`'s request naming `name` is filed under, never another
        tenant's (services/domain/fold/keys.py)."""
        return keys.filed_under(self, tenant, name)

    def live_jobs(self, tenant: str, user: str = ALL_USERS) -> int:
        """The tenant's (or its `user`'s) jobs pending and running now, an array task and a
        service replica each (`queued_jobs` + `placed_jobs`, kept by the fold)."""
        key = (tenant, user)
        return self.queued_jobs.get(key, 0) + self.placed_jobs.get(key, 0)

    def job_record(self, key: str) -> JobRecord | None:
        """The record of job `key`, or, for an array task not released yet (or dropped
        unreleased when its array was cancelled), a stand-in made for the reader
        (`arrays.stand_in`): what a dependency on it or a question about it reads."""
        rec = self.jobs.get(key)
        if rec is None and self.jobs and ARRAY_SEPARATOR in key:
            return arrays.stand_in(self, key)
        return rec

    def tasks_of(self, array_id: str) -> list[JobRecord]:
        """The task records of an array job, by index."""
        return arrays.tasks_of(self, array_id)

    def replicas_of(self, service_id: str) -> list[JobRecord]:
        """The replica records of a service, by index (every one ever created)."""
        return replicas.replicas_of(self, service_id)

    def refused_creation(self, e: ev.RequestRefused) -> str | None:
        """The key of the job that `e` says was never created, else None
        (`intake.refused_creation`)."""
        return intake.refused_creation(self, e)

    def gang_request(self, job: JobRecord) -> GangRequest:
        """The placement request of a job (time-slicing allowed by its class)."""
        return allocations.request_of(self, job)

    def member_models(
        self, members: Iterable[MemberPlacement], per_member_milli: int
    ) -> dict[str, int]:
        """GPU capacity of `members` per GPU model (a member counts under the model of its
        first GPU; unknown nodes are skipped)."""
        return tenants.member_models(self, members, per_member_milli)

    def usage_at(self, tenant: str, now_ms: int) -> int:
        """The tenant's time-decayed past usage (milli-GPU·ms) at `now_ms`; 0 when
        `policy.usage_half_life_s` is off."""
        return tenants.usage_at(self, tenant, now_ms)

    def user_usage_at(self, tenant: str, user: str, now_ms: int) -> int:
        """`user`'s own decayed past usage in `tenant` at `now_ms` (`tenants.user_usage_at`)."""
        return tenants.user_usage_at(self, tenant, user, now_ms)

    def usage_at_period(self, tenant: str, boundary_ms: int) -> int:
        """The tenant's decayed usage as it was at `boundary_ms`, the start of the current
        `PriorityCalcPeriod` (`slurm` profile; `tenants.usage_at_period`)."""
        return tenants.usage_at_period(self, tenant, boundary_ms)

    def nominated_nodes(
        self, except_jobs: Container[str] = frozenset(), now_ms: int | None = None
    ) -> frozenset[str]:
        """Nodes whose freed capacity is promised to a beneficiary not in `except_jobs`.

        With `now_ms`, a nomination expires `policy.nomination_ttl_s` after its last victim
        allocation ended (the beneficiary could not use it, e.g. another gang landed first)."""
        out: set[str] = set()
        for beneficiary in sorted(self.nominations):
            if beneficiary in except_jobs:
                continue
            if (
                now_ms is not None
                and self.nomination_expires_ms(beneficiary) is not None
                and (
                    now_ms >= self.nomination_expires_ms(beneficiary)  # type: ignore[operator]  # not None: checked just above
                )
            ):
                continue
            for a in sorted(self.nominations[beneficiary]):
                rec = self.allocations.get(a)
                if rec is not None:
                    out.update(rec.nodes())
        for node in sorted(self.mig.mig_requests):
            if self.mig.mig_requests[node].job_id not in except_jobs:
                out.add(node)
        return frozenset(out)

    def nomination_expires_ms(self, beneficiary: str) -> int | None:
        """When the beneficiary's nomination lapses: the TTL after its last victim ended
        (None while a victim is still being released)."""
        ends = []
        for a in self.nominations.get(beneficiary, ()):
            rec = self.allocations.get(a)
            if rec is None:
                continue
            end = rec.ended_ms if rec.ended_ms is not None else rec.resized_ms
            if end is None or (rec.ended_ms is None and rec.preemption is not None):
                return None
            ends.append(end)
        if not ends:
            return None
        return max(ends) + self.config.policy.nomination_ttl_s * 1000
