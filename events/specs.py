"""Value types carried inside events: job specs, resources, node inventory, placements.

All quantities are integers with the unit in the field name (`gpu_milli`, `memory_mib`,
`cpu_milli`, `_ms`, `_s`). These structs are part of the public contract: every field is
documented, and additive changes must come with a default.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

# Magnitude bounds on the integers of a job spec, checked when an event is decoded. They are
# sanity limits, not the admission rules (admission still explains a negative or zero value
# with `InvalidSpec`): they keep every product the services and the projection compute (GPUs
# x 1000 x replicas, seconds x 1000) far inside 64-bit integers.
MAX_COUNT = 1 << 20
"""Bound on counts: GPUs per member, replicas, members (about a million)."""
MAX_QUANTITY = 1 << 40
"""Bound on quantities and durations: milli-units, MiB, seconds (about 10**12)."""
Count = Annotated[int, msgspec.Meta(ge=-MAX_COUNT, le=MAX_COUNT)]
Quantity = Annotated[int, msgspec.Meta(ge=-MAX_QUANTITY, le=MAX_QUANTITY)]
LabelKey = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
"""A node label's key (`partition`, `nvidia.com/gpu.product`): 1..256 characters."""
LabelValue = Annotated[str, msgspec.Meta(max_length=256)]
"""A node label's value: at most 256 characters (may be empty)."""
RecordedEnd = Literal["failed"]
"""How an imported run ended other than completing, replayed by simulated agents."""
MAX_SELECTOR = 32
"""Most label pairs one node selector may name."""
MAX_USER_LEN = 128
UserName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_USER_LEN, pattern=r"^[A-Za-z0-9_\-:+@=,~]+$")
]
"""A user name inside a tenant: a subject token (no `.`, `*`, `>`, whitespace; 1..128)."""
DEFAULT_USER = "-"
"""The user of a job submitted without one (logs written before users existed, a tenant's CI
identity that names nobody): shown as `-` in tables, `user = '-'` in SQL."""

NodeSelector = Annotated[dict[LabelKey, LabelValue], msgspec.Meta(max_length=MAX_SELECTOR)]
"""Labels a node must carry, each key with exactly that value."""


