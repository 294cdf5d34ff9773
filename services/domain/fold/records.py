"""The records the ledger folds the log into: jobs, allocations, nodes, and the sub-records
that one reader alone reads (`SchedulerIndexes`, `MigLedger`, `AgentIndexes`, `QuotaLedger`,
`Intake`). Plain data with a few derived reads; the aggregate folds (`jobs`, `allocations`,
`nodes`, `tenants`, `mig`, `intake`) write them, each the fields `Fold.owns` names.

These are the snapshot's data classes (services/runtime/snapshots.py names them by module):
changing a field changes the snapshot schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger import events as ev
from gpuledger.events import JobSpec, MemberPlacement
from gpuledger.events.reasons import TERMINAL_STATES, JobState
from gpuledger.services.domain.fold.config import ConfigState
from gpuledger.services.domain.fold.timeindex import TimeIndex
from gpuledger.services.placement import Fleet

TERMINAL = TERMINAL_STATES
UP = frozenset({JobState.running, JobState.preempting})
"""States of a placed job (it holds an allocation)."""


@dataclass(frozen=True)
class RequestRefusal:
    """A client request the log holds but no fold applies, waiting for admission's answer
    (`RequestRefused`, or `JobRejected` for the unreadable first submission of a job id)."""

    request_seq: int
    """Stream sequence of the refused message."""
    request: str
    """`JobSubmitted`, `JobCancelled` or `ServiceScaled`."""
    job_id: str
    tenant: str
    reason: str
    """`JobIdConflict`, `InvalidSpec` or `UnknownJob`."""
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    cause: str = ""
    """Event id of the refused message (or of its dead letter)."""


@dataclass
class PreemptionRecord:
    """One preemption a job suffered (for reports and why)."""

    at_ms: int
    by: str | None
    reason: str
    allocation_id: str
    checkpointed: bool = False
    lost_gpu_ms: int = 0


@dataclass(frozen=True)
class HoldRecord:
    """Who holds a job (`JobHeld` .. `JobReleased`), why and since when."""

    actor: str
    """`tenant` or `operator`: the operator's hold is released only by the operator."""
    reason: str
    at_ms: int


@dataclass(frozen=True)
class CordonRecord:
    """The operator's cordon of a node (`NodeCordoned`): why, since when, and whether (and
    how) what runs there is drained."""

    reason: str
    at_ms: int
    drain: bool = False
    force: bool = False
    deadline_ms: int | None = None


@dataclass(frozen=True)
class MaintenanceWindow:
    """A maintenance window the operator planned (`MaintenanceScheduled`; `cancelled_ms` set by
    `MaintenanceCancelled`). Its nodes are planned down over [`start_ms`, `until_ms`): the one
    interval the scheduler, `nodes`, `why` and the projection (and so `gpuledger report`) use."""

    window_id: str
    nodes: tuple[str, ...]
    """Sorted, each once."""
    start_ms: int
    end_ms: int
    reason: str
    scheduled_ms: int
    cancelled_ms: int | None = None
    tenant: str | None = None
    """The tenant it holds its nodes for (None: a maintenance window, planned down)."""

    def closes_for(self, tenant: str | None) -> bool:
        """Whether it keeps work of `tenant` off its nodes (all work, but its own tenant's)."""
        return self.tenant is None or self.tenant != tenant

    @property
    def until_ms(self) -> int:
        """When its nodes return: its end, or its cancel if earlier (a window cancelled
        before it starts is empty: `until_ms <= start_ms`)."""
        return self.end_ms if self.cancelled_ms is None else min(self.end_ms, self.cancelled_ms)

    def reaches(self, from_ms: int, to_ms: int | None) -> bool:
        """Whether work on its nodes over [`from_ms`, `to_ms`) (None: without end) would
        reach into the window."""
        return (
            self.start_ms < self.until_ms
            and from_ms < self.until_ms
            and (to_ms is None or to_ms > self.start_ms)
        )

    def phase(self, now_ms: int) -> str:
        """`cancelled`, `ended`, `active` (its nodes are planned down now) or `scheduled`."""
        if self.cancelled_ms is not None and self.cancelled_ms <= now_ms:
            return "cancelled"
        if now_ms >= self.end_ms:
            return "ended"
        return "active" if now_ms >= self.start_ms else "scheduled"


