"""The closed vocabularies of the log: reason codes and job states.

Every code is a `StrEnum` member whose value is its name, so it *is* the string on the wire:
msgspec and `json` encode a member as its value, and a member compares and hashes equal to
that string. Event fields stay typed `str` (old logs and the golden fixtures decode
unchanged, and a code added later does not break an older reader); deciders emit members,
readers may compare decoded strings with members directly.

Adding a code: add the member here with a one-line comment, then the rule that produces it
(see `services/preemption/rules.py` and `services/domain/policy/pending.py`) and its test.
"""

from __future__ import annotations

from enum import StrEnum


class PendingReason(StrEnum):
    """Why a job is still waiting (`PendingReasonChanged.reason`)."""

    Resources = "Resources"  # not enough free capacity of the kind asked for
    GangIncomplete = "GangIncomplete"  # some members fit, fewer than min_members
    TopologyUnsatisfiable = "TopologyUnsatisfiable"  # enough GPUs, not inside one NVLink clique
    MIGPlacementUnavailable = "MIGPlacementUnavailable"  # no GPU with a free slot for the profile
    IsolationConflict = (
        "IsolationConflict"  # mps GPUs held by other tenants / timeslice not allowed
    )
    Unschedulable = "Unschedulable"  # no node could host a member even when empty
    ExceedsLimit = "ExceedsLimit"  # the tenant (or an ancestor) would exceed its limit
    LendingLimit = "LendingLimit"  # would borrow capacity other tenants keep back (lending_limit)
    NonPreemptibleOverQuota = "NonPreemptibleOverQuota"  # non-preemptible work beyond a guarantee
    QuotaScheduled = "QuotaScheduled"  # beyond its guarantee now; a schedule gives enough later
    Reserved = "Reserved"  # the capacity that fits it is reserved for a starving gang
    WaitingForPreemptedWorkloads = "WaitingForPreemptedWorkloads"  # victims still checkpointing
    WaitingForConsolidation = "WaitingForConsolidation"  # allocations migrating out of its way
    WaitingForMigReconfiguration = (
        "WaitingForMigReconfiguration"  # an idle GPU's MIG layout changing for it
    )
    Dependency = "Dependency"  # a job it depends on (`depends_on`) has not done what it waits for
    ArrayTaskLimit = "ArrayTaskLimit"  # its array runs `max_running` tasks already
    UserLimit = "UserLimit"  # its user is at a per-user limit of its tenant (`users:`)
    DependencyNeverSatisfied = (
        "DependencyNeverSatisfied"  # a dependency can no longer be met (policy `pend`)
    )
    Held = "Held"  # held by its tenant or the operator (`gpuledger hold`) until released
    NodeCordoned = "NodeCordoned"  # it would fit only on nodes the operator cordoned
    Maintenance = "Maintenance"  # it would fit only on nodes whose maintenance window it reaches
    Priority = "Priority"  # Slurm's main scheduler: a job ahead in its partition waits for capacity


class PreemptionReason(StrEnum):
    """Why a victim is evicted (`PreemptionRequested.reason`, and `GangEvicted.reason`)."""

    Priority = "Priority"  # lower effective priority than the blocked job
    Reclaim = "Reclaim"  # its tenant borrows; the blocked job's tenant is within its guarantee
    Defragment = "Defragment"  # moved so a guaranteed job fits; it fits elsewhere at once
    Backfill = "Backfill"  # ran as preemptible backfill on the blocked job's reservation
    Consolidate = (
        "Consolidate"  # migrated (checkpoint, evict, re-place at once) so a fragmented job fits
    )
    Requeue = "Requeue"  # its tenant or the operator requeued it (`gpuledger requeue`)
    Drain = "Drain"  # its node is being drained by the operator (`gpuledger node drain`)


class ResizeReason(StrEnum):
    """Why an elastic gang was resized (`GangResized.reason`) other than a preemption (a
    shrink carries the `PreemptionReason` of its partial preemption)."""

    Grow = "Grow"  # capacity was free and nothing queued waited for it


class ExclusionReason(StrEnum):
    """Why a candidate victim is protected (`details.excluded[].reason` of preemption events)."""

    NonPreemptible = "NonPreemptible"
    EndsAtTimeLimit = "EndsAtTimeLimit"  # its run reaches its time limit within its grace
    Aged = "Aged"
    PreemptionLoop = "PreemptionLoop"
    MinRuntime = "MinRuntime"
    EvictionBudget = "EvictionBudget"
    DisruptionBudget = "DisruptionBudget"
    WithinGuarantee = "WithinGuarantee"


class DeclineReason(StrEnum):
    """Why preemption was refused for a blocked job (`PreemptionDeclined.reason`). A refusal
    caused only by a lapsing exclusion carries that exclusion's code."""

    PreemptionDisabled = "PreemptionDisabled"
    WaitingForPreemptedWorkloads = "WaitingForPreemptedWorkloads"
    NoVictims = "NoVictims"
    EndsAtTimeLimit = "EndsAtTimeLimit"  # room only behind runs that end at their limit soon
    LostWorkBound = "LostWorkBound"
    MinRuntime = "MinRuntime"
    EvictionBudget = "EvictionBudget"
    WouldCycle = "WouldCycle"  # the eviction would not strictly raise the standing (measure.py)


