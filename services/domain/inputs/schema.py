"""The one strict schema of everything a user writes: cluster configuration, scenario and
job files (YAML or JSON).

Each document shape is a msgspec Struct with `forbid_unknown_fields`; enums are closed
(`Literal`); quantities and times are non-negative with known units (`500m`, `36Gi`, `2h`);
`msgspec.convert` does the checking and its `ValidationError` paths become the project's
error lines (`tenants[1].guarantee: unknown key (did you mean 'guaranteed'?)`). On top of the
shapes: duplicates (node names, tenants, classes, job ids) and references (tenant, class, GPU
model, MIG profile, node, cancelled job) are checked against the same file.

Built-in priority classes (`train`, `interactive`, `build`, `inference`) may only be
redefined with `override: true` on the entry, so a copy-paste cannot silently change them.
Parent tenants are optional (the quota tree skips missing levels), so they are not required.
"""

from __future__ import annotations

import difflib
import functools
import re
import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, cast

import msgspec
from msgspec import Meta

from gpuledger.events import InvalidId, Policy, validate_job_id, validate_tenant, validate_token
from gpuledger.events.specs import MAX_COUNT, MAX_QUANTITY, MAX_SELECTOR, LabelKey, LabelValue
from gpuledger.services.domain.fold.config import DEFAULT_CLASSES
from gpuledger.services.domain.inputs.gpu_models import job_models, resolve_node
from gpuledger.services.domain.inputs.mig_layouts import LayoutError, parse_layout

# ------------------------------------------------------------------ quantities

_CORES_RE = r"^\d+(\.\d+)?m?$"
_SIZE_RE = r"^\d+(\.\d+)?\s*([KkMmGgTt]i?)?[Bb]?$"
_TIME_RE = r"^\d+(\.\d+)?\s*[smhdSMHD]?$"
ARRAY_RE = r"^\d+(-\d+)?(%\d+)?$"
"""Slurm's `--array` spelling: `0-99%8`, `1-10`, `7`."""
_HINTS = {
    ARRAY_RE: "use a range like 0-99%8 (at most 8 at once) or {count: 100, max_running: 8}",
    _CORES_RE: "use a count like 4, 0.5 or 500m",
    _SIZE_RE: "use a size like 512Mi, 36Gi or 1Ti (a bare number is MiB)",
    _TIME_RE: "use seconds or a duration like 90s, 10m, 2h, 1d",
}

# Upper bounds on every quantity a user document gives (docs/inputs.md), checked when the
# document is validated, before anything proportional to them (a node's GPUs, a gang's
# members) is built: a config node of a billion GPUs is one error line, not a memory error.
MAX_GPUS_PER_NODE = 1024
"""GPUs of one node, and whole GPUs of one member (a member runs on one node)."""
MAX_NODES = 100_000
"""Nodes of one configuration (`count` of a node entry, and all entries together)."""
MAX_FLEET_GPUS = 1 << 17
"""GPUs of one configuration, all nodes together: 131,072 (the seeds' envelope is 4,000)."""
MAX_REPLICAS = MAX_COUNT
"""Replicas (members) of one job: 1,048,576."""
MAX_SECONDS = 10 * 366 * 86_400
"""Durations (`duration`, checkpoint times, timeline `at`): ten years."""
MAX_FRIENDLY = MAX_QUANTITY
"""Any other quantity in its event unit (milli-cores, MiB): 2**40."""

