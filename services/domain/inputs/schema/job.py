"""The shape of a job file (and of a scenario's `submit` entry)."""

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gpuledger.events.specs import MAX_COUNT, LabelKey, LabelValue
from gpuledger.services.domain.inputs.schema.units import (
    ARRAY_RE,
    MAX_REPLICAS,
    Cores,
    Duration,
    GpuCount,
    NonNegInt,
    PositiveInt,
    Replicas,
    Seconds,
    Size,
    Strict,
)

# ------------------------------------------------------------------ jobs


class CheckpointDoc(Strict, kw_only=True, frozen=True):
    interval: Duration = 0
    """The job checkpoints on its own every `interval` of run time (0 = never)."""
    grace: Duration | None = None
    """Time between a checkpoint request and the forced kill (unset: class / policy default)."""
    save: Duration = 5
    """How long a save takes (simulated agents)."""


class SpreadDoc(Strict, kw_only=True, frozen=True):
    """Keep the job off every node where running members of jobs of the same `group`
    already number `max_per_node` (`JobSpec.spread`; binds between jobs, not within a gang)."""

    group: Annotated[str, Meta(min_length=1, max_length=256)]
    """Group name: jobs with the same group share the limit."""
    max_per_node: Annotated[int, Meta(ge=1, le=MAX_COUNT)]
    """At most this many members of the group's jobs on one node (>= 1)."""


class DependencyDoc(Strict, kw_only=True, frozen=True):
    """`{job: ID, on: succeeded | failed | finished | started}` (Slurm `afterok`,
    `afternotok`, `afterany`, `after`); `on` defaults to `succeeded`."""

    job: Annotated[str, Meta(min_length=1, max_length=256)]
    on: Literal["succeeded", "failed", "finished", "started"] = "succeeded"


class ArrayDoc(Strict, kw_only=True, frozen=True):
    """`{count: 100, max_running: 8}` (tasks `<id>@0` .. `<id>@99`, at most 8 at once);
    `first` shifts the indexes (`first: 1`: `@1` .. `@100`)."""

    count: Annotated[int, Meta(ge=1, le=100_000)]
    max_running: PositiveInt | None = None
    first: NonNegInt = 0


class JobDoc(Strict, kw_only=True, frozen=True):
    """A job file. Pairs of spellings (`id`/`job_id`, `class`/`priority_class`, ...) are
    alternatives: give one of each pair."""

    id: str | None = None
    """Job id, unique within its tenant (a subject token: no `.`, `*`, `>`, whitespace)."""
    job_id: str | None = None
    """Alternative spelling of `id`."""
    tenant: str
    """Tenant path the job runs under."""
    user: str | None = None
    """Who submits it inside the tenant (`alice`; a subject token: no `.`, `*`, `>`,
    whitespace, at most 128 characters). Unset: `-` (no user named)."""
    klass: str | None = msgspec.field(default=None, name="class")
    """Priority class (`train`, `interactive`, `build`, `inference` or a configured one)."""
    priority_class: str | None = None
    """Priority class (`class` is the short spelling; default `train`)."""
    replicas: Replicas = 1
    """Gang members (or, with `kind: service`, replicas)."""
    min_members: Replicas | None = None
    """Members that must be placed together (default: `replicas`)."""
    gpus: GpuCount = 0
    """Whole GPUs per member, all in one NVLink clique."""
    gpu: Cores | None = None
    """A share of one GPU (`500m`, `0.5`)."""
    gpu_milli: Annotated[int, Meta(ge=0, le=999)] | None = None
    """A share of one GPU in milli-units (alternative spelling of `gpu`)."""
    mig: str | None = None
    """One MIG instance per member (`3g.40gb`)."""
    mig_profile: str | None = None
    """Alternative spelling of `mig`."""
    cpu: Cores | None = None
    """CPU cores per member (`32`, `500m`)."""
    cpu_milli: NonNegInt | None = None
    """Alternative spelling of `cpu`, in milli-cores."""
    memory: Size | None = None
    """Memory per member (`256Gi`)."""
    memory_mib: NonNegInt | None = None
    """Alternative spelling of `memory`, in MiB."""
    models: list[str] | None = None
    """Allowed GPU models (unset: any)."""
    gpu_models: list[str] | None = None
    """Alternative spelling of `models`."""
    min_gpu_memory: Size = 0
    """Least memory per GPU."""
    duration: Duration | None = None
    """Run-time hint (simulated agents run this long; reservations use it)."""
    duration_s: Seconds | None = None
    """Alternative spelling of `duration`, in seconds."""
    time_limit: Duration | None = None
    """Run time limit (`2h`, `90m`; Slurm `--time`): the job is asked to checkpoint and is
    stopped when a run has lasted this long, and ends `timeout`."""
    time_limit_s: PositiveInt | None = None
    """Alternative spelling of `time_limit`, in seconds."""
    depends_on: Annotated[list[DependencyDoc], Meta(max_length=64)] | None = None
    """Jobs of the same tenant this one waits for: `[{job: prep-1, on: succeeded}]`."""
    array: ArrayDoc | Annotated[str, Meta(pattern=ARRAY_RE)] | None = None
    """An array job: `{count: 100, max_running: 8}` or Slurm's `0-99%8`."""
    checkpoint: CheckpointDoc = CheckpointDoc()
    """Checkpoint policy of the job."""
    command: str | list[str] = []
    """Command a real node agent runs for each member."""
    min_available: Annotated[int, Meta(ge=0, le=MAX_REPLICAS)] = 0
    """Disruption budget: replicas of a service that stay running during preemption."""
    prefer_same_leaf: bool = True
    """Prefer placing the gang's members under one leaf switch."""
    spread: SpreadDoc | None = None
    """`{group, max_per_node}`: at most `max_per_node` members of the group's jobs per node."""
    node_selector: dict[LabelKey, LabelValue] | None = None
    """`{key: value, ...}`: only nodes carrying every one of these labels (config `labels:`,
    importers' `partition` / pool labels) take the job's members."""
    kind: Literal["gang", "service"] = "gang"
    """`service`: `replicas` independent replicas (placed, evicted, requeued one at a time;
    `gpuledger scale` changes their number); `gang` (default): all members together."""