@dataclass
class ArrayWindow:
    """An admitted array's tasks not released yet (services/domain/fold/arrays.py): pending
    as a count on the array, no record each; `next_text` / `next_number` are where the
    release order resumes (services/domain/fold/task_order.py: natively the index as text,
    under the `slurm` profile as a number; a task released early is skipped)."""

    unreleased: int
    next_text: int | None
    next_number: int | None
    aside: int = 0
    """Released tasks pending apart from the others (`arrays.waits_apart`: held, or their
    priority lowered): they do not count towards the window, so the next ones are released
    in their stead, as those would have been placed before them."""
    dropped: int = 0
    """Tasks that were unreleased when the array was cancelled: cancelled as a count, never
    a record (`unreleased` is 0 from then on)."""
    dropped_ms: int | None = None
    """When they were (the array's cancel)."""


@dataclass
class JobRecord:
    """A job's folded state."""

    spec: JobSpec
    submitted_ms: int
    submit_event_id: str
    state: JobState = JobState.submitted
    priority: int = 0
    preemptible: bool = True
    slo_class: str = ""
    reason: str | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    pending_changes: int = 0
    pending_since_ms: int = 0
    waited_ms: int = 0
    """Queue time banked by earlier placements (placed time minus `pending_since_ms`, summed
    over attempts): aging by wait counts it while the job runs and after it is requeued, so
    a promotion earned by waiting is kept once the job runs."""
    admitted_ms: int | None = None
    allocation_id: str | None = None
    attempts: int = 0
    progress_ms: int = 0
    resume_step: int | None = None
    cancel_requested: bool = False
    finished_ms: int | None = None
    placements: list[tuple[int, tuple[MemberPlacement, ...]]] = field(default_factory=list)
    preemptions: list[PreemptionRecord] = field(default_factory=list)
    declined: str | None = None
    submit_seq: int = 0
    """Stream sequence of the submission that created the job (the first one of its id)."""
    unreadable: bool = False
    """The job's only submission could not be decoded: it exists as a rejection (`spec`
    holds its id and tenant only)."""
    service: str | None = None
    """For a replica of a service: the service's job id (the replica is `<service>~<index>`)."""
    replica: int = 0
    """For a replica: its index."""
    desired_replicas: int = 0
    """For a service: the replicas wanted now (its spec's `replicas`, then `ServiceScaled`)."""
    replicas_created: int = 0
    """For a service: replica records created so far (indexes 0 .. this - 1)."""
    replicas_up: int = 0
    """For a service: its replicas placed now (running or being preempted). The service is
    `running` while this is at least 1, else `pending` (`replicas.service_state`)."""
    array_parent: str | None = None
    """For a task of an array job: the array's job id (the task is `<array>@<index>`)."""
    tasks_up: int = 0
    """For an array job: its tasks placed now (running or being preempted)."""
    tasks_ended: dict[str, int] = field(default_factory=dict)
    """For an array job: its ended tasks by final state."""
    tasks_started: bool = False
    """For an array job: whether any of its tasks was ever placed."""
    window: ArrayWindow | None = None
    """For an admitted array job: its tasks not released yet (None once every one was)."""
    time_limit_s: int | None = None
    """Its resolved time limit (`JobAdmitted.time_limit_s`): each run is stopped when it has
    lasted this long; None = none."""
    name: str | None = None
    """The id its tenant submitted, when the fold keeps the job under another key
    (`events.ids.tenant_job_key`: the id already named another tenant's job); None when the
    key is the id itself (`spec.job_id` is always the key)."""
    queue_ms: int | None = None
    """Its place in its tenant's queue when moved to the top (`JobMovedToTop`): the queue
    order reads it instead of `submitted_ms`; None: never moved."""
    class_priority: int | None = None
    """The priority admission gave, once a `JobPriorityChanged` changed `priority` (None:
    never changed): what a tenant may raise its job back up to."""
    hold: HoldRecord | None = None
    """Set while the job is held (`JobHeld` .. `JobReleased`): pending with reason `Held`,
    no demand (`quota.pending_gpu_milli` leaves it out)."""

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    submitted_class: str | None = None
    """The class it was submitted with, once `update --class` changed `spec.priority_class`
    (the class in force, which every reader takes): a retried submission still matches."""

    @property
    def client_spec(self) -> JobSpec:
        """The spec as its tenant submitted it (under the id it submitted, not the key; with
        the class it was submitted with)."""
        if self.name is None and self.submitted_class is None:
            return self.spec
        fields = {f: getattr(self.spec, f) for f in JobSpec.__struct_fields__}  # (or a view's)
        if self.name is not None:
            fields.update(job_id=self.name)
        if self.submitted_class is not None:
            fields.update(priority_class=self.submitted_class)
        return JobSpec(**fields)

    @property
    def tenant(self) -> str:
        return self.spec.tenant

    def gpu_milli(self) -> int:
        """GPU capacity of the whole gang (min_members... replicas: counted at replicas)."""
        return self.spec.resources.gpu_milli_total() * self.spec.replicas


