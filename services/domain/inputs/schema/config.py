"""The shapes of a cluster configuration: nodes, tenants, priority classes, schedules,
reservations and the policy."""

from typing import Annotated

import msgspec
from msgspec import Meta

from gpuledger.events import Policy
from gpuledger.events.specs import LabelKey, LabelValue
from gpuledger.services.domain.inputs.schema.units import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_REPLICAS,
    Cores,
    Duration,
    GpuCount,
    NonNegInt,
    PositiveInt,
    Sharing,
    Size,
    Strict,
)

# ------------------------------------------------------------------ cluster configuration


class NodeDoc(Strict, kw_only=True, frozen=True):
    """One node, or `count` nodes named `<name_prefix>1..N`."""

    name: str | None = None
    """The node's name (give `name`, or `name_prefix` with `count`)."""
    name_prefix: str | None = None
    """Prefix of `count` nodes named `<prefix>1..N`."""
    count: Annotated[int, Meta(ge=1, le=MAX_NODES)] = 1
    """How many nodes this entry declares (with `name_prefix`)."""
    gpus: GpuCount = 0
    """GPUs per node."""
    model: str = "H100-80GB"
    """GPU model (`H100-80GB`, `A100-40GB`, `L40S`, ...); jobs may restrict `models`."""
    gpu_memory: Size = "80Gi"
    """Memory of each GPU."""
    cpu: Cores = 64
    """CPU cores of the node."""
    memory: Size = "512Gi"
    """Memory of the node."""
    cliques: Annotated[int, Meta(ge=1, le=MAX_GPUS_PER_NODE)] = 1
    """NVLink cliques the GPUs split into (evenly)."""
    sharing: Sharing | list[Sharing] = "exclusive"
    """One value for every GPU, or one per GPU."""
    leaf_switch: str = ""
    """Network leaf switch: a gang's members prefer nodes under one switch."""
    pool: str = "default"
    """Node pool name (informational)."""
    labels: dict[LabelKey, LabelValue] = {}
    """Node labels (`{partition: a100, zone: eu}`): a job's `node_selector` takes only nodes
    carrying every selected label with exactly that value."""
    mig_layout: list[str] = []
    """Fixed MIG layout of every `mig` GPU of the node (`[3g.40gb, 3g.40gb]`, or with starts
    `[3g.40gb@0, 3g.40gb@4]`); empty: partitioned on demand. Changed later only by a MIG
    re-geometry (policy `mig_regeometry`)."""

    def names(self) -> list[str]:
        if self.name_prefix is not None:
            return [f"{self.name_prefix}{i}" for i in range(1, self.count + 1)]
        return [self.name or ""]

    def sharing_of(self) -> list[str]:
        return list(self.sharing) if isinstance(self.sharing, list) else [self.sharing] * self.gpus


class ClusterDoc(Strict, kw_only=True, frozen=True):
    nodes: list[NodeDoc] = []
    """The nodes of the fleet (simulated agents register these; real agents report their own GPUs)."""


class UserLimitDoc(Strict, kw_only=True, frozen=True):
    """Per-user bounds (Slurm `MaxJobsPerUser`, `MaxTRESPerUser=gres/gpu`); unset: none."""

    running_jobs: NonNegInt | None = None
    """Jobs of one user placed at once (a service replica and an array task count each)."""
    gpus: Cores | None = None
    """GPUs one user's placed jobs hold at once (`2`, `500m`)."""
    submit_jobs: NonNegInt | None | msgspec.UnsetType = msgspec.UNSET
    """Jobs of one user pending and running at once (Slurm `MaxSubmitJobsPerUser`; an array task and a service replica count each): a submission past it is refused (`SubmitLimit`)."""
    array_size: NonNegInt | None | msgspec.UnsetType = msgspec.UNSET
    """Most tasks one array job of the user may have (Slurm `MaxArraySize`)."""
    weight: PositiveInt | msgspec.UnsetType = msgspec.UNSET
    """The user's share of its tenant in the queue order, against its decayed past usage (Fair Tree user shares; default 1)."""
    gpus_by_model: dict[str, Cores] = {}
    """Per GPU model, GPUs of that model one user's placed jobs hold at once (`{H100-80GB: 4}`; an override's map replaces the default's whole)."""