class RejectReason(StrEnum):
    """Why admission refused a job (`JobRejected.reason`)."""

    UnknownTenant = "UnknownTenant"
    UnknownPriorityClass = "UnknownPriorityClass"
    InvalidSpec = "InvalidSpec"
    Unschedulable = "Unschedulable"
    MIGProfileUnavailable = "MIGProfileUnavailable"
    NonPreemptibleOverQuota = "NonPreemptibleOverQuota"
    TopologyUnsatisfiable = "TopologyUnsatisfiable"
    TimeLimitTooLong = "TimeLimitTooLong"  # longer than its class's `max_time_limit_s`
    UnknownDependency = "UnknownDependency"  # depends on no job of its tenant by that id
    DependencyCycle = "DependencyCycle"  # its dependencies lead back to itself
    SubmitLimit = "SubmitLimit"  # past its tenant's or user's submit_jobs or array_size


class EndReason(StrEnum):
    """Why a run or a job ended without completing (`GangFailed.reason`,
    `JobWithdrawn.reason`)."""

    MemberFailed = "MemberFailed"  # a member exited with an error
    StartTimeout = "StartTimeout"  # a member did not start in time
    TimeLimit = "TimeLimit"  # the run reached its time limit (the job ends `timeout`)
    DependencyNeverSatisfied = "DependencyNeverSatisfied"  # withdrawn: a dependency cannot be met


class EvictReason(StrEnum):
    """Why a gang was evicted or requeued other than by a preemption's own code
    (`GangEvicted.reason`, `GangResized.reason`; a preemption carries its `PreemptionReason`,
    a start timeout `EndReason.StartTimeout`)."""

    NodeLost = "NodeLost"  # a node under a member stopped reporting
    Cancelled = "Cancelled"  # its job was cancelled
    ScaledDown = "ScaledDown"  # a service replica removed by a scale-down
    Preempted = "Preempted"  # members left for a preemption no longer on record


class JobState(StrEnum):
    """A job's folded state (`JobRecord.state`; the STATE column of job tables)."""

    submitted = "submitted"  # in the log, not yet admitted
    pending = "pending"  # admitted, waiting for a placement
    running = "running"  # placed
    preempting = "preempting"  # asked to checkpoint and exit
    completed = "completed"
    failed = "failed"
    rejected = "rejected"
    cancelled = "cancelled"
    timeout = "timeout"  # stopped at its time limit (Slurm `TIMEOUT`)


TERMINAL_STATES = frozenset(
    {
        JobState.completed,
        JobState.failed,
        JobState.rejected,
        JobState.cancelled,
        JobState.timeout,
    }
)
"""States a job never leaves."""


class FoldRefusal(StrEnum):
    """Why the fold did not take an event (`Refusal.code`, the projection's `refusals.code`,
    and a dead letter's reason for a `Refused` one). The first three are the acceptance
    rules' answers to a principal entitled to publish the event: it reports on something it
    does not own, or decides what nothing in force produces (docs/security.md has the
    table); the others name what the event contradicts or finds absent or already settled."""

    WrongNode = "WrongNode"  # a node's fact about a member placed on another node (or none)
    WrongJob = "WrongJob"  # a node's fact naming another job than the allocation's
    NotScheduled = "NotScheduled"  # quota's config change that no schedule in force produces
    WrongSubject = "WrongSubject"  # the event arrived on a subject it does not belong on
    WrongProducer = "WrongProducer"  # its producer's role may not publish that event
    InvalidId = "InvalidId"  # an id that cannot be a subject token
    StaleLeaderEpoch = "StaleLeaderEpoch"  # a decision of a deposed leader
    InvalidSpec = "InvalidSpec"  # a job spec or scale request that cannot be folded
    DuplicateJob = "DuplicateJob"  # the job id was submitted already
    UnknownJob = "UnknownJob"  # no job by that id
    WrongState = "WrongState"  # the job is not in the state the event needs
    DuplicateAllocation = "DuplicateAllocation"  # the allocation id exists already
    PlacementConflict = "PlacementConflict"  # the placement collides with capacity in use
    NotRunning = "NotRunning"  # the allocation is not (or no longer) running
    NotShrinking = "NotShrinking"  # a shrink of an allocation none of whose members left
    InvalidResize = "InvalidResize"  # a resize the allocation's gang cannot take
    UnknownNode = "UnknownNode"  # no registered node by that name
    UnknownWindow = "UnknownWindow"  # no maintenance window by that id
    DuplicateWindow = "DuplicateWindow"  # a maintenance window of that id exists already
    InvalidWindow = "InvalidWindow"  # a maintenance window that ends before it starts
    NotMigGpu = "NotMigGpu"  # a MIG reconfiguration of a GPU without MIG
    MigInstanceInUse = "MigInstanceInUse"  # a MIG reconfiguration under a running member
    MigReconfigurationPending = "MigReconfigurationPending"  # the GPU's layout is changing
    InvalidMigLayout = "InvalidMigLayout"  # a MIG layout that does not parse or fit


class RequestReason(StrEnum):
    """Why a client request the log holds was refused (`RequestRefused.reason`, besides the
    `RejectReason` of a rejected first submission)."""

    JobIdConflict = "JobIdConflict"  # the job id is taken by another submission
    UnknownJob = "UnknownJob"  # a cancel or scale of no job of the tenant
    InvalidSpec = "InvalidSpec"  # a request that could not be decoded or applied
    NotYourUser = "NotYourUser"  # a per-user credential submitting as another user (intake)
