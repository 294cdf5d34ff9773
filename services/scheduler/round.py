"""One placement (or grow) decide's scratch: the trial fleet, this decide's tallies, and the
records the stages fill in for one job. Private to the scheduler, dropped on return.

Invariant: nothing here writes the folded `Ledger`; tentative allocations go to a
copy-on-write `TrialFleet` (`Round.view`), booked lazily when it is next read (`Round.trial`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger.events import Event, PendingReasonChanged
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.policy.quota import (
    lending_block,
    lends_limited,
    model_limit_blocks,
    model_limits_set,
    parent_of,
    quota_block,
)
from gpuledger.services.domain.policy.user_share import Holdings, holdings
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.placement import Placement, TrialFleet
from gpuledger.services.scheduler.reservation import Reservation


@dataclass
class Round:
    """What one placement decide keeps across the queue."""

    svc: LedgerService
    state: Ledger
    now_ms: int
    view: TrialFleet
    """Tentative allocations of this decide (a copy-on-write view of the folded fleet);
    read it through `trial`, which books the placements made so far first."""
    policy: str
    usage: dict[str, int]
    fixed: dict[str, int]
    fixed_model: dict[tuple[str, str], int]
    placed: set[str] = field(default_factory=set)
    reservation: Reservation | None = None
    spread: dict[str, dict[str, int]] = field(default_factory=dict)
    """Members per node of spread groups (`JobSpec.spread`), tentative allocations included;
    a group's entry is built when the first job of that group is tried."""
    array_placed: dict[str, int] = field(default_factory=dict)
    """Per array job, its tasks placed in this decide."""
    lending: bool = False
    """Some tenant sets a `lending_limit` (checked once per decide, not per job)."""
    used_model: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, GPU model), capacity in use (`Ledger.tenant_by_model`) plus this
    decide's placements; kept only while some tenant sets per-model limits."""
    model_capacity: dict[str, int] | None = None
    """Milli-GPUs per GPU model of the fleet, while some tenant sets per-model limits (else
    None: per-model lending and borrowing limits are not checked)."""
    outlooks: dict[tuple[str, str], list] = field(default_factory=dict)
    """Per (tenant, class): the schedules' outlook at this decide's `now` (`QuotaScheduled`),
    computed once however many of its jobs wait."""
    user_use: Holdings | None = None
    """Per (tenant, user): [placed jobs, GPU milli they hold], active allocations plus this
    decide's binds (stage `user_limits`); built when a job under per-user limits is first
    tried (`user_in_use`)."""
    user_model_use: dict[tuple[str, str, str], int] | None = None
    """Per (tenant, user, GPU model): GPU milli held (`Ledger.user_by_model`) plus this
    decide's binds (stage `user_limits`, `gpus_by_model`); built when first read."""
    blocked_partitions: dict[str, str] = field(default_factory=dict)
    """A main pass of the `slurm` profile (stage `main_scheduler`): per partition, its first
    job that waited for capacity; no later job of it is placed in this decide."""
    blocked_nodes: frozenset[str] = frozenset()
    """The nodes of `blocked_partitions`: no later job of this decide is placed on them."""
    backfill_plans: list[Reservation] = field(default_factory=list)
    """A backfill pass of the `slurm` profile (stage `main_scheduler`): where and when each
    job that waited for capacity would start, by the time limits of what runs; a later job
    goes there only if its own time limit ends before."""
    booked_now: list[tuple[str, JobRecord]] = field(default_factory=list)
    """A backfill pass of the `slurm` profile: the allocations it placed (id, job), which the
    plans above count as running (stage `main_scheduler`)."""
    unbooked: list[tuple[str, JobRecord, Placement]] = field(default_factory=list)
    """Placements of this decide (allocation id, job, placement) not yet booked in `view`:
    booked when the view is next read, so the last one of a decide never is."""

    @classmethod
    def start(cls, svc: LedgerService, state: Ledger, now_ms: int) -> Round:
        per_model: dict[str, Any] = {}
        if model_limits_set(state.config.tenants):
            per_model = {
                "used_model": dict(state.tenant_by_model),
                "model_capacity": state.fleet.capacity_by_model(),
            }
        return cls(
            svc,
            state,
            now_ms,
            state.fleet.trial(),
            state.config.policy.placement_policy,
            dict(state.tenant_gpu_milli),
            dict(state.sched.tenant_fixed_gpu_milli),
            dict(state.sched.tenant_fixed_by_model),
            lending=lends_limited(state.config.tenants),
            **per_model,
        )

    @property
    def trial(self) -> TrialFleet:
        """The trial view, every placement of this decide booked in it."""
        for alloc_id, job, placement in self.unbooked:
            self.view.allocate(alloc_id, job.tenant, placement, self.state.gang_request(job))
        self.unbooked.clear()
        return self.view

    def fits(self, job: JobRecord, exclude: frozenset[str]) -> bool:
        """Whether the job's whole gang would fit on the trial view off `exclude` (the
        "would it fit without this stage" trial of the explanations)."""
        placed = self.trial.place(
            self.state.gang_request(job), self.policy, exclude=exclude, explain=False
        )
        return isinstance(placed, Placement)

    def binds(self, job: JobRecord, lim: Limits, why: Why, name: str) -> bool:
        """Whether stage `name` is the binding exclusion: the first in table order whose
        nodes alone keep the job out (it would fit without them, every other stage in
        force). The first such stage claims `why.binding`; later ones are not binding."""
        if why.binding is not None or not lim.excluded.get(name):
            return False
        if not self.fits(job, lim.without(name)):
            return False
        why.binding = name
        return True

    def model_blocks(self, job: JobRecord, need: int) -> dict[str, tuple]:
        """Per GPU model the job could use but may not now under per-model lending and
        borrowing limits (`quota.model_limit_blocks`), in model order; models outside the
        job's `gpu_models` are none of its business. Empty when no tenant sets any."""
        if self.model_capacity is None:
            return {}
        blocks = model_limit_blocks(
            self.state.config.tenants, self.used_model, self.model_capacity, job.tenant, need
        )
        models = job.spec.resources.gpu_models
        if not models:
            return blocks
        return {m: b for m, b in blocks.items() if m in models}

    def quota_block(self, job: JobRecord, need: int):
        """The first quota that `need` more GPU milli would break, up the tenant tree, then
        the lending limits; None when it is within quota."""
        tenants = self.state.config.tenants
        t = job.tenant
        while t:
            conf = tenants.get(t)
            if conf is not None:
                used = sum(v for k, v in self.usage.items() if k == t or k.startswith(t + "/"))
                fixed = None
                if not job.preemptible and t == job.tenant:
                    fixed = self.fixed.get(t, 0)
                block = quota_block(conf, used, need, fixed)
                if block is not None:
                    return block
            t = parent_of(t)
        if self.lending:
            capacity = self.state.fleet.capacity_gpus() * 1000
            return lending_block(tenants, self.usage, capacity, job.tenant, need)
        return None

    def user_in_use(self, tenant: str, user: str) -> list[int]:
        """[placed jobs, GPU milli held] of `user` in `tenant` now (mutable: `book` adds)."""
        if self.user_use is None:
            self.user_use = holdings(self.state)
        return self.user_use.setdefault((tenant, user), [0, 0])

    def user_by_model(self) -> dict[tuple[str, str, str], int]:
        """Per (tenant, user, GPU model) GPU milli held now (mutable: `book` adds)."""
        if self.user_model_use is None:
            self.user_model_use = dict(self.state.user_by_model)
        return self.user_model_use

    def pending(self, job: JobRecord, reason: str, message: str, details: dict) -> list[Event]:
        """`PendingReasonChanged` when the job's reason or message changes, else nothing."""
        if (reason, message) == (job.reason, job.message):
            return []
        return [
            self.svc.emit(
                self.state,
                self.now_ms,
                PendingReasonChanged,
                key=f"{job.job_id}:{job.pending_changes}",
                correlation_id=job.job_id,
                job_id=job.job_id,
                reason=reason,
                message=message,
                details=details,
            )
        ]