class Resources(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ONE member of a gang needs.

    Exactly one GPU form may be used: `gpus` (whole GPUs, all inside one NVLink clique),
    `gpu_milli` (a share of one GPU, 1..999), or `mig_profile` (one MIG instance, e.g.
    `3g.40gb`). None of them means a CPU-only member.
    """

    gpus: Count = 0
    """Whole GPUs per member."""
    gpu_milli: Quantity = 0
    """Share of a single GPU in thousandths (1..999); 0 when not sharing."""
    mig_profile: str | None = None
    """MIG profile name (`1g.10gb`, `3g.40gb`, ...) for one MIG instance."""
    cpu_milli: Quantity = 0
    """CPU in thousandths of a core."""
    memory_mib: Quantity = 0
    """Host memory in MiB."""
    gpu_models: tuple[str, ...] = ()
    """Allowed GPU models (e.g. `H100-80GB`); empty means any."""
    min_gpu_memory_mib: Quantity = 0
    """Minimum memory of each GPU used."""

    def gpu_milli_total(self) -> int:
        """GPU capacity one member takes in milli-GPUs (a MIG instance counts by compute
        slices out of 7, rounded up)."""
        if self.gpus:
            return self.gpus * 1000
        if self.gpu_milli:
            return self.gpu_milli
        if self.mig_profile:
            slices = int(self.mig_profile.split("g", 1)[0]) if self.mig_profile[0].isdigit() else 7
            return -(-slices * 1000 // 7)
        return 0


class CheckpointPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a job saves its work."""

    interval_s: Quantity = 0
    """The job checkpoints on its own every `interval_s` seconds of run time (0 = never)."""
    grace_s: Quantity | None = None
    """Seconds between a checkpoint request and the forced kill; None = the class/policy default."""
    save_s: Quantity = 5
    """Seconds a checkpoint takes to save (used by simulated agents)."""


JobKind = Literal["service"] | msgspec.UnsetType
"""`service`, or unset (a gang)."""


class Spread(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A placement constraint between jobs: members of jobs of one spread `group` may hold at
    most `max_per_node` places on one node (anti-affinity with a count; traces' per-app
    instance limits). Counted over running jobs of the group; members of one gang are not
    spread among themselves."""

    group: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    """Group name (jobs with the same name share the limit)."""
    max_per_node: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]
    """At most this many members of the group's jobs on one node (>= 1)."""


DependencyCondition = Literal["succeeded", "failed", "finished", "started"]
"""When a dependency is met (Slurm `afterok`, `afternotok`, `afterany`, `after`): the job it
names `succeeded` (completed), `failed` (failed, timed out or was cancelled after it started),
`finished` (any end) or `started` (placed and started running, or ended after running)."""
MAX_ARRAY = 100_000
"""Most tasks one array job may have."""
MAX_DEPENDENCIES = 64
"""Most dependencies one job may name."""


class Dependency(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One dependency of a job on another job of its tenant."""

    job: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    """The job waited for (same tenant, submitted before)."""
    on: DependencyCondition = "succeeded"
    """What it must do: `succeeded`, `failed`, `finished` or `started`."""


class ArraySpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An array job (Slurm `--array=0-99%8`): `count` tasks, each a job of its own with the
    array's shape, ids `<array>@<index>` for index `first` .. `first + count - 1`."""

    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_ARRAY)]
    """Tasks (1 .. 100,000)."""
    max_running: Annotated[int, msgspec.Meta(ge=1, le=MAX_ARRAY)] | None = None
    """At most this many tasks placed at once (Slurm `%N`); None: no cap."""
    first: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)] = 0
    """Index of the first task (Slurm `--array=1-10`: 1)."""
    durations_s: (
        Annotated[tuple[Quantity | None, ...], msgspec.Meta(max_length=MAX_ARRAY)]
        | msgspec.UnsetType
    ) = msgspec.UNSET
    """Each task's own duration hint, in index order (`count` entries; None: the task has
    none), for imported arrays whose tasks ran for different times (`gpuledger import
    slurm`); unset: every task takes the array's `duration_s`."""
    ends: (
        Annotated[tuple[RecordedEnd | None, ...], msgspec.Meta(max_length=MAX_ARRAY)]
        | msgspec.UnsetType
    ) = msgspec.UNSET
    """Each task's recorded end, in index order (`count` entries; None: completes), like
    `JobSpec.ends` (imported arrays whose tasks failed); unset: every task takes the array's
    `ends`."""


class JobSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A job as submitted: a gang of `replicas` identical members, or (`kind: service`) a
    long-running service of `replicas` independent replicas."""

    job_id: str
    """Unique id chosen by the submitter (a subject token: no '.', '*', '>', spaces)."""
    tenant: str
    """Tenant path, `org/team/project`."""
    priority_class: str = "train"
    """Name of a configured priority class."""
    replicas: Count = 1
    """Members in the gang."""
    min_members: Count | None = None
    """Members that must be placed together (all-or-nothing); None = all replicas."""
    resources: Resources = Resources()
    """Per-member resources."""
    prefer_same_leaf: bool = True
    """Prefer placing all members under one leaf switch."""
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    """Checkpoint behaviour, used for preemption."""
    duration_s: Quantity | None = None
    """Expected run time in seconds (simulated agents run this long); None = until cancelled."""
    command: tuple[str, ...] = ()
    """Command a real node agent executes for each member."""
    min_available: Count = 0
    """Disruption budget. A gang with it is never evicted (evicting a member evicts the
    gang); a service keeps this many replicas running: preemption evicts at most
    `running - min_available` of its replicas at once (those being preempted count)."""
    kind: JobKind = msgspec.UNSET
    """`service`: `replicas` independent replicas (each placed, evicted and requeued on its
    own, job ids `<job>~<index>`), their number changed by `ServiceScaled`; unset (left out
    of the JSON): a gang. Added after v1 without a new tag: unset encodes as before."""
    spread: Spread | msgspec.UnsetType = msgspec.UNSET
    """Spread constraint (`Spread`); unset (left out of the JSON): none. Added after v1 without
    a new tag: unset encodes as before."""
    node_selector: NodeSelector | msgspec.UnsetType = msgspec.UNSET
    """Node labels every member's node must carry (`{partition: a100}`: only nodes labelled
    `partition=a100`), each key with exactly that value, like a Kubernetes `nodeSelector`; at
    most 32 pairs, keys 1..256 and values up to 256 characters. Unset (left out of the JSON) or
    empty: any node. A selector no node matches leaves the job pending `Unschedulable` ("0/120
    nodes: 120 not in partition=a100"). Added after v1 without a new tag: unset encodes as
    before."""

    depends_on: (
        Annotated[tuple[Dependency, ...], msgspec.Meta(max_length=MAX_DEPENDENCIES)]
        | msgspec.UnsetType
    ) = msgspec.UNSET
    """Jobs this one waits for (Slurm `--dependency`): it stays pending (`Dependency`) until
    every one is met; one that can no longer be met (`succeeded` of a job that failed) cancels
    it (`DependencyNeverSatisfied`), or leaves it pending where the policy says
    `dependency_never_satisfied: pend`. At most 64. Unset (left out of the JSON): none. Added
    after v1 without a new tag."""
    array: ArraySpec | msgspec.UnsetType = msgspec.UNSET
    """An array job (`ArraySpec`): the job is the parent of `count` tasks, jobs `<id>@<i>` of
    the same shape, placed, run and ended each on its own, at most `max_running` at once
    (pending reason `ArrayTaskLimit`); the parent is pending until a task is placed, running
    while any is, and ends when every task has ended. Unset (left out of the JSON): a single
    job. Added after v1 without a new tag."""
    time_limit_s: Quantity | msgspec.UnsetType = msgspec.UNSET
    """Run time limit of each run, in seconds (Slurm `--time`, Kubernetes
    `activeDeadlineSeconds`): when a run has lasted this long, its members are asked to
    checkpoint and are stopped after the class's grace; the job ends `timeout` (reason
    `TimeLimit`). Unlike `duration_s` (a hint), backfill and reservations may rely on it.
    Unset (left out of the JSON): the class's default limit, or none. Added after v1 without a
    new tag: unset encodes as before."""
    ends: RecordedEnd | msgspec.UnsetType = msgspec.UNSET
    """How a simulated run of this job ends once its `duration_s` of work is done: `failed`
    (imported history whose run failed after that much work: Slurm `FAILED`, `NODE_FAIL`,
    `OUT_OF_MEMORY`, a Kubernetes or openb pod `Failed`; docs/importers.md). Only simulated
    agents read it (a real agent runs the command); unset (left out of the JSON): the run
    completes. Added after v1 without a new tag: unset encodes as before."""
    user: UserName | msgspec.UnsetType = msgspec.UNSET
    """Who submitted the job inside its tenant (Slurm's `User` under an account): a subject
    token, at most 128 characters. Unset (left out of the JSON; old logs): `DEFAULT_USER`
    (`-`), see `submitter`. Added after v1 without a new tag: unset encodes as before."""

    def selector(self) -> tuple[tuple[str, str], ...]:
        """The node selector as sorted (key, value) pairs (empty: any node)."""
        sel = self.node_selector
        return tuple(sorted(sel.items())) if sel else ()

    @property
    def submitter(self) -> str:
        """The job's user, `DEFAULT_USER` (`-`) when the spec names none."""
        return self.user if isinstance(self.user, str) else DEFAULT_USER

    @property
    def is_service(self) -> bool:
        return self.kind == "service"

    def members_min(self) -> int:
        return self.replicas if self.min_members is None else self.min_members


UserLimitValue = Annotated[int, msgspec.Meta(ge=0, le=MAX_QUANTITY)]
UserWeight = Annotated[int, msgspec.Meta(ge=1, le=MAX_QUANTITY)]
DEFAULT_USER_WEIGHT = 1
"""A user's fair-share weight when neither its override nor the tenant's default names one."""


class UserLimit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Per-user bounds inside a tenant (Slurm `MaxJobsPerUser`, `MaxTRESPerUser=gres/gpu`);
    None: no bound. Jobs that name no user (`DEFAULT_USER`) are not bound."""

    running_jobs: UserLimitValue | None = None
    """Jobs of the user placed at once (a service replica and an array task count each)."""
    gpu_milli: UserLimitValue | None = None
    """GPU capacity the user's placed jobs hold at once, milli-GPUs."""
    submit_jobs: UserLimitValue | None | msgspec.UnsetType = msgspec.UNSET
    """Jobs of the user pending and running at once (Slurm `MaxSubmitJobsPerUser`; an array
    task and a service replica count each): a submission past it is refused (`SubmitLimit`).
    Unset (left out of the JSON) or None: no bound."""
    array_size: UserLimitValue | None | msgspec.UnsetType = msgspec.UNSET
    """Most tasks one array job of the user may have (Slurm `MaxArraySize`); unset or None: no
    bound."""
    weight: UserWeight | msgspec.UnsetType = msgspec.UNSET
    """The user's share of its tenant in the queue order (the Fair Tree's user shares;
    `services.domain.policy.user_share`): unset (left out of the JSON) is 1."""
    gpu_milli_by_model: dict[str, UserLimitValue] | msgspec.UnsetType = msgspec.UNSET
    """Per GPU model, the capacity of that model the user's placed jobs hold at once, milli-GPUs
    (Slurm `MaxTRESPerUser=gres/gpu:h100`); a model it leaves out is not bound by it. Unset
    (left out of the JSON): none."""


class UserLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tenant's per-user limits: `default` for each of its users, `overrides` per user
    (a field an override leaves unset is the default's)."""

    default: UserLimit = UserLimit()
    overrides: dict[UserName, UserLimit] = {}

    def of(self, user: str) -> UserLimit:
        """The limits in force for `user`: its override, field by field over the default."""
        o = self.overrides.get(user)
        if o is None:
            return self.default
        d = self.default
        return UserLimit(
            running_jobs=d.running_jobs if o.running_jobs is None else o.running_jobs,
            gpu_milli=d.gpu_milli if o.gpu_milli is None else o.gpu_milli,
            submit_jobs=d.submit_jobs if o.submit_jobs is msgspec.UNSET else o.submit_jobs,
            array_size=d.array_size if o.array_size is msgspec.UNSET else o.array_size,
            weight=d.weight if o.weight is msgspec.UNSET else o.weight,
            gpu_milli_by_model=(
                d.gpu_milli_by_model
                if o.gpu_milli_by_model is msgspec.UNSET
                else o.gpu_milli_by_model
            ),
        )

    def weight_of(self, user: str) -> int:
        """`user`'s fair-share weight: its override's, else the default's, else 1."""
        w = self.of(user).weight
        return DEFAULT_USER_WEIGHT if w is msgspec.UNSET else w


class SubmitLimit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tenant's bounds on the work it may have queued (issue 44: no tenant can stall the
    cluster by submitting): unset (left out of the JSON) takes the built-in default
    (`DEFAULT_SUBMIT_LIMIT`), None means no bound."""

    submit_jobs: UserLimitValue | None | msgspec.UnsetType = msgspec.UNSET
    """Jobs of the tenant pending and running at once (Slurm `MaxSubmitJobs` on an account;
    an array task and a service replica count each)."""
    array_size: UserLimitValue | None | msgspec.UnsetType = msgspec.UNSET
    """Most tasks one array job of the tenant may have (Slurm `MaxArraySize`)."""
    submit_rate: UserLimitValue | None | msgspec.UnsetType = msgspec.UNSET
    """Submissions of the tenant the intake stores per second, with a burst of as many (a
    token bucket per admission instance; an array is one submission)."""


DEFAULT_SUBMIT_JOBS = 20_000
"""A tenant's pending plus running jobs when its configuration names no `submit_jobs`."""
DEFAULT_ARRAY_SIZE = 10_000
"""A tenant's largest array when its configuration names no `array_size`."""
DEFAULT_SUBMIT_RATE = 50
"""A tenant's submissions per second at the intake when its configuration names no
`submit_rate` (below the 122 placements/s a burst drained end to end on the shared 2-core
machine, docs/benchmarks.md: one tenant alone cannot keep the control plane busy)."""


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One GPU of a node as registered by its agent."""

    index: int
    """Index on the node (0-based)."""
    uuid: str
    """NVML UUID (`GPU-...`)."""
    model: str
    """Normalised model name, e.g. `H100-80GB`."""
    memory_mib: int
    """GPU memory in MiB."""
    clique: str
    """NVLink clique id; GPUs in one clique can form one multi-GPU member."""
    sharing: str = "exclusive"
    """`exclusive`, `mig`, `mps` or `timeslice`."""
    healthy: bool = True
    """False when the agent saw ECC/XID/NVML errors: no new placements."""
    mig_layout: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    """For `sharing: mig`: the GPU instances created on it, each `<profile>@<first memory
    slice>` (`3g.40gb@4`), sorted by start; only these slots can be placed on until the
    layout is changed (`MigReconfigurationRequested` / `MigReconfigured`). Unset or empty: the
    GPU is partitioned on demand (any valid instance is carved out of free slices). Omitted
    from the JSON when unset, so inventories that never name a layout encode as before."""


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A GPU host."""

    name: str
    """Node name (a subject token)."""
    cpu_milli: int
    """Allocatable CPU in milli-cores."""
    memory_mib: int
    """Allocatable host memory in MiB."""
    gpus: tuple[GpuInfo, ...] = ()
    """The node's GPUs."""
    pool: str = "default"
    """Node pool."""
    leaf_switch: str = ""
    """Leaf switch the node hangs off (members of a gang prefer one switch)."""
    labels: dict[str, str] = {}
    """Node labels (`partition: a100`, `pool: cpu`): a job's `node_selector` takes only nodes
    carrying every selected label with exactly that value (docs/node-labels.md)."""


class MemberPlacement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where one member of a gang runs."""

    rank: int
    """Member index in the gang (0-based)."""
    node: str
    """Node name."""
    gpus: tuple[int, ...] = ()
    """GPU indices on the node (whole GPUs, or the single GPU of a share / MIG instance)."""
    gpu_milli: int | None = None
    """Share of the GPU when fractional."""
    mig_profile: str | None = None
    """MIG profile when the member uses a MIG instance."""
    mig_start: int | None = None
    """First memory slice of the MIG instance."""


class TenantShare(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tenant's quota position at the moment of a fair-share computation (milli-GPUs)."""

    tenant: str
    """Tenant path."""
    guaranteed_gpu_milli: int
    """Guaranteed quota."""
    fair_share_gpu_milli: int
    """Guaranteed plus its weighted part of the idle surplus, capped by limit and demand."""
    allocated_gpu_milli: int
    """Currently allocated."""
    demand_gpu_milli: int
    """Allocated plus pending requests."""


class GpuSample(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One utilisation sample of a GPU or MIG instance."""

    uuid: str
    """GPU UUID."""
    mig_uuid: str | None = None
    """MIG instance UUID when the sample is per instance."""
    sm_active: float | None = None
    """SM activity, 0..1 (GPM where available, else NVML utilisation rate)."""
    util_source: str | None = None
    """`gpm` or `nvml_utilization` (the latter is "a kernel was running", not SM activity)."""
    memory_used_mib: int = 0
    """GPU memory in use."""
