"""The v1 event catalog: every fact of a job's, a node's and the configuration's life.

Tags name type and major version. Adding an optional field with a default keeps the tag; a
breaking change adds a new tag plus an upcaster in `events.upcasters` (see
`GpuMetricsReported`, now at v2).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gpuledger.events.control import (
    CONTROL_EVENTS,
    NODE_CONTROL_EVENTS,
    JobHeld,
    JobMovedToTop,
    JobPriorityChanged,
    JobReleased,
    JobRequeued,
    MaintenanceCancelled,
    MaintenanceScheduled,
    NodeCordoned,
    NodeUncordoned,
)
from gpuledger.events.envelope import Decision, Event
from gpuledger.events.slurm_policy import QueueProfile, SlurmPolicy
from gpuledger.events.specs import (
    ArraySpec,
    Dependency,
    GpuSample,
    JobSpec,
    MemberPlacement,
    NodeInfo,
    SubmitLimit,
    TenantShare,
    UserLimits,
)

# ---------------------------------------------------------------- clients (CLI / CI)


class JobSubmitted(Event, frozen=True, kw_only=True, tag="JobSubmitted.v1"):
    """A client asked to run a job. Published on `gl.submit.<tenant>.<job>` exactly once per job.

    Job ids are per tenant: a job id is created once in its tenant (another tenant's job of
    the same id is another job); a later submission of the tenant with the same content is a
    retry and changes nothing; one with other content is refused (`RequestRefused`,
    `JobIdConflict`) and the first job stands. A payload that does not decode is rejected
    (`JobRejected`, `InvalidSpec`). `occurred_at_ms` may be omitted: a missing value or one
    more than 5 minutes from the stream's receive time is replaced by the receive time."""

    job: JobSpec
    """The job as submitted."""


class JobCancelled(Event, frozen=True, kw_only=True, tag="JobCancelled.v1"):
    """A client cancelled a job; its members are stopped without requeue. A cancel of a job
    id its tenant never submitted is refused (`RequestRefused`, `UnknownJob`) and creates
    nothing."""

    job_id: str
    """The job."""
    tenant: str
    """Its tenant (part of the subject)."""
    reason: str = "UserRequested"
    """Why, as a CamelCase code."""


class ServiceScaled(Event, frozen=True, kw_only=True, tag="ServiceScaled.v1"):
    """A client set a service's replica count. Published on `gl.scale.<tenant>.<job>`.

    Replicas `0 .. replicas-1` are wanted from now on: missing ones are queued (each placed on
    its own); those at index `replicas` and above are stopped, highest index first in effect
    (pending ones at once, running ones like a cancel, without requeue). A scale of a job id
    its tenant does not have, or of a job that is not a running service, is refused
    (`RequestRefused`: `UnknownJob`, `InvalidSpec`) and changes nothing."""

    job_id: str
    """The service (a job submitted with `kind: service`)."""
    tenant: str
    """Its tenant (part of the subject)."""
    replicas: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]
    """The replica count wanted from now on (0 stops every replica; the service stays)."""


# ---------------------------------------------------------------- configuration (gl.admin)

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
"""A quantity or time that cannot be negative: a configuration event with a negative one does
not decode (it is dead-lettered with the reason) and the configuration in force stays."""