NonNegInt = Annotated[int, Meta(ge=0, le=MAX_QUANTITY)]
PositiveInt = Annotated[int, Meta(ge=1, le=MAX_QUANTITY)]
Replicas = Annotated[int, Meta(ge=1, le=MAX_REPLICAS)]
GpuCount = Annotated[int, Meta(ge=0, le=MAX_GPUS_PER_NODE)]
Seconds = Annotated[int, Meta(ge=0, le=MAX_SECONDS)]
_Number = (
    Annotated[int, Meta(ge=0, le=MAX_QUANTITY)] | Annotated[float, Meta(ge=0, le=MAX_QUANTITY)]
)
Cores = _Number | Annotated[str, Meta(pattern=_CORES_RE, max_length=64)]
"""CPU cores or GPUs: `4`, `0.5`, `500m` (milli)."""
Size = _Number | Annotated[str, Meta(pattern=_SIZE_RE, max_length=64)]
"""Memory: `36Gi`, `512Mi`, `1Ti`; a bare number is MiB."""
Duration = (
    Seconds
    | Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
    | Annotated[str, Meta(pattern=_TIME_RE, max_length=64)]
)
"""Seconds, or `90s`, `10m`, `2h`, `1d` (at most `MAX_SECONDS`)."""
Sharing = Literal["exclusive", "mig", "mps", "timeslice"]
"""How a GPU is shared: whole (`exclusive`), MIG instances, MPS or time-sliced fractions."""


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Base of every user document shape: unknown keys are errors."""


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


_ALTERNATIVES = (
    ("id", "job_id"),
    ("class", "priority_class"),
    ("gpu", "gpu_milli"),
    ("mig", "mig_profile"),
    ("cpu", "cpu_milli"),
    ("memory", "memory_mib"),
    ("models", "gpu_models"),
    ("duration", "duration_s"),
    ("time_limit", "time_limit_s"),
    ("weight", "over_quota_weight"),
)


# ------------------------------------------------------------------ scenarios


class EntryDoc(Strict, kw_only=True, frozen=True):
    """One timeline entry: exactly one of `submit`, `cancel`, `scale`, `node_down`, at time `at`."""

    at: Duration = 0
    submit: JobDoc | None = None
    cancel: str | None = None
    scale: str | None = None
    """A service (submitted earlier with `kind: service`) whose replica count changes."""
    replicas: NonNegInt | None = None
    """The scaled service's replica count from now on."""
    node_down: str | None = None
    hold: str | None = None
    """A job (submitted earlier) held from now on (`JobHeld`, events/control.py)."""
    release: str | None = None
    """A held job released (`JobReleased`)."""
    requeue: str | None = None
    """A running job requeued (`JobRequeued`)."""
    top: str | None = None
    """A pending job moved to the top of its tenant's queue (`JobMovedToTop`)."""
    update: str | None = None
    """A job whose priority changes (`JobPriorityChanged`): with `priority` or `nice`."""
    priority: int | None = None
    """`update` entries: the new priority."""
    nice: int | None = None
    """`update` entries: the class's priority minus this."""
    cordon: str | None = None
    """A node the operator cordons (`NodeCordoned`): no new placements on it."""
    uncordon: str | None = None
    """A cordoned node uncordoned (`NodeUncordoned`)."""
    drain: str | None = None
    """A node the operator drains (`NodeCordoned` with `drain`): cordoned, and what runs
    there is moved off with checkpoint-then-evict."""
    force: bool = False
    """`drain` entries: at once, minimum runtime and non-preemptible work included."""
    deadline: Duration | None = None
    """`drain` entries: after this long, what is left is drained as with `force`."""
    by: Literal["tenant", "operator"] = "tenant"
    """Who holds, releases or requeues (`hold` / `release` / `requeue` entries)."""
    reason: str = ""
    """Why, in their words (`hold` / `release` / `requeue` entries)."""
    tenant: str | None = None
    """The cancelled job's tenant."""
    expect: Literal["rejected"] | None = None
    """`rejected`: the submitted job is meant to be refused by admission (a scenario showing
    a rejection), so its tenant / class / model / MIG references are not checked here."""


class FileDoc(Strict, kw_only=True, frozen=True):
    """A cluster configuration; with a `timeline` it is a scenario."""

    name: str | None = None
    description: str | None = None
    cluster: ClusterDoc = ClusterDoc()
    tenants: list[TenantDoc] = []
    priority_classes: list[ClassDoc] = []
    policy: PolicyDoc | None = None  # type: ignore[valid-type]  # built by defstruct from Policy
    schedules: list[ScheduleDoc] = []
    """Time-of-day policies (cron + zone) that change tenants and priority classes."""
    timeline: list[EntryDoc] | None = None
    until: Duration | None = None
    """Scenarios: stop the simulation at this virtual time (a scenario with schedules would
    otherwise wake at every fire time)."""


# ------------------------------------------------------------------ errors