class SubmitLimitDoc(Strict, kw_only=True, frozen=True):
    """A tenant's bounds on its queued work as a whole; a key left out takes the built-in default (20000 jobs, arrays of 10000 tasks, 50 submissions a second), `null` means no bound."""

    submit_jobs: NonNegInt | None | msgspec.UnsetType = msgspec.UNSET
    """Jobs of the tenant pending and running at once (an array task and a service replica count each): a submission past it is refused (`SubmitLimit`)."""
    array_size: NonNegInt | None | msgspec.UnsetType = msgspec.UNSET
    """Most tasks one array job of the tenant may have."""
    submit_rate: NonNegInt | None | msgspec.UnsetType = msgspec.UNSET
    """Submissions of the tenant the intake stores per second, with a burst of as many (an array is one): a CI or user key's submission past it is refused (`SubmitLimit`) and not stored."""


class UsersDoc(Strict, kw_only=True, frozen=True):
    """`{default: {running_jobs, gpus}, overrides: {alice: {...}}}`: limits of each user of
    the tenant, and per user (a key an override leaves out is the default's). Jobs that name
    no user are not bound."""

    default: UserLimitDoc = UserLimitDoc()
    overrides: dict[str, UserLimitDoc] = {}


class TenantDoc(Strict, kw_only=True, frozen=True):
    """A tenant (Kueue: `guaranteed` ~ nominalQuota, `limit` ~ nominalQuota + borrowingLimit,
    `borrowing_limit` = borrowingLimit, `lending_limit` = lendingLimit)."""

    name: str
    """Tenant path `org/team/project` (any depth); parents are optional."""
    guaranteed: Cores = 0
    """GPUs guaranteed to the tenant (Kueue `nominalQuota`); non-preemptible work runs only within it."""
    limit: Cores | None = None
    """Most GPUs the tenant may use, borrowing included (unset: no cap)."""
    weight: NonNegInt | None = None
    """Share of idle surplus when borrowing (default 1); same as `over_quota_weight`."""
    over_quota_weight: NonNegInt | None = None
    """Alternative spelling of `weight` (KAI)."""
    guaranteed_by_model: dict[str, Cores] = {}
    """Per GPU model guarantees binding non-preemptible work on that model (`{H100-80GB: 4}`)."""
    borrowing_limit: Cores | None = None
    """GPUs it may use beyond its guarantee at most (Kueue borrowingLimit); unset: no cap."""
    lending_limit: Cores | None = None
    """GPUs of its idle guarantee others may borrow at most (Kueue lendingLimit); unset: all."""
    borrowing_limit_by_model: dict[str, Cores] = {}
    """Per GPU model of `guaranteed_by_model`: GPUs of that model it may use beyond its guarantee for it at most (`{H100-80GB: 2}`)."""
    lending_limit_by_model: dict[str, Cores] = {}
    """Per GPU model of `guaranteed_by_model`: GPUs of its idle guarantee for that model others may borrow at most (`{H100-80GB: 2}`)."""
    users: UsersDoc | None = None
    """Per-user limits: `{default: {running_jobs: 4, gpus: 8}, overrides: {alice: {gpus: 16}}}`."""
    limits: SubmitLimitDoc | None = None
    """Bounds on the tenant's queued work: `{submit_jobs: 2000, array_size: 1000}` (unset: the built-in defaults)."""