ALL_USERS = ""
"""The user key of a tenant's total in a job tally (`LedgerState.queued_jobs`,
`placed_jobs`): no user name is empty."""


def tally_keys(job: JobRecord) -> tuple[tuple[str, str], tuple[str, str]]:
    """The keys a job (a leaf: a plain job, an array task, a service replica) counts under in
    a job tally (`queued_jobs`, `placed_jobs`): its tenant's total and its user's."""
    return (job.tenant, ALL_USERS), (job.tenant, job.spec.submitter)


def child_record(parent: JobRecord, spec: JobSpec, at_ms: int, **own: Any) -> JobRecord:
    """A job its parent creates when admitted or scaled (an array task, a service replica):
    pending from `at_ms`, with the parent's submission, priority, preemptibility and SLO
    class, plus the child's `own` fields."""
    return JobRecord(
        spec=spec,
        submitted_ms=at_ms,
        submit_event_id=parent.submit_event_id,
        state=JobState.pending,
        priority=parent.priority,
        preemptible=parent.preemptible,
        slo_class=parent.slo_class,
        admitted_ms=at_ms,
        pending_since_ms=at_ms,
        submit_seq=parent.submit_seq,
        **own,
    )


@dataclass
class AllocationRecord:
    """One placement of a gang and what its members did."""

    allocation_id: str
    job_id: str
    tenant: str
    members: tuple[MemberPlacement, ...]
    node_names: tuple[str, ...]
    """The members' nodes, each once, sorted (`nodes()`; kept: members never change)."""
    placed_ms: int
    gpu_milli: int
    borrowing: bool
    start_progress_ms: int
    started: dict[int, int] = field(default_factory=dict)
    exited: dict[int, tuple[str, int]] = field(default_factory=dict)
    checkpoints: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    preemption: ev.PreemptionRequested | None = None
    time_limit: ev.TimeLimitReached | None = None
    """Set when the run reached its job's time limit: its members are being stopped."""
    backfill_for: str | None = None
    """The reserving job whose reserved capacity this allocation borrows as preemptible
    backfill (evicted when that job lands)."""
    ended: bool = False
    ended_ms: int | None = None
    resized_ms: int | None = None
    """When the allocation last shrank (`GangResized`): a nomination of the capacity it gave
    up lapses from then, as from `ended_ms` for an evicted one."""

    def nodes(self) -> tuple[str, ...]:
        return self.node_names

    def all_exited(self) -> bool:
        return len(self.exited) == len(self.members)

    def member_key(self, rank: int) -> str:
        """The id key of a member's events (`MemberStarted`, ...): `alloc/rank`, and once the
        gang was resized `alloc/rank~<resize time>`, so a rank that left and came back with a
        grow reports afresh (its first events' ids are taken)."""
        key = f"{self.allocation_id}/{rank}"
        return key if self.resized_ms is None else f"{key}~{self.resized_ms}"

    def leaving(self) -> tuple[int, ...] | None:
        """The ranks a partial preemption (an elastic gang shrinking) asks to leave, or None
        (no preemption, or one of the whole gang)."""
        p = self.preemption
        if p is None or not isinstance(p.ranks, tuple):
            return None
        return p.ranks

    def stops(self, rank: int) -> bool:
        """Whether member `rank` is asked to checkpoint and exit: the run reached its time
        limit, the whole gang is being preempted, or a partial preemption names it."""
        return self.time_limit is not None or self.preempts(rank)

    def preempts(self, rank: int) -> bool:
        """Whether a preemption asks member `rank` to leave (the whole gang's, or a partial
        one naming it)."""
        if self.preemption is None:
            return False
        ranks = self.leaving()
        return ranks is None or rank in ranks


@dataclass
class NodeRecord:
    info: ev.NodeInfo
    simulated: bool
    registered_ms: int
    last_heartbeat_ms: int | None = None
    lost: bool = False
    lost_ms: int | None = None
    """When it was last declared lost (`NodeLost`), while it is."""
    cordon: CordonRecord | None = None
    """Set while the operator has it cordoned (`NodeCordoned` .. `NodeUncordoned`): who, why
    and since when. It takes no new placements; what runs there runs on."""