class TenantConfigured(Event, frozen=True, kw_only=True, tag="TenantConfigured.v1"):
    """A tenant (a node of the org/team/project tree) and its quota.

    Kueue equivalents: `guaranteed` ~ nominalQuota, `limit` ~ nominalQuota + borrowingLimit,
    `borrowing_limit` = borrowingLimit, `lending_limit` = lendingLimit.
    """

    tenant: str
    """Tenant path; its parent is the path without the last segment."""
    guaranteed_gpu_milli: NonNegative = 0
    """Guaranteed GPU capacity in milli-GPUs."""
    limit_gpu_milli: NonNegative | None = None
    """Cap on what the tenant may use including borrowing; None = no cap."""
    over_quota_weight: NonNegative = 1
    """Weight when idle surplus is shared among borrowers."""
    guaranteed_by_model: dict[str, NonNegative] = {}
    """Optional per-GPU-model guarantees in milli-GPUs: non-preemptible work of the tenant on
    a model listed here stays within that model's guarantee (as well as within
    `guaranteed_gpu_milli`); models not listed are bound by the overall guarantee only."""
    borrowing_limit_gpu_milli: NonNegative | msgspec.UnsetType = msgspec.UNSET
    """Kueue `borrowingLimit`: the most the tenant (its subtree) may use above its guarantee,
    milli-GPUs; absent = no cap beyond `limit_gpu_milli` (absent fields are left out of the
    JSON, so a tenant without it encodes as before the field existed)."""
    lending_limit_gpu_milli: NonNegative | msgspec.UnsetType = msgspec.UNSET
    """Kueue `lendingLimit`: the most of the tenant's unused guarantee that other tenants may
    borrow, milli-GPUs; the rest stays idle for it. Absent = all of it may be lent."""
    borrowing_limit_by_model: dict[str, NonNegative] | msgspec.UnsetType = msgspec.UNSET
    """Per GPU model (a key of `guaranteed_by_model`), the most the tenant (its subtree) may
    use of that model above its guarantee for it, milli-GPUs; absent = no per-model cap
    (left out of the JSON when absent)."""
    lending_limit_by_model: dict[str, NonNegative] | msgspec.UnsetType = msgspec.UNSET
    """Per GPU model (a key of `guaranteed_by_model`), the most of the tenant's unused
    guarantee for that model that other tenants may borrow, milli-GPUs; absent = all of it."""
    user_limits: UserLimits | msgspec.UnsetType = msgspec.UNSET
    """Per-user limits (`UserLimits`: default, overrides); absent (not in the JSON) = none."""
    submit_limits: SubmitLimit | msgspec.UnsetType = msgspec.UNSET
    """The tenant's own submit limits (`SubmitLimit`); absent (not in the JSON): defaults."""


class PriorityClassConfigured(Event, frozen=True, kw_only=True, tag="PriorityClassConfigured.v1"):
    """A priority class, like a Kubernetes PriorityClass with preemptibility kept separate."""

    name: str
    """Class name, e.g. `train`."""
    value: int
    """Priority value; higher wins."""
    preemptible: bool = True
    """Whether work of this class may be preempted."""
    slo_class: str = "batch"
    """SLO class reported in metrics (`latency-critical`, `interactive`, `batch`, ...)."""
    description: str = ""
    """Human description."""
    grace_s: NonNegative | None = None
    """Checkpoint grace period for victims of this class; None = the policy default."""
    allow_timeslice: bool = False
    """Whether this class may use time-sliced GPUs (interactive / dev work only)."""
    default_time_limit_s: NonNegative | msgspec.UnsetType = msgspec.UNSET
    """Time limit (seconds) of a job of this class that sets none (Slurm partition
    `DefaultTime`); unset: none. Added after v1 without a new tag: unset encodes as before."""
    max_time_limit_s: NonNegative | msgspec.UnsetType = msgspec.UNSET
    """Longest time limit a job of this class may ask for (Slurm partition `MaxTime`): a longer
    one is rejected at admission (`TimeLimitTooLong`), and a job without one gets this one
    when no default is set. Unset: no maximum. Added after v1 without a new tag."""


MaxMoves = Annotated[int, msgspec.Meta(ge=1, le=16)]
"""Bound on the allocations one consolidation moves."""
Positive = Annotated[int, msgspec.Meta(ge=1)]
"""A count or time that must be at least 1."""

PreemptionScope = Literal["tenant", "cluster"]
"""Closed: a PolicyConfigured with another value does not decode (it is dead-lettered)."""
PlacementPolicyName = Literal["default", "bestfit", "packing", "fgd"]
"""Closed: the placement scorers that exist."""
DependencyPolicy = Literal["cancel", "pend"]
"""Closed: what becomes of a job whose dependency can no longer be met."""