@dataclass(frozen=True, slots=True)
class PlacedOr:
    """The jobs placed so far in this decide, or `job_id`: a membership test without copying
    the placed set (a decide that places k jobs asked it k times)."""

    placed: set[str]
    job_id: str

    def __contains__(self, job_id: object) -> bool:
        return job_id == self.job_id or job_id in self.placed


@dataclass
class Limits:
    """Where one job may go in this decide, and why not elsewhere: the nodes each stage
    excludes (`excluded`, in table order) and what the stages noted on the way."""

    need: int
    """GPU milli of its smallest acceptable gang (of the members to add, on a grow)."""
    position: int = 0
    """Its queue position (a grow: 0)."""
    excluded: dict[str, frozenset[str]] = field(default_factory=dict)
    """Per stage name, the nodes it excludes; filled in table order."""
    spread_full: frozenset[str] = frozenset()
    """Nodes at the job's spread limit (excluded)."""
    held_back: bool = False
    """A reservation keeps it off nodes it could otherwise use."""
    backfill_for: str | None = None
    over_models: list[tuple[str, int, int]] = field(default_factory=list)
    model_blocks: dict[str, tuple] = field(default_factory=dict)
    """GPU models the job may not use under per-model lending/borrowing limits, and why."""
    user_model_blocks: dict[str, str] = field(default_factory=dict)
    """GPU models the job's user may not use more of now (`gpus_by_model`), and why."""
    max_members: int | None = None
    """An elastic gang: the most members its quota allows (None: `replicas`)."""

    @property
    def exclude(self) -> frozenset[str]:
        """Every node some stage excludes."""
        return frozenset().union(*self.excluded.values())

    def without(self, name: str) -> frozenset[str]:
        """The nodes every stage but `name` excludes: the "would it fit without this stage"
        trial of the explanations."""
        return frozenset().union(*(n for s, n in self.excluded.items() if s != name))


@dataclass
class Why:
    """A pending reason being put together; `result` is the placement's own answer."""

    reason: str
    message: str
    details: dict
    result: Any = None
    binding: str | None = None
    """The stage whose exclusion keeps the job out (`Round.binds`), once one claimed it."""


def add_by_model(
    state: Ledger, tally: dict[tuple[str, str], int], job: JobRecord, members: tuple
) -> None:
    """Add the GPU capacity of `members` of `job` to `tally`, per (tenant, GPU model)."""
    per = job.spec.resources.gpu_milli_total()
    for model, milli in state.member_models(members, per).items():
        key = (job.tenant, model)
        tally[key] = tally.get(key, 0) + milli


def nodes_with_models(state: Ledger, models: set[str]) -> frozenset[str]:
    """The nodes with a GPU of one of `models`."""
    return frozenset(
        name
        for name in sorted(state.nodes)
        if any(g.model in models for g in state.nodes[name].info.gpus)
    )


def queued_since(state: Ledger, job: JobRecord) -> int | None:
    """Since when the job waits for capacity (its dependencies met)."""
    if not job.spec.depends_on:
        return job.pending_since_ms
    return deps.queued_since_ms(state, job)


def bound_ms(rec: AllocationRecord) -> int:
    """When the allocation's newest members were bound: its placement, or its last resize
    (members added by a grow start from then)."""
    return rec.placed_ms if rec.resized_ms is None else max(rec.placed_ms, rec.resized_ms)