class InputError(ValueError):
    """Problems in a user's document, one line each (`key.path: what is wrong`).

    `str()` joins them with newlines; `lines(file)` gives the `error: FILE: ...` lines."""

    def __init__(self, problems: list[str] | str, file: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.file = file
        super().__init__("\n".join(self.problems))

    def lines(self, file: str | None = None) -> list[str]:
        where = file or self.file
        return [f"error: {where}: {p}" if where else f"error: {p}" for p in self.problems]


_AT = re.compile(r"^(?P<msg>.*) - at `\$(?P<path>[^`]*)`$", re.S)
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _suggest(word: str, known: Iterable[object]) -> str:
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _tokens(path: str) -> list[str | int]:
    return [
        m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _TOKEN.finditer(path)
    ]


def _join(base: str, tokens: list[str | int]) -> str:
    out = base
    for t in tokens:
        out += f"[{t}]" if isinstance(t, int) else (f".{t}" if out else str(t))
    return out


def _flat(t: Any) -> list[Any]:
    """A msgspec.inspect type with Metadata and unions opened up, as a list."""
    mi = msgspec.inspect
    if isinstance(t, mi.Metadata):
        return _flat(t.type)
    if isinstance(t, mi.UnionType):
        return [x for u in t.types for x in _flat(u)]
    return [t]


def _type_at(typ: Any, tokens: list[str | int]) -> list[Any]:
    mi = msgspec.inspect
    cur = [mi.type_info(typ)]
    for tok in tokens:
        nxt: list[Any] = []
        for t in (x for c in cur for x in _flat(c)):
            if isinstance(tok, int) and isinstance(t, (mi.ListType, mi.VarTupleType)):
                nxt.append(t.item_type)
            elif isinstance(tok, str) and isinstance(t, mi.StructType):
                nxt += [f.type for f in t.fields if f.encode_name == tok]
            elif isinstance(tok, str) and isinstance(t, mi.DictType):
                nxt.append(t.value_type)
        cur = nxt
    return [x for c in cur for x in _flat(c)]


def _value_at(raw: Any, tokens: list[str | int]) -> Any:
    for tok in tokens:
        try:
            raw = raw[tok]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _problem(exc: msgspec.ValidationError, raw: Any, typ: Any, base: str) -> str:
    """One error line (without the file) for a msgspec validation error."""
    mi = msgspec.inspect
    m = _AT.match(str(exc))
    msg, tokens = (m.group("msg"), _tokens(m.group("path"))) if m else (str(exc), [])
    here = _type_at(typ, tokens)
    value = _value_at(raw, tokens)
    unknown = re.match(r"Object contains unknown field `(.*)`", msg)
    if unknown:
        key = unknown.group(1)
        known = [f.encode_name for t in here if isinstance(t, mi.StructType) for f in t.fields]
        hint = _suggest(key, known) or (f" (known keys: {', '.join(known)})" if known else "")
        return f"{_join(base, tokens + [key])}: unknown key{hint}"
    missing = re.match(r"Object missing required field `(.*)`", msg)
    if missing:
        return f"{_join(base, tokens) or '(top level)'}: missing required key {missing.group(1)!r}"
    where = _join(base, tokens) or "(top level)"
    if msg.startswith("Invalid enum value"):
        allowed = [v for t in here if isinstance(t, mi.LiteralType) for v in t.values]
        return f"{where}: {value!r} is not one of {', '.join(map(str, allowed))}{_suggest(value, allowed)}"
    bound = re.match(r"Expected `(int|float)` (>=|<=) (\S+)", msg)
    if bound:
        return f"{where}: must be {bound.group(2)} {bound.group(3)} (got {value!r})"
    if "matching regex" in msg:
        patterns = [t.pattern for t in here if isinstance(t, mi.StrType) and t.pattern]
        hint = next((_HINTS[p] for p in patterns if p in _HINTS), "not a known form")
        return f"{where}: cannot read {value!r}: {hint}"
    return f"{where}: {msg[0].lower() + msg[1:]}" + (
        f" (got {value!r})" if value is not None else ""
    )


def convert(raw: Any, typ: Any, base: str, problems: list[str]) -> Any:
    """`msgspec.convert(raw, typ)`, or None with the problem appended."""
    try:
        return msgspec.convert(raw, typ)
    except msgspec.ValidationError as exc:
        problems.append(_problem(exc, raw, typ, base))
        return None


def _struct_of(typ: Any) -> type[msgspec.Struct] | None:
    """The Struct type in `typ` (`X` or `X | None`), else None."""
    for t in (typ, *getattr(typ, "__args__", ())):
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            return t
    return None


def _item_of(typ: Any) -> Any:
    """The item type of `list[X]` (or `list[X] | None`), else None."""
    for t in (typ, *getattr(typ, "__args__", ())):
        if getattr(t, "__origin__", None) is list:
            return t.__args__[0]
    return None


def _dict_of(typ: Any) -> Any:
    """`dict[K, V]` in `typ` (`dict[K, V]`, `dict[K, V] | None`, either `Annotated`), else
    None."""
    for t in (typ, *getattr(typ, "__args__", ())):
        while typing.get_origin(t) is Annotated:
            t = typing.get_args(t)[0]
        if typing.get_origin(t) is dict:
            return t
    return None


@functools.cache
def _fields(struct: type[msgspec.Struct]) -> dict[str, Any]:
    return {f.encode_name: f for f in msgspec.structs.fields(struct)}


def collect(raw: Any, typ: Any, base: str, problems: list[str]) -> Any:
    """`msgspec.convert(raw, typ)`; when that fails, mappings are walked key by key and lists
    item by item, so a document reports every bad key and entry, not only the first."""
    try:
        return msgspec.convert(raw, typ)
    except msgspec.ValidationError:
        pass
    struct, item = _struct_of(typ), _item_of(typ)
    before = len(problems)
    if struct is not None and isinstance(raw, dict):
        fields = _fields(struct)
        for key, value in raw.items():
            f = fields.get(key)
            if f is None:
                hint = _suggest(key, fields) or f" (known keys: {', '.join(fields)})"
                problems.append(f"{_p(base, str(key))}: unknown key{hint}")
            else:
                collect(value, f.type, _p(base, key), problems)
        for name, f in fields.items():
            if f.required and name not in raw:
                problems.append(f"{base or '(top level)'}: missing required key {name!r}")
    elif item is not None and isinstance(raw, list):
        for i, v in enumerate(raw):
            collect(v, item, f"{base}[{i}]", problems)
    elif (mapping := _dict_of(typ)) is not None and isinstance(raw, dict):
        key_type, value_type = typing.get_args(mapping)
        for k, v in raw.items():
            bad_key: list[str] = []
            convert(k, key_type, "", bad_key)
            problems += [
                f"{base or '(top level)'}: key {k!r}: {p.split(': ', 1)[1]}" for p in bad_key
            ]
            collect(v, value_type, _p(base, str(k)), problems)
    if len(problems) > before:
        return None
    return convert(raw, typ, base, problems)


# ------------------------------------------------------------------ validation


def kind_of(doc: Any) -> str:
    """`job` for a job document, `scenario` when it has a timeline, else `config`."""
    if (
        isinstance(doc, dict)
        and ("tenant" in doc or "id" in doc or "job_id" in doc)
        and "tenants" not in doc
    ):
        return "job"
    if isinstance(doc, dict) and "timeline" in doc:
        return "scenario"
    return "config"


def yaml_on(doc: Any) -> Any:
    """`doc` with the key `on` of every `depends_on` entry restored: YAML 1.1 (PyYAML) reads
    a bare `on:` key as the boolean True, so `{job: a, on: failed}` arrives as
    `{'job': 'a', True: 'failed'}`. Nothing else changes."""
    if isinstance(doc, list):
        return [yaml_on(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for k, v in doc.items():
        if k == "depends_on" and isinstance(v, list):
            v = [
                {("on" if key is True and "on" not in d else key): x for key, x in d.items()}
                if isinstance(d, dict)
                else d
                for d in v
            ]
        out[k] = yaml_on(v) if isinstance(v, dict | list) else v
    return out


def validate_file(doc: Any) -> FileDoc:
    """A cluster configuration or scenario, fully checked; raises InputError."""
    problems: list[str] = []
    if doc is not None and not isinstance(doc, dict):
        raise InputError(f"(top level): expected a mapping of keys, got {type(doc).__name__}")
    doc = yaml_on(doc)
    parsed = collect({} if doc is None else doc, FileDoc, "", problems)
    if parsed is not None:
        _check_file(parsed, problems)
    if problems:
        raise InputError(problems)
    return cast(FileDoc, parsed)


def validate_job(doc: Any, base: str = "") -> JobDoc:
    """A job document, checked on its own (references need a configuration); raises InputError."""
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise InputError(f"{base or '(top level)'}: a job must be a mapping of fields")
    job = collect(yaml_on(doc), JobDoc, base, problems)
    if job is not None:
        _check_job(job, base, problems)
    if problems:
        raise InputError(problems)
    return cast(JobDoc, job)


def _p(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


def _check_job(job: JobDoc, base: str, problems: list[str]) -> None:
    for a, b in _ALTERNATIVES:
        fa, fb = ("klass" if a == "class" else a), b
        if getattr(job, fa, None) is not None and getattr(job, fb, None) is not None:
            problems.append(f"{_p(base, b)}: give either {a!r} or {b!r}, not both")
    if (job.id or job.job_id) in (None, ""):
        problems.append(f"{base or '(top level)'}: missing required key 'id'")
    else:
        _valid_id(
            _p(base, "id" if job.id else "job_id"),
            lambda: validate_job_id(job.id or job.job_id or ""),
            problems,
        )
    _valid_id(_p(base, "tenant"), lambda: validate_tenant(job.tenant), problems)
    forms = [
        k
        for k, v in (
            ("gpus", job.gpus),
            ("gpu", job.gpu or job.gpu_milli),
            ("mig", job.mig or job.mig_profile),
        )
        if v
    ]
    if len(forms) > 1:
        problems.append(f"{_p(base, forms[1])}: use only one of gpus, gpu (a share) and mig")
    if job.node_selector is not None and len(job.node_selector) > MAX_SELECTOR:
        problems.append(
            f"{_p(base, 'node_selector')}: at most {MAX_SELECTOR} labels "
            f"(got {len(job.node_selector)})"
        )
    if job.kind == "service" and job.min_members is not None:
        problems.append(
            f"{_p(base, 'min_members')}: a service's replicas are independent; "
            "leave min_members out (kind: service)"
        )
    if job.kind == "service" and job.min_available > job.replicas:
        problems.append(
            f"{_p(base, 'min_available')}: must be <= replicas ({job.replicas}), "
            f"got {job.min_available}"
        )
    if job.min_members is not None and job.min_members > job.replicas:
        problems.append(
            f"{_p(base, 'min_members')}: must be <= replicas ({job.replicas}), got {job.min_members}"
        )
    if job.gpu is not None:
        from gpuledger.services.domain.inputs.quantities import milli

        share = milli("gpu", job.gpu)
        if not 0 < share < 1000:
            problems.append(
                f"{_p(base, 'gpu')}: a GPU share must be within 1m..999m (got {job.gpu!r}); "
                "use `gpus` for whole GPUs"
            )


def _milli(value: Any) -> int:
    from gpuledger.services.domain.inputs.quantities import milli

    return milli("gpus", value)


def _check_model_limits(i: int, t: TenantDoc, problems: list[str]) -> None:
    """Per-model lending and borrowing limits name models the tenant has a per-model
    guarantee for (the same model spelled another way counts), and a per-model lending limit
    is at most that guarantee."""
    from gpuledger.services.domain.inputs.gpu_models import resolve

    guaranteed = {resolve(m): v for m, v in t.guaranteed_by_model.items()}
    for key, limits in (
        ("borrowing_limit_by_model", t.borrowing_limit_by_model),
        ("lending_limit_by_model", t.lending_limit_by_model),
    ):
        for m, v in limits.items():
            g = guaranteed.get(resolve(m))
            if g is None:
                known = sorted(guaranteed)
                problems.append(
                    f"tenants[{i}].{key}.{m}: per-model limits apply where guarantees are per "
                    f"model: add {m} to guaranteed_by_model"
                    + (f" (it has {', '.join(known)})" if known else "")
                )
            elif key == "lending_limit_by_model" and _milli(v) > _milli(g):
                problems.append(
                    f"tenants[{i}].{key}.{m}: {v} GPUs is more than the tenant's guarantee for "
                    f"{m} ({g}); a tenant lends at most its unused guarantee"
                )


def _valid_id(path: str, check: Callable[[], object], problems: list[str]) -> None:
    try:
        check()
    except InvalidId as exc:
        problems.append(f"{path}: {exc}")


def _dups(names: list[tuple[str, str]], what: str, problems: list[str]) -> None:
    seen: dict[str, str] = {}
    for path, name in names:
        if name in seen:
            problems.append(f"{path}: duplicate {what} {name!r} (first at {seen[name]})")
        else:
            seen[name] = path


def _check_file(f: FileDoc, problems: list[str]) -> None:
    """Cross-field checks of a configuration or scenario, section by section in file order
    (the order of `problems` is part of the message a user reads)."""
    if not _check_fleet_size(f, problems):
        return
    node_names, models = _check_nodes(f, problems)
    _dups(node_names, "node name", problems)
    _dups([(f"tenants[{i}].name", t.name) for i, t in enumerate(f.tenants)], "tenant", problems)
    _dups(
        [(f"priority_classes[{i}].name", c.name) for i, c in enumerate(f.priority_classes)],
        "priority class",
        problems,
    )
    _check_classes(f, problems)
    _check_tenants(f, models, problems)
    _check_schedules(f, problems)
    _check_timeline(f, {name for _, name in node_names}, problems)


def _check_fleet_size(f: FileDoc, problems: list[str]) -> bool:
    """False (with a problem) when the declared fleet is too large to build at all."""
    declared = sum(n.count if n.name_prefix is not None else 1 for n in f.cluster.nodes)
    gpus = sum((n.count if n.name_prefix is not None else 1) * n.gpus for n in f.cluster.nodes)
    if declared > MAX_NODES or gpus > MAX_FLEET_GPUS:  # checked before any node is built
        problems.append(
            f"cluster.nodes: {declared:,} nodes with {gpus:,} GPUs; at most {MAX_NODES:,} nodes"
            f" and {MAX_FLEET_GPUS:,} GPUs (docs/inputs.md)"
        )
        return False
    return True


def _check_nodes(f: FileDoc, problems: list[str]) -> tuple[list[tuple[str, str]], set[str]]:
    """`cluster.nodes`: each entry's own rules; returns (path, name) of every node and the GPU
    models present."""
    node_names: list[tuple[str, str]] = []
    models: set[str] = set()
    for i, n in enumerate(f.cluster.nodes):
        path = f"cluster.nodes[{i}]"
        if (n.name is None) == (n.name_prefix is None):
            problems.append(f"{path}: give exactly one of 'name' and 'name_prefix'")
        if n.name_prefix is None and n.count != 1:
            problems.append(f"{path}.count: 'count' needs 'name_prefix'")
        if isinstance(n.sharing, list) and len(n.sharing) != n.gpus:
            problems.append(f"{path}.sharing: {len(n.sharing)} entries for {n.gpus} GPUs")
        node_names += [(path, name) for name in n.names()]
        for name in n.names()[:1]:
            _valid_id(
                f"{path}.{'name' if n.name is not None else 'name_prefix'}",
                functools.partial(validate_token, "node name", name),
                problems,
            )
        if n.gpus:
            models.add(_node_model(n))
        if n.mig_layout:
            if "mig" not in n.sharing_of():
                problems.append(f"{path}.mig_layout: the node has no GPU with sharing 'mig'")
            try:
                parse_layout(n.model, n.mig_layout)
            except LayoutError as err:
                problems.append(f"{path}.mig_layout: {err}")
    return node_names, models


def _check_classes(f: FileDoc, problems: list[str]) -> None:
    """`priority_classes`: a built-in name is redefined only with `override: true`."""
    builtin = {c.name: c for c in DEFAULT_CLASSES}
    for i, c in enumerate(f.priority_classes):
        if c.name in builtin and not c.override:
            problems.append(
                f"priority_classes[{i}].name: {c.name!r} is a built-in priority class (value "
                f"{builtin[c.name].value}); add `override: true` to redefine it, or choose another name"
            )


def _check_tenants(f: FileDoc, models: set[str], problems: list[str]) -> None:
    """`tenants`: names, weights, lending limits, and per-model guarantees of present models."""
    for i, t in enumerate(f.tenants):
        _valid_id(f"tenants[{i}].name", functools.partial(validate_tenant, t.name), problems)
        if t.weight is not None and t.over_quota_weight is not None:
            problems.append(
                f"tenants[{i}].over_quota_weight: give either 'weight' or 'over_quota_weight', not both"
            )
        if t.lending_limit is not None and _milli(t.lending_limit) > _milli(t.guaranteed):
            problems.append(
                f"tenants[{i}].lending_limit: {t.lending_limit} GPUs is more than the tenant's "
                f"guarantee ({t.guaranteed}); a tenant lends at most its unused guarantee"
            )
        _check_model_limits(i, t, problems)
        for m in t.guaranteed_by_model:
            if models and not set(job_models((m,))) & models:
                problems.append(
                    f"tenants[{i}].guaranteed_by_model.{m}: no GPU of model {m!r} in the cluster"
                    f"{_suggest(m, models)}"
                )


def _check_timeline(f: FileDoc, nodes: set[str], problems: list[str]) -> None:
    """`timeline`: each entry's shape, then what it names (a job submitted earlier, a service,
    a node of the cluster)."""
    submitted: dict[str, str] = {}
    services: set[str] = set()
    arrays: set[str] = set()
    for i, e in enumerate(f.timeline or []):
        path = f"timeline[{i}]"
        if not _check_entry_shape(e, path, problems):
            continue
        if e.submit is not None:
            seen = (submitted, services, arrays)
            _check_submit(e.submit, e.expect, f"{path}.submit", f, seen, problems)
        elif (
            e.cancel is not None
            and e.cancel not in submitted
            and e.cancel.rpartition("@")[0] not in arrays  # a task of an array
        ):
            problems.append(
                f"{path}.cancel: job {e.cancel!r} is not submitted earlier in the timeline"
                f"{_suggest(e.cancel, submitted)}"
            )
        elif (named := e.hold or e.release or e.requeue or e.update or e.top) is not None and (
            named not in submitted
        ):
            verb = "hold" if e.hold else "release" if e.release else "requeue"
            verb = "update" if e.update else "top" if e.top else verb
            problems.append(
                f"{path}.{verb}: job {named!r} is not submitted "
                f"earlier in the timeline{_suggest(named, submitted)}"
            )
        elif e.scale is not None and e.scale not in services:
            problems.append(
                f"{path}.scale: no service {e.scale!r} (kind: service) submitted earlier "
                f"in the timeline{_suggest(e.scale, services)}"
            )
        elif (
            (node := e.cordon or e.uncordon or e.drain) is not None
            and nodes
            and (node not in nodes)
        ):
            verb = "cordon" if e.cordon else "uncordon" if e.uncordon else "drain"
            problems.append(
                f"{path}.{verb}: no node {node!r} in the cluster{_suggest(node, nodes)}"
            )
        elif e.node_down is not None and nodes and e.node_down not in nodes:
            problems.append(
                f"{path}.node_down: no node {e.node_down!r} in the cluster{_suggest(e.node_down, nodes)}"
            )


ENTRY_ACTIONS = (
    "submit",
    "cancel",
    "scale",
    "node_down",
    "hold",
    "release",
    "requeue",
    "update",
    "top",
    "cordon",
    "uncordon",
    "drain",
)


def _check_entry_shape(e: EntryDoc, path: str, problems: list[str]) -> bool:
    """One timeline entry's keys belong together; False when it has not exactly one action
    (nothing more is checked of it then)."""
    actions = [k for k in ENTRY_ACTIONS if getattr(e, k) is not None]
    if len(actions) != 1:
        problems.append(
            f"{path}: an entry needs exactly one of {', '.join(ENTRY_ACTIONS)}"
            + (f" (got {', '.join(actions)})" if actions else "")
        )
        return False
    if e.expect is not None and e.submit is None:
        problems.append(f"{path}.expect: 'expect: rejected' belongs to a submit entry")
    if e.tenant is not None and e.cancel is None:
        problems.append(
            f"{path}.tenant: 'tenant' belongs to a cancel entry (a job names its tenant inside submit)"
        )
    if (e.replicas is None) != (e.scale is None):
        problems.append(
            f"{path}.{'replicas' if e.scale is None else 'scale'}: 'scale' and "
            "'replicas' go together (scale: SERVICE, replicas: N)"
        )
    return True


def _check_submit(
    j: JobDoc,
    expect: str | None,
    jp: str,
    f: FileDoc,
    seen: tuple[dict[str, str], set[str], set[str]],
    problems: list[str],
) -> None:
    """A submit entry: the job on its own, its id unique, then (unless it expects a rejection)
    its references to the configuration. Records it in `seen` (submitted, services, arrays)."""
    submitted, services, arrays = seen
    before = len(problems)
    _check_job(j, jp, problems)
    if len(problems) > before:
        return
    job_id = j.id or j.job_id or ""
    if job_id in submitted:
        problems.append(f"{jp}.id: duplicate job id {job_id!r} (first at {submitted[job_id]})")
    submitted.setdefault(job_id, jp)
    if j.kind == "service":
        services.add(job_id)
    if j.array is not None:
        arrays.add(job_id)
    if expect != "rejected":
        check_references(j, jp, f, problems)


def _check_schedules(f: FileDoc, problems: list[str]) -> None:
    from gpuledger.services.domain.policy.schedules import cron_problem, zone

    _dups(
        [(f"schedules[{i}].name", s.name) for i, s in enumerate(f.schedules)], "schedule", problems
    )
    tenants = {t.name for t in f.tenants}
    classes = {c.name for c in DEFAULT_CLASSES} | {c.name for c in f.priority_classes}
    for i, s in enumerate(f.schedules):
        path = f"schedules[{i}]"
        _valid_id(
            f"{path}.name", functools.partial(validate_token, "schedule name", s.name), problems
        )
        try:
            zone(s.timezone)
        except ValueError:
            import zoneinfo

            problems.append(
                f"{path}.timezone: unknown time zone {s.timezone!r} (an IANA name such as "
                f"Europe/Berlin){_suggest(s.timezone, zoneinfo.available_timezones())}"
            )
        else:
            problem = cron_problem(s.cron, s.timezone)
            if problem is not None:
                problems.append(f"{path}.cron: {problem}")
        if not s.tenants and not s.priority_classes and not s.services:
            problems.append(
                f"{path}: a schedule changes nothing (give tenants, priority_classes or services)"
            )
        for j, svc in enumerate(s.services):
            try:
                validate_token("job id", svc.job)
            except ValueError as err:
                problems.append(f"{path}.services[{j}].job: {err}")
        for j, t in enumerate(s.tenants):
            if t.name not in tenants:
                problems.append(
                    f"{path}.tenants[{j}].name: tenant {t.name!r} is not configured"
                    f"{_suggest(t.name, tenants)}"
                )
            if t.guaranteed is None and t.limit is None and t.weight is None:
                problems.append(
                    f"{path}.tenants[{j}]: changes nothing (give guaranteed, limit or weight)"
                )
        for j, c in enumerate(s.priority_classes):
            if c.name not in classes:
                problems.append(
                    f"{path}.priority_classes[{j}].name: priority class {c.name!r} is not configured"
                    f"{_suggest(c.name, classes)}"
                )
            if c.value is None and c.preemptible is None:
                problems.append(
                    f"{path}.priority_classes[{j}]: changes nothing (give value or preemptible)"
                )
    if f.until is not None and f.timeline is None:
        problems.append("until: 'until' belongs to a scenario (a file with a timeline)")


def check_references(j: JobDoc, jp: str, f: FileDoc, problems: list[str]) -> None:
    """A job's tenant, class, GPU models and MIG profile against a configuration `f` (its
    tenants, built-in and configured classes, and declared nodes; no nodes: not checked)."""
    from gpuledger.services.domain.policy.shapes import profiles_of
    from gpuledger.services.placement.mig import profile_for

    tenants = {t.name for t in f.tenants}
    classes = {c.name for c in DEFAULT_CLASSES} | {c.name for c in f.priority_classes}
    models = {_node_model(n) for n in f.cluster.nodes if n.gpus}
    mig_models = {_node_model(n) for n in f.cluster.nodes if n.gpus and "mig" in n.sharing_of()}
    if tenants and j.tenant not in tenants:
        problems.append(
            f"{_p(jp, 'tenant')}: tenant {j.tenant!r} is not configured{_suggest(j.tenant, tenants)}"
        )
    cls = j.klass or j.priority_class
    if cls is not None and cls not in classes:
        key = "class" if j.klass else "priority_class"
        problems.append(
            f"{_p(jp, key)}: priority class {cls!r} is not configured{_suggest(cls, classes)}"
        )
    for m in j.models or j.gpu_models or []:
        if models and not set(job_models((m,))) & models:
            key = "models" if j.models else "gpu_models"
            problems.append(
                f"{_p(jp, key)}: no GPU of model {m!r} in the cluster{_suggest(m, models)}"
            )
    _check_selector(j, jp, f, problems)
    mig = j.mig or j.mig_profile
    if mig and models and not any(profile_for(m, mig) for m in mig_models):
        offered = sorted({p for m in mig_models for p in profiles_of(m)})
        hint = _suggest(mig, offered) or (
            f" (offered: {', '.join(offered)})" if offered else " (no MIG GPUs)"
        )
        problems.append(
            f"{_p(jp, 'mig' if j.mig else 'mig_profile')}: MIG profile {mig!r} is offered by no "
            f"GPU of the cluster{hint}"
        )


def _node_model(n: NodeDoc) -> str:
    """A declared node's GPU model in the vocabulary (`gpu_models.resolve_node`)."""
    from gpuledger.services.domain.inputs.quantities import mebibytes

    try:
        memory = mebibytes("gpu_memory", n.gpu_memory)
    except ValueError:
        memory = 0
    return resolve_node(n.model, memory)


def _check_selector(j: JobDoc, jp: str, f: FileDoc, problems: list[str]) -> None:
    """A job's `node_selector` against the configuration's nodes (no nodes: not checked): some
    node must carry every selected label, else the job could never run."""
    if not j.node_selector or not f.cluster.nodes:
        return
    if any(all(n.labels.get(k) == v for k, v in j.node_selector.items()) for n in f.cluster.nodes):
        return
    seen = sorted({f"{k}={v}" for n in f.cluster.nodes for k, v in n.labels.items()})
    wanted = ",".join(f"{k}={v}" for k, v in sorted(j.node_selector.items()))
    absent = [
        f"{k}={v}"
        for k, v in sorted(j.node_selector.items())
        if not any(n.labels.get(k) == v for n in f.cluster.nodes)
    ]
    missing = absent[0] if absent else None
    hint = _suggest(missing, seen) if missing else ""
    problems.append(
        f"{_p(jp, 'node_selector')}: no node of the cluster carries {wanted}{hint}"
        + (f" (node labels: {', '.join(seen)})" if seen and not hint else "")
    )


def file_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of configuration/scenario files and of job files, for
    editors (yaml-language-server: `# yaml-language-server: $schema=...`)."""
    (file_s, job_s), defs = msgspec.json.schema_components(
        [FileDoc, JobDoc], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpuledger input files",
        "description": "A cluster configuration / scenario file, or a job file.",
        "anyOf": [file_s, job_s],
        "$defs": defs,
    }