class Policy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Scheduling policy parameters (every field has a default)."""

    preemption: bool = True
    """Whether preemption is enabled at all."""
    preemption_scope: PreemptionScope = "cluster"
    """`tenant`: priority preemption only inside a tenant; `cluster`: across tenants."""
    reclaim: bool = True
    """Tenants under their guarantee may evict borrowers of other tenants."""
    placement_policy: PlacementPolicyName = "default"
    """Placement scorer: `default`, `bestfit`, `packing`, `fgd`."""
    default_grace_s: int = 30
    """Checkpoint grace period when neither job nor class sets one."""
    min_runtime_s: int = 300
    """A job is not preempted (`Priority`, `Reclaim`, `Defragment`; `Backfill` ignores it)
    before its current run has lasted this long (0 = off); against `Reclaim` only if the run
    started before the reclaiming job began to wait (the reclaim bound, docs/deciders.md). Default 5 min: a checkpoint of a
    large model takes 30-120 s (seed 000), so a run of at least 300 s computes 2.5x the worst
    save before it can be asked to save again; with 0, a job can be killed, requeued,
    restarted and killed again before making progress (a mixed load saw 123 evictions in
    107 s). The cost: a higher-priority job waits up to this long when every sufficient victim
    started less than 300 s ago."""
    eviction_budget_per_hour: int = 3
    """Max evictions of one job in any hour (0 = unlimited): a job evicted this often in the
    last hour (any reason) is not chosen as a `Priority`, `Reclaim` or `Defragment` victim
    until the oldest of those evictions is an hour old (`Backfill` ignores it). Default 3:
    seed 000's "no more than X evictions per job per hour", X as seed 003's `backoffLimit: 3`
    for preemptible training; at <= 120 s per checkpoint, 3 evictions cost a job at most
    6 min of saving per hour (10 %). The cost: a tenant reclaiming its guarantee
    waits while the only sufficient borrowers are over budget (`EvictionBudget`, with the
    time it lapses)."""
    max_lost_gpu_hours: float | None = None
    """Refuse preemptions that would lose more work than this."""
    aging_after_preemptions: int = 2
    """Raise a job's effective priority by one step (the next preemptible class value) per this
    many preemptions it suffered (0 = off). Default 2: seed 000 promotes jobs "preempted
    multiple times"; after the second eviction jobs of the class that evicted it no longer
    can, leaving the third budgeted eviction to `Reclaim` and non-preemptible classes. Aging
    orders the queue and protects from `Priority` eviction; it never grants the right to
    evict, and never lifts a job to a non-preemptible class's value."""
    aging_after_wait_s: int = 1800
    """Raise a job's effective priority by one step per this many seconds of total queue time
    (0 = off). Kept once earned: queue time of earlier attempts is banked when the job is
    placed, so a job aging placed ahead of a class is not the first victim of that class's next
    arrival. Default 30 min: seed 004 lets batch "queue for minutes", so ordinary queueing
    never promotes; a job starved for half an hour queues with the next class (seed 000:
    "waited beyond a threshold ... to ensure eventual completion")."""
    reservation_after_s: int = 0
    """A gang waiting this long gets a reservation (0 = off)."""
    node_timeout_s: int = 30
    """A node silent for this long is declared lost."""
    nomination_ttl_s: int = 300
    """Capacity freed by a preemption stays nominated for its beneficiary this long after the
    last victim exited; then anyone may use it."""
    start_timeout_s: int = 120
    """A placed member on a real (non-simulated) node that has not started after this long
    aborts its gang: evicted (`StartTimeout`) and requeued whole (0 = never)."""
    usage_half_life_s: int = 0
    """Half-life of the time-decayed past GPU usage that breaks queue-order ties between
    tenants equally far below their fair share: less recent usage goes first (0 = off)."""
    # Defragmentation (issue 16). At their defaults these fields are left out of the
    # configuration digest (`services.domain.fold.config.DIGEST_OPTIONAL`), so logs written before
    # they existed keep their digests and every decision replays byte for byte.
    consolidation: bool = False
    """Consolidation pass (default off): a queued job blocked only by fragmentation (the free
    capacity would hold it, no node or NVLink clique does) gets up to
    `consolidation_max_moves` preemptible, checkpointable allocations migrated out of its way
    (`ConsolidationPlanned`, then checkpoint-then-evict with reason `Consolidate`); each moved
    gang must fit elsewhere at once. Moves obey minimum runtime, the eviction budget, the
    disruption budgets and `max_lost_gpu_hours` like any preemption."""
    consolidation_max_moves: MaxMoves = 2
    """Most allocations one consolidation may move (1..16; default 2)."""
    mig_regeometry: bool = False
    """MIG re-geometry (default off): when a queued job asks for a MIG profile that no GPU's
    fixed layout offers, an idle MIG GPU with a fixed layout (no instance in use) is asked to
    change its layout (`MigReconfigurationRequested`); its agent applies it and reports
    `MigReconfigured`. Rate-limited per node by the two fields below."""
    mig_regeometry_window_s: Positive = 3600
    """Rate-limit window of re-geometries per node, seconds (default 3600)."""
    mig_regeometry_per_window: Positive = 1
    """Most re-geometries of one node per window (default 1)."""
    dependency_never_satisfied: DependencyPolicy | msgspec.UnsetType = msgspec.UNSET
    """A pending job with a dependency that can no longer be met (it waits for a job to
    succeed and that job failed): `cancel` (unset means this; `JobWithdrawn`, reason
    `DependencyNeverSatisfied`, like Slurm's `kill_invalid_depend`) or `pend` (it stays
    pending with reason `DependencyNeverSatisfied` until cancelled). Unset, it is left out of
    the JSON and the digest, so logs written before it existed keep their bytes."""
    profile: QueueProfile | msgspec.UnsetType = msgspec.UNSET
    """`native` (unset means this) or `slurm`: pending jobs ordered as Slurm's
    multifactor priority within partition tiers, and preemption by partition tier or QOS
    (`slurm`, its values in `slurm`; `services.domain.policy.slurm_priority`). Unset, it is
    left out of the JSON and the digest."""
    slurm: SlurmPolicy | msgspec.UnsetType = msgspec.UNSET
    """The `slurm` profile's site values (written by `gpuledger import slurm --slurm-conf`)."""