class ClassDoc(Strict, kw_only=True, frozen=True):
    """A priority class; `override: true` is required to redefine a built-in one."""

    name: str
    """Class name, used as a job's `class`."""
    value: int
    """Priority: higher is scheduled first and may preempt lower preemptible work."""
    preemptible: bool = True
    """Whether work of this class may be preempted (kept separate from `value`)."""
    slo_class: str = "batch"
    """SLO class for waits and alerts (`batch`, `interactive`, `latency-critical`)."""
    description: str = ""
    """Free text."""
    grace_s: NonNegInt | None = None
    """Checkpoint grace period of the class (unset: the policy's `default_grace_s`)."""
    allow_timeslice: bool = False
    """Whether the class's shares may go to time-sliced GPUs (interactive/dev work)."""
    default_time_limit: Duration | None = None
    """Time limit of its jobs that set none (`4h`; Slurm partition `DefaultTime`)."""
    max_time_limit: Duration | None = None
    """Longest time limit its jobs may ask for (`1d`; Slurm partition `MaxTime`): a longer
    one is rejected at admission (`TimeLimitTooLong`)."""
    override: bool = False
    """Required to redefine a built-in class (`train`, `interactive`, `build`, `inference`)."""


class TenantChangeDoc(Strict, kw_only=True, frozen=True):
    """What a schedule changes on a configured tenant; keys left out keep the value in force."""

    name: str
    guaranteed: Cores | None = None
    limit: Cores | None = None
    weight: NonNegInt | None = None


class ClassChangeDoc(Strict, kw_only=True, frozen=True):
    """What a schedule changes on a priority class (built-in or configured)."""

    name: str
    value: int | None = None
    preemptible: bool | None = None


class ServiceChangeDoc(Strict, kw_only=True, frozen=True):
    """What a schedule changes on a service (`kind: service`): its replica count."""

    job: str
    replicas: Annotated[int, Meta(ge=0, le=MAX_REPLICAS)]


class ScheduleDoc(Strict, kw_only=True, frozen=True):
    """A time-of-day policy: at every time `cron` names in `timezone`, the changes are put in
    force (published by the quota service as ordinary configuration events)."""

    name: str
    cron: str
    """Five fields: minute hour day-of-month month day-of-week (`0 8 * * 1-5`)."""
    timezone: str = "UTC"
    """IANA zone (`Europe/Berlin`, `America/New_York`); daylight saving is honoured."""
    description: str = ""
    tenants: list[TenantChangeDoc] = []
    priority_classes: list[ClassChangeDoc] = []
    services: list[ServiceChangeDoc] = []


class ReservationDoc(Strict, kw_only=True, frozen=True):
    """A maintenance window declared in the configuration (Slurm `scontrol create reservation
    flags=maint`): the same `MaintenanceScheduled` as `gpuledger node maintenance`, published
    with the configuration, once (its event id follows from its content: applying it again
    changes nothing; to move a window, cancel it and declare it under a new name). It may
    name nodes whose agents have not registered yet; one that has ended is left out."""

    name: str
    """The window's id (a subject token), unique among the reservations."""
    nodes: str
    """Names and Slurm-style ranges: `node-[1-4],gpu-a`."""
    start: str
    """An instant with its zone: `2026-12-08T06:00+01:00`, `...Z`."""
    end: str
    """As `start`; after it."""
    reason: str = ""
    """Why, in the operator's words."""
    tenant: str | None = None
    """Hold the nodes for this configured tenant (its jobs may start on them before and
    during the window; what others run there leaves at its start; not planned down)."""


def _policy_doc() -> type[msgspec.Struct]:
    """Policy as users write it: the event's fields and defaults, numbers non-negative."""
    fields = []
    for f in msgspec.structs.fields(Policy):
        typ = f.type
        if typ is int:
            typ = NonNegInt
        elif typ == (float | None):
            typ = Annotated[float, Meta(ge=0)] | None
        fields.append((f.encode_name, typ, f.default))
    return msgspec.defstruct(
        "PolicyDoc", fields, forbid_unknown_fields=True, kw_only=True, frozen=True
    )


PolicyDoc = _policy_doc()