@dataclass
class SchedulerIndexes:
    """Indexes of the running work that only the scheduler reads (non-preemptible use for
    guarantees, spread groups, consolidations under way, allocations to settle or grow, nodes
    that can be declared lost). Folded by the `Ledger`; a decider never writes them."""

    tenant_fixed_gpu_milli: dict[str, int] = field(default_factory=dict)
    """Per tenant, the part of `tenant_gpu_milli` held by non-preemptible work."""
    tenant_fixed_by_model: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, GPU model), non-preemptible GPU capacity in use (for per-model
    guarantees); a member counts under the model of its first GPU."""
    spread_nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per spread group (`JobSpec.spread`), members of its active allocations per node (no
    zero entries): the scheduler's spread limit reads it instead of scanning allocations."""
    consolidations: dict[str, ev.ConsolidationPlanned] = field(default_factory=dict)
    """Per blocked job, the consolidation under way for it (until it is placed, cancelled, or
    its moved allocations have all ended and the nomination lapsed)."""
    cordoned: set[str] = field(default_factory=set)
    """Nodes the operator cordoned (`NodeRecord.cordon` set): the `cordon` stage keeps new
    placements off them."""
    settle_ready: set[str] = field(default_factory=set)
    """Active allocations the scheduler must settle: every member exited, a member failed,
    or a node of theirs was lost."""
    growable: set[str] = field(default_factory=set)
    """Active allocations of elastic gangs (`min_members < replicas`, not services) holding
    fewer members than `replicas`: the scheduler's grow pass reads only these."""
    heartbeating: set[str] = field(default_factory=set)
    """Nodes that promised heartbeats (and can be declared lost for silence)."""


@dataclass
class MigLedger:
    """MIG re-geometry under way and its rate limit's history: written by the preemption
    service's requests and the node agents' reports, read by the preemption and scheduler
    deciders (`services.domain.policy.regeometry`) and the simulated agent."""

    mig_requests: dict[str, ev.MigReconfigurationRequested] = field(default_factory=dict)
    """Per node, the MIG re-geometry requested and not yet reported done (one at a time); the
    node is nominated to the request's job meanwhile."""
    mig_history: dict[str, list[int]] = field(default_factory=dict)
    """Per node, times of its latest MIG re-geometry requests (the rate limit's window; at
    most `MIG_HISTORY` kept)."""


@dataclass
class AgentIndexes:
    """What the node agents read to act on their own node: the active allocations per node and
    the ones whose job was cancelled."""

    node_allocations: dict[str, set[str]] = field(default_factory=dict)
    """Active allocations per node."""
    node_vacated_ms: dict[str, int] = field(default_factory=dict)
    """Per node, when its last active allocation ended (a drained node's `since`)."""
    cancelling: set[str] = field(default_factory=set)
    """Active allocations of cancelled jobs."""


@dataclass
class QuotaLedger:
    """What only the quota service reads: the capacity pending jobs wait for and the decayed
    past usage behind `Ledger.usage_at` (the queue's usage tie-break)."""

    pending_gpu_milli: dict[str, int] = field(default_factory=dict)
    """Per tenant, GPU capacity its pending jobs wait for."""
    decayed_usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per tenant (own work), time-decayed past usage in milli-GPU·ms and the event time it
    was folded up to (`services.domain.policy.usage`); kept only while `policy.usage_half_life_s`
    is set."""
    user_usage: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    """Per (tenant, user), the user's own decayed usage as `decayed_usage` keeps the tenant's
    (same half-life, same accrual points as its tenant's bookings of that user's work):
    the Fair Tree's usage one level down (`user_share`)."""
    period_usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per tenant, under `policy.profile: slurm`: its decayed usage at the last
    `PriorityCalcPeriod` boundary its usage was folded across (boundary ms, value), what
    Slurm's priorities read until the next recomputation (`tenants.usage_at_period`)."""


@dataclass
class Intake:
    """The acceptance bookkeeping: leader epochs seen, decisions ignored as stale, events
    dead-lettered, and client requests waiting for admission's answer (`RequestRefused`,
    `JobRejected`). Written by the intake fold (`intake.accept`, `intake.refuse`); read
    by admission, the hosts' metrics and the projection's `why`."""

    leader_epochs: dict[str, int] = field(default_factory=dict)
    """Highest leader epoch seen per service role (the role of the event type, never the
    producer's claim)."""
    stale_decisions: int = 0
    """Decisions ignored because a newer leader of their service had already decided."""
    dead_letters: int = 0
    """Events dead-lettered (`DeadLettered` folded)."""
    refusals: dict[int, RequestRefusal] = field(default_factory=dict)
    """Client requests to refuse, by stream sequence, until admission's `RequestRefused`
    for them is folded: a second submission of a job id with other content, an unreadable
    submission of an existing job, a cancel of a job its tenant does not have."""
    invalid_submissions: dict[str, RequestRefusal] = field(default_factory=dict)
    """Per job id never submitted before, its first submission that could not be decoded or
    applied (dead-lettered): admission answers it with `JobRejected` (`InvalidSpec`)."""