class PolicyConfigured(Event, frozen=True, kw_only=True, tag="PolicyConfigured.v1"):
    """The scheduling policy in force from now on."""

    policy: Policy
    """All parameters."""


class TenantChange(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a schedule changes on one tenant; a field left None keeps the value in force."""

    tenant: str
    """Tenant path (configured)."""
    guaranteed_gpu_milli: NonNegative | None = None
    """New guarantee in milli-GPUs."""
    limit_gpu_milli: NonNegative | None = None
    """New limit in milli-GPUs."""
    over_quota_weight: NonNegative | None = None
    """New over-quota weight."""


class ClassChange(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a schedule changes on one priority class; None keeps the value in force."""

    name: str
    """Class name (built-in or configured)."""
    value: int | None = None
    """New priority value."""
    preemptible: bool | None = None
    """New preemptibility."""


class ServiceChange(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a schedule changes on one service (a job of `kind: service`): its replica count."""

    job_id: str
    """The service's job id."""
    replicas: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]
    """Replica count wanted from the fire time on (published as `ServiceScaled`)."""


class ScheduleConfigured(Event, frozen=True, kw_only=True, tag="ScheduleConfigured.v1"):
    """A time-of-day policy: at every time the cron expression names in `timezone`, the quota
    service publishes the changes as ordinary `TenantConfigured` / `PriorityClassConfigured`
    events (correlation id `schedule:<name>`), so a replay folds exactly what live folded.
    A schedule whose cron expression or zone cannot be read is refused by the fold."""

    name: str
    """Schedule name (unique; a later event with the same name replaces it)."""
    cron: str
    """Five-field cron expression (`0 8 * * 1-5`)."""
    timezone: str = "UTC"
    """IANA zone the expression is read in (`Europe/Berlin`); daylight saving is honoured."""
    tenants: tuple[TenantChange, ...] = ()
    """Tenant changes."""
    priority_classes: tuple[ClassChange, ...] = ()
    """Priority class changes."""
    services: tuple[ServiceChange, ...] = ()
    """Replica counts of services (published as `ServiceScaled` by the quota service for a
    service its tenant has; a job id that is not a running service is skipped)."""
    description: str = ""
    """Human description."""
    removed: bool = False
    """True: the schedule no longer fires."""


# ---------------------------------------------------------------- admission


class JobAdmitted(Decision, frozen=True, kw_only=True, tag="JobAdmitted.v1"):
    """Admission accepted the job; it is now queued."""

    job_id: str
    """The job."""
    tenant: str
    """Its tenant."""
    priority_class: str
    """Its class."""
    priority: int
    """Resolved priority value."""
    preemptible: bool
    """Resolved preemptibility."""
    slo_class: str
    """Resolved SLO class."""
    time_limit_s: int | msgspec.UnsetType = msgspec.UNSET
    """Resolved time limit in seconds: the job's own, else its class's default (or maximum);
    unset (left out of the JSON): none. Added after v1 without a new tag."""


class JobRejected(Decision, frozen=True, kw_only=True, tag="JobRejected.v1"):
    """Admission refused the job."""

    job_id: str
    """The job."""
    tenant: str
    """Its tenant."""
    reason: str
    """CamelCase code: `UnknownTenant`, `UnknownPriorityClass`, `InvalidSpec`, `Unschedulable`,
    `MIGProfileUnavailable`, `NonPreemptibleOverQuota`, `TopologyUnsatisfiable`."""
    message: str
    """Quantitative explanation."""
    details: dict[str, Any] = {}
    """Structured details."""


class RequestRefused(Decision, frozen=True, kw_only=True, tag="RequestRefused.v1"):
    """Admission refused a client request that must not change any job: a second submission
    of an existing job id with other content, a submission for an existing job that could
    not be decoded, or a cancel of a job the tenant does not have. The refused message stays
    in the log (it is immutable) and is folded by nobody; this records why."""

    job_id: str
    """The job id the refused request named."""
    tenant: str
    """The tenant the request came from (its subject)."""
    request: str
    """What was refused: `JobSubmitted`, `JobCancelled` or `ServiceScaled`."""
    request_seq: int
    """Stream sequence of the refused message (one refusal per message)."""
    reason: str
    """CamelCase code: `JobIdConflict` (the id is taken by a submission with other content),
    `InvalidSpec` (a second submission, or a cancel, that could not be decoded or applied),
    `UnknownJob` (cancel or scale of a job the tenant does not have)."""
    message: str
    """Quantitative explanation (which fields differ, the decode error)."""
    details: dict[str, Any] = {}
    """Structured details (the existing submission's stream sequence, differing fields)."""


# ---------------------------------------------------------------- quota


class FairShareUpdated(Decision, frozen=True, kw_only=True, tag="FairShareUpdated.v1"):
    """The quota service's fair shares changed."""

    shares: tuple[TenantShare, ...]
    """Every tenant's position, sorted by tenant path."""


# ---------------------------------------------------------------- scheduler


class TimeLimitReached(Decision, frozen=True, kw_only=True, tag="TimeLimitReached.v1"):
    """A run of a job reached its time limit (`JobAdmitted.time_limit_s`): its members are
    asked to checkpoint now and are stopped at `deadline_ms` (now + the class's grace); the
    job then ends `timeout` (`GangFailed` with reason `TimeLimit`), unless every member
    completes before. Published by the scheduler on `gl.sched.<job>.TimeLimitReached`."""

    job_id: str
    """The job."""
    allocation_id: str
    """The run (allocation) that reached its limit."""
    time_limit_s: int
    """The limit, seconds of run time."""
    started_ms: int
    """When the run started (its last member started): the limit counts from here."""
    deadline_ms: int
    """Kill time (decision time + grace)."""
    message: str = ""
    """Quantitative explanation."""


class JobWithdrawn(Decision, frozen=True, kw_only=True, tag="JobWithdrawn.v1"):
    """The scheduler ended a pending job that can never run: a dependency that can no longer
    be met (`DependencyNeverSatisfied`: the job it waits for ended otherwise). The job ends
    `cancelled` with that reason. Published on `gl.sched.<job>.JobWithdrawn`."""

    job_id: str
    """The job."""
    reason: str
    """CamelCase code: `DependencyNeverSatisfied`."""
    message: str = ""
    """Quantitative explanation (which dependency, how the job it names ended)."""
    details: dict[str, Any] = {}
    """Structured details (the dependency and the state of the job it names)."""


class GangPlaced(Decision, frozen=True, kw_only=True, tag="GangPlaced.v1"):
    """A gang was placed atomically: every listed member has its capacity."""

    job_id: str
    """The job."""
    allocation_id: str
    """`<job>#<attempt>`: the key of every side effect of this placement."""
    tenant: str
    """The job's tenant."""
    members: tuple[MemberPlacement, ...]
    """Every member's node and GPUs."""
    borrowing: bool = False
    """True when the placement takes the tenant above its guarantee (reclaimable)."""
    resume_step: int | None = None
    """Checkpoint step the members resume from (None = fresh start)."""
    backfill_for: str | None = None
    """Set when this preemptible gang was placed on capacity reserved for that (starving)
    job: it is evicted (`Backfill`) when the reserving job can land."""


class PendingReasonChanged(Decision, frozen=True, kw_only=True, tag="PendingReasonChanged.v1"):
    """Why a job is still waiting (emitted only when the reason or message changes)."""

    job_id: str
    """The job."""
    reason: str
    """CamelCase code (`Resources`, `WaitingForQuota`, `GangIncomplete`, ...)."""
    message: str
    """Quantitative explanation."""
    details: dict[str, Any] = {}
    """Node histogram, queue position, whether preemption would help."""


class GangEvicted(Decision, frozen=True, kw_only=True, tag="GangEvicted.v1"):
    """Every member of the allocation is gone; its capacity is released."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation."""
    reason: str
    """`Priority`, `Reclaim`, `Backfill`, `NodeLost`, `Cancelled`, `StartTimeout`, `ScaledDown`
    (a service replica stopped by `ServiceScaled`; it holds no work, `lost_gpu_ms` is 0)."""
    preempted_by: str | None = None
    """The beneficiary job when preempted."""
    checkpointed: bool = False
    """Whether every member acknowledged a checkpoint before exiting."""
    lost_gpu_ms: int = 0
    """GPU-milliseconds of work lost since the last checkpoint (whole-GPU equivalents)."""
    progress_ms: int = 0
    """Work saved so far (run time the job resumes from)."""


class GangResized(Decision, frozen=True, kw_only=True, tag="GangResized.v1"):
    """An elastic gang (`min_members < replicas`) runs on with another number of members: the
    members a partial `PreemptionRequested` (its `ranks`) asked to leave have exited, and
    their capacity is released (`from_members` > `to_members`). The others keep running;
    the member wrapper tells them their new world size."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation; it stays the job's allocation."""
    members: tuple[MemberPlacement, ...]
    """Every member of the allocation after the resize."""
    from_members: int
    """Members before."""
    to_members: int
    """Members after (never below the job's `min_members`)."""
    reason: str
    """Why: the preemption's reason (`Priority`, `Reclaim`, ...)."""
    preempted_by: str | None = None
    """The beneficiary job the released capacity is nominated for."""
    checkpointed: bool = False
    """Whether every leaving member acknowledged a checkpoint before exiting."""
    lost_gpu_ms: int = 0
    """GPU-milliseconds of work the leaving members lost since their last checkpoint."""


class GangRequeued(Decision, frozen=True, kw_only=True, tag="GangRequeued.v1"):
    """An evicted job is queued again and will resume from its checkpoint."""

    job_id: str
    """The job."""
    after_allocation_id: str
    """The allocation that ended."""
    resume_step: int | None = None
    """Checkpoint step to resume from."""


class GangCompleted(Decision, frozen=True, kw_only=True, tag="GangCompleted.v1"):
    """Every member completed successfully."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation."""


class GangFailed(Decision, frozen=True, kw_only=True, tag="GangFailed.v1"):
    """A member failed; the gang's capacity is released and the job ends failed."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation."""
    reason: str
    """`MemberFailed`, `StartTimeout`, or `TimeLimit` (the run reached its time limit,
    `TimeLimitReached`: the job ends `timeout`, not `failed`)."""
    message: str = ""
    """Explanation (which rank, exit code)."""


class NodeLost(Decision, frozen=True, kw_only=True, tag="NodeLost.v1"):
    """A node stopped heartbeating past its timeout (or was reported down)."""

    node: str
    """The node."""
    message: str = ""
    """Explanation."""


# ---------------------------------------------------------------- preemption


class PreemptionRequested(Decision, frozen=True, kw_only=True, tag="PreemptionRequested.v1"):
    """A victim allocation must checkpoint and exit before `deadline_ms`."""

    job_id: str
    """The victim job."""
    allocation_id: str
    """The victim allocation."""
    beneficiary: str
    """The blocked job the freed capacity is nominated for."""
    reason: str
    """`Priority`, `Reclaim`, `Defragment`, `Backfill` (the victim was placed as preemptible
    backfill on capacity reserved for the beneficiary) or `Consolidate` (a migration planned by
    the `ConsolidationPlanned` of the beneficiary: the victim fits elsewhere at once and is
    placed again as soon as it has exited)."""
    deadline_ms: int
    """Kill time (request time + grace)."""
    message: str = ""
    """Quantitative explanation."""
    details: dict[str, Any] = {}
    """Victims chosen, alternatives considered and why they were rejected."""
    ranks: tuple[int, ...] | msgspec.UnsetType = msgspec.UNSET
    """Elastic gangs (`min_members < replicas`): only these members (the highest ranks, never
    below `min_members`) checkpoint and exit, and the gang shrinks (`GangResized`) instead of
    being evicted. Absent (left out of the JSON): the whole gang."""


class PreemptionDeclined(Decision, frozen=True, kw_only=True, tag="PreemptionDeclined.v1"):
    """Preemption was considered for a blocked job and refused."""

    job_id: str
    """The blocked job."""
    reason: str
    """`MinRuntime`, `EvictionBudget`, `LostWorkBound`, `NoVictims`, `WaitingForPreemptedWorkloads`."""
    message: str = ""
    """Quantitative explanation."""
    details: dict[str, Any] = {}
    """Candidates and why they were excluded."""


class ConsolidationMove(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One allocation a consolidation migrates."""

    job_id: str
    """The moved job."""
    allocation_id: str
    """Its allocation (checkpointed and evicted; the job is placed again under a new one)."""
    gpu_milli: int
    """GPU capacity the allocation holds, milli-GPUs."""
    from_nodes: tuple[str, ...]
    """Nodes it leaves, sorted."""
    to_nodes: tuple[str, ...]
    """Nodes it fitted on in the plan (the scheduler places it again and may choose others
    of the same fit; never the nodes it leaves, which are nominated to the blocked job)."""
    at_risk_gpu_ms: int = 0
    """Work since its last checkpoint when planned (lost only if the checkpoint misses its
    deadline)."""


class ConsolidationPlanned(Decision, frozen=True, kw_only=True, tag="ConsolidationPlanned.v1"):
    """The preemption service decided to migrate a few running allocations so that a job
    blocked only by fragmentation fits (policy `consolidation`). Published on
    `gl.preempt.<job>.ConsolidationPlanned` with the blocked job's id, together with one
    `PreemptionRequested` (reason `Consolidate`, beneficiary = this job) per move; the freed
    nodes are nominated to the job, which waits with `WaitingForConsolidation`."""

    job_id: str
    """The blocked job the room is made for."""
    moves: tuple[ConsolidationMove, ...]
    """The allocations migrated, in plan order (at most `consolidation_max_moves`)."""
    target_nodes: tuple[str, ...]
    """Nodes the blocked job fitted on in the plan, sorted."""
    free_gpu_milli: int = 0
    """Free GPU capacity the job's GPUs could come from when planned (what shows the block
    is fragmentation, not capacity)."""
    message: str = ""
    """Quantitative explanation."""
    details: dict[str, Any] = {}
    """Candidates considered and excluded (with why), the job's pending reason before."""


class MigReconfigurationRequested(
    Decision, frozen=True, kw_only=True, tag="MigReconfigurationRequested.v1"
):
    """The preemption service asks the agent of `node` to change the MIG layout of one idle
    GPU (no instance in use) so a queued job's profile can be placed (policy
    `mig_regeometry`, rate-limited per node). Published on
    `gl.preempt.<job>.MigReconfigurationRequested` with the queued job's id; until the agent's
    `MigReconfigured`, the node is nominated to that job."""

    job_id: str
    """The queued job the new layout is for."""
    node: str
    """The node."""
    gpu_index: int
    """The GPU's index on the node."""
    layout: tuple[str, ...]
    """The layout wanted, `<profile>@<start>` sorted by start (see `GpuInfo.mig_layout`)."""
    previous_layout: tuple[str, ...] = ()
    """The layout it replaces."""
    message: str = ""
    """Quantitative explanation (profile asked, why no GPU offers it, the rate limit)."""
    details: dict[str, Any] = {}
    """Profile, re-geometries of the node in the window, GPUs considered."""


# ---------------------------------------------------------------- node agents


class MigReconfigured(Event, frozen=True, kw_only=True, tag="MigReconfigured.v1"):
    """An agent changed the MIG layout of one of its GPUs (answering a
    `MigReconfigurationRequested`, whose event id is the causation id). Published on
    `gl.node.<node>.MigReconfigured`; the fold replaces that GPU's layout in the inventory.
    Refused if an allocation holds an instance of the GPU."""

    node: str
    """The node."""
    gpu_index: int
    """The GPU's index on the node."""
    layout: tuple[str, ...]
    """The layout now in force, `<profile>@<start>` sorted by start."""
    job_id: str = ""
    """The job the request was for (empty for an operator's change)."""


class NodeRegistered(Event, frozen=True, kw_only=True, tag="NodeRegistered.v1"):
    """An agent announced its node and GPUs (again after a restart)."""

    node: NodeInfo
    """The inventory."""
    simulated: bool = False
    """True for simulated agents."""
    heartbeat_s: int = 0
    """Heartbeat interval the agent promises; 0 = no heartbeats (the node is never declared
    lost for silence, e.g. in the simulator)."""


class NodeHeartbeat(Event, frozen=True, kw_only=True, tag="NodeHeartbeat.v1"):
    """An agent is alive."""

    node: str
    """The node."""
    running: tuple[str, ...] = ()
    """`<allocation>/<rank>` of members running there."""


class MemberStarted(Event, frozen=True, kw_only=True, tag="MemberStarted.v1"):
    """A member's process started."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation."""
    rank: int
    """Member rank."""
    node: str
    """Node it runs on."""


class MemberCheckpointed(Event, frozen=True, kw_only=True, tag="MemberCheckpointed.v1"):
    """A member acknowledged a saved checkpoint."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation."""
    rank: int
    """Member rank."""
    node: str
    """Node."""
    step: int
    """Step (or progress counter) saved."""
    progress_ms: int = 0
    """Run time of work the checkpoint holds (simulated agents; 0 if unknown)."""


class MemberExited(Event, frozen=True, kw_only=True, tag="MemberExited.v1"):
    """A member's process ended."""

    job_id: str
    """The job."""
    allocation_id: str
    """The allocation."""
    rank: int
    """Member rank."""
    node: str
    """Node."""
    outcome: str
    """`completed`, `failed`, `preempted` or `cancelled`."""
    exit_code: int | None = None
    """Process exit code (None when killed by a signal or simulated)."""


class GpuMetricsReported(Event, frozen=True, kw_only=True, tag="GpuMetricsReported.v2"):
    """Utilisation samples of a node's GPUs. v2 replaced v1's `util_pct` with `sm_active`."""

    node: str
    """The node."""
    samples: tuple[GpuSample, ...]
    """One per GPU / MIG instance."""


# ---------------------------------------------------------------- runtime


class DeadLettered(Event, frozen=True, kw_only=True, tag="DeadLettered.v1"):
    """A message on the stream could not be decoded or applied; every service skips it."""

    stream_seq: int
    """Stream sequence of the bad message."""
    subject: str
    """Its subject."""
    reason: str
    """Why it was rejected (decode error text)."""
    payload_head: str = ""
    """First bytes of the payload, for diagnosis."""


CLIENT_EVENTS: tuple[type[Event], ...] = (
    JobSubmitted,
    JobCancelled,
    ServiceScaled,
    *CONTROL_EVENTS,
    *NODE_CONTROL_EVENTS,
)
CONFIG_EVENTS: tuple[type[Event], ...] = (
    TenantConfigured,
    PriorityClassConfigured,
    PolicyConfigured,
    ScheduleConfigured,
)
ALL_EVENTS: tuple[type[Event], ...] = (
    JobSubmitted,
    JobCancelled,
    TenantConfigured,
    PriorityClassConfigured,
    PolicyConfigured,
    ScheduleConfigured,
    JobAdmitted,
    JobRejected,
    RequestRefused,
    FairShareUpdated,
    GangPlaced,
    PendingReasonChanged,
    GangEvicted,
    GangRequeued,
    GangResized,
    GangCompleted,
    GangFailed,
    NodeLost,
    PreemptionRequested,
    PreemptionDeclined,
    ConsolidationPlanned,
    MigReconfigurationRequested,
    NodeRegistered,
    NodeHeartbeat,
    MemberStarted,
    MemberCheckpointed,
    MemberExited,
    GpuMetricsReported,
    DeadLettered,
    ServiceScaled,
    MigReconfigured,
    TimeLimitReached,
    JobWithdrawn,
    *CONTROL_EVENTS,
    *NODE_CONTROL_EVENTS,
)


# A literal list, so type checkers see what `gpuledger.events` re-exports; a test checks it
# names every class of ALL_EVENTS.
__all__ = [
    "JobSubmitted",
    "JobHeld",
    "JobReleased",
    "JobRequeued",
    "JobPriorityChanged",
    "JobMovedToTop",
    "NodeCordoned",
    "NodeUncordoned",
    "MaintenanceScheduled",
    "MaintenanceCancelled",
    "GangResized",
    "JobWithdrawn",
    "TimeLimitReached",
    "JobCancelled",
    "TenantConfigured",
    "PriorityClassConfigured",
    "PolicyConfigured",
    "ScheduleConfigured",
    "JobAdmitted",
    "JobRejected",
    "RequestRefused",
    "FairShareUpdated",
    "GangPlaced",
    "PendingReasonChanged",
    "GangEvicted",
    "GangRequeued",
    "GangCompleted",
    "GangFailed",
    "NodeLost",
    "PreemptionRequested",
    "PreemptionDeclined",
    "ConsolidationPlanned",
    "MigReconfigurationRequested",
    "NodeRegistered",
    "NodeHeartbeat",
    "MemberStarted",
    "MemberCheckpointed",
    "MemberExited",
    "GpuMetricsReported",
    "DeadLettered",
    "ServiceScaled",
    "MigReconfigured",
    "Policy",
    "TenantChange",
    "ClassChange",
    "ServiceChange",
    "ConsolidationMove",
    "Dependency",
    "ArraySpec",
    "PreemptionScope",
    "PlacementPolicyName",
    "CLIENT_EVENTS",
    "CONFIG_EVENTS",
    "ALL_EVENTS",
]