def elastic(job: JobRecord) -> bool:
    """Whether the job's gang may run with fewer members than `replicas` and grow back."""
    spec = job.spec
    return job.service is None and spec.min_members is not None and spec.min_members < spec.replicas


@dataclass
class LedgerState:
    """The fields of the folded state (`Ledger` is this with its fold and queries): what
    every decider reads, plus named sub-records for what one service (or the acceptance
    step) reads alone (each documents its readers). The aggregate folds write it, each the
    fields its `Fold.owns` names."""

    config: ConfigState = field(default_factory=ConfigState)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    allocations: dict[str, AllocationRecord] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    fleet: Fleet = field(default_factory=Fleet)
    submitted: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    active: set[str] = field(default_factory=set)
    tenant_gpu_milli: dict[str, int] = field(default_factory=dict)
    user_gpu_milli: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, user), the GPU capacity its active allocations hold (a job that names no
    user is `-`); its values sum to `tenant_gpu_milli`'s. Read by `user_share.holdings`."""
    tenant_by_model: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, GPU model), GPU capacity in use by all its work (for per-model lending
    and borrowing limits; read by the scheduler, preemption and quota); a member counts
    under the model of its first GPU."""
    user_by_model: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """Per (tenant, user, GPU model), the same per user of the jobs (`-`: none named); read by
    the scheduler's `user_limits` stage (`gpus_by_model`)."""
    pending_dependent: set[str] = field(default_factory=set)
    """The pending jobs that name dependencies (`JobSpec.depends_on`), met or not (read by
    the scheduler and quota: a job waiting on a dependency is not demand)."""
    fair_shares: dict[str, ev.TenantShare] = field(default_factory=dict)
    """Per tenant, its latest fair share (`FairShareUpdated`)."""
    nominations: dict[str, set[str]] = field(default_factory=dict)
    """Per beneficiary job, the nodes nominated to it by a preemption or re-geometry."""
    backfills: dict[str, set[str]] = field(default_factory=dict)
    """Per reserving job, active allocations placed as preemptible backfill on its
    reservation."""
    awaiting_start: set[str] = field(default_factory=set)
    """Active allocations with members not yet started."""
    expected: TimeIndex = field(default_factory=TimeIndex)
    """Per active allocation: expected end (duration hint), checkpoint completion and
    deadline of a requested preemption."""
    time_limits: TimeIndex = field(default_factory=TimeIndex)
    """Per running allocation of a job with a time limit: when the limit is reached (kind
    `limit`); cleared when `TimeLimitReached` is folded or the allocation ends."""
    nodes_version: int = 0
    """Bumped whenever a node registers, is lost or comes back."""
    maintenance: dict[str, MaintenanceWindow] = field(default_factory=dict)
    """Every maintenance window the log holds, by id, cancelled ones included (the nodes
    fold: `maintenance.scheduled`, `maintenance.cancelled`)."""
    last_seq: int = 0
    folding_seq: int = 0
    """Sequence of the event being folded (set by `apply`, for handlers)."""
    sched: SchedulerIndexes = field(default_factory=SchedulerIndexes)
    """Read by the scheduler only."""
    mig: MigLedger = field(default_factory=MigLedger)
    """MIG re-geometry under way (preemption, scheduler, simulated agents)."""
    agents: AgentIndexes = field(default_factory=AgentIndexes)
    """Read by the node agents only."""
    quota: QuotaLedger = field(default_factory=QuotaLedger)
    """Read by the quota service only (and `usage_at`)."""
    intake: Intake = field(default_factory=Intake)
    """The acceptance step's bookkeeping (admission answers the refused requests)."""
    queued_jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    """The jobs in `pending` per (tenant, user) and per (tenant, `ALL_USERS`): with
    `placed_jobs`, a tenant's and a user's pending plus running work (`Ledger.live_jobs`,
    read by the submit limits)."""
    placed_jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    """The jobs of the `active` allocations per (tenant, user) and (tenant, `ALL_USERS`)."""
    open_arrays: set[str] = field(default_factory=set)
    """The admitted arrays with tasks not released yet (`JobRecord.window`): refilled after
    every folded event (services/domain/fold/arrays.py)."""
    released_tasks: list[str] = field(default_factory=list)
    """The array tasks the last folded event released (created and queued), in release
    order: what the projector adds rows for. Emptied when the next event is folded."""
    fleet_gpus: tuple[int, int] = (-1, 0)
    """(`nodes_version`, GPUs on all known nodes) as last counted: the capacity an array's
    window is sized by, recounted only when the node set changed."""
