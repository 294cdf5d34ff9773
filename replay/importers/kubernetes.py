"""Import a Kubernetes cluster's pods (and events, nodes, Kueue workloads) as a log.

The dumps (kubectl's JSON Lists; read item by item, never whole):

    kubectl get pods -A -o json > pods.json
    kubectl get events -A -o json > events.json          # optional
    kubectl get nodes -o json > nodes.json               # optional (else --config-nodes)
    kubectl get workloads.kueue.x-k8s.io -A -o json > workloads.json   # optional (Kueue)

Rules:

- one pod = one job member. Pods of one gang become one job (a gang of `replicas` = its pods):
  an indexed Job (`batch.kubernetes.io/job-completion-index` annotation; gang `<job-name>`),
  a JobSet (`jobset.sigs.k8s.io/jobset-name`), a PodGroup (`scheduling.x-k8s.io/pod-group`,
  `pod-group.scheduling.sigs.k8s.io`, Kueue's `kueue.x-k8s.io/pod-group-name`). Members of a
  gang whose resource shapes differ are imported as one job each (counted as `gangs split`).
  Other pods are jobs of their own (job id = pod name; a gang's id is its name; both
  prefixed `<namespace>~` when `--namespaced-ids`). Pods of a DaemonSet and mirror pods are
  skipped (they run on every node and are not scheduled).
- per pod: the sum of its containers' requests (limits when a request is missing) or the
  largest init container's, whichever is larger: `nvidia.com/gpu` -> whole GPUs,
  `nvidia.com/mig-<profile>` (one instance) -> a MIG member, `cpu`, `memory`;
- times: submit = `metadata.creationTimestamp` (a gang: its earliest); start = the earliest
  container start (else `status.startTime`); end = the latest container `finishedAt`, else
  for an evicted or preempted pod the time of its `Evicted` / `Preempted` event (or its
  last condition change); a pod that never started but has a `deletionTimestamp` is
  cancelled then. A gang starts when its last member started and ends when its last ended.
- tenant = namespace, or with `tenant_from: queue` `namespace/<LocalQueue>` (the pod's
  `kueue.x-k8s.io/queue-name` label, else its Workload's `spec.queueName`); class =
  `spec.priorityClassName` (else the Workload's), value = the pod's `spec.priority` when the
  class is not defined by the mapping, preemptible. Pods without a class get `default` (0).
- user = the pod's `gpuledger.io/user`, `runai/user` or `user` annotation (else label), the
  first one set (a gang: its first member's); characters a user name cannot hold become `_`;
  none: `-`.
- nodes: `status.capacity` (`cpu`, `memory`, `nvidia.com/gpu`, `nvidia.com/mig-*`), model
  from the `nvidia.com/gpu.product` label, GPU memory from `nvidia.com/gpu.memory` (MiB) or
  the model table; MIG instances (`nvidia.com/mig-<profile>.count` labels of GPU feature
  discovery's mixed strategy, else the `nvidia.com/mig-<profile>` capacity) become MIG GPUs
  with fixed layouts (`replay.importers.migmap`; `nvidia.com/gpu.count` less the whole GPUs is
  the number of MIG GPUs the layouts must fit in, else a warning and on-demand GPUs). Under
  the single strategy (`nvidia.com/mig.strategy: single`, product `<GPU>-MIG-<profile>`) the
  node's `nvidia.com/gpu` are instances of that profile, and so are the GPUs requested by
  pods placed on it (`spec.nodeName`; one per pod, else a skipped row). Unschedulable nodes are kept. A node keeps the labels whose
  keys some pod selects on (below), no others.
- node selection: a pod's `spec.nodeSelector` and its required node affinity (one term of
  `In` expressions with one value each; the rest is left out and counted as
  `node_affinity_ignored`: `replay.importers.labels.pod_selector`) become the job's
  `node_selector`; jobs whose selector no node carries are counted as
  `node_selector_unmatched`.
- events: `Preempted` and `Evicted` (pods) are counted in the summary (what the recorded
  scheduler did; the replay decides afresh) and date the end of pods they ended.

Memory: the pods of one namespace's gangs are buffered until the namespace ends (kubectl
lists pods sorted by namespace); events keep one time per preempted/evicted pod; workloads
one (queue, class) per workload.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from gpuledger import events as ev
from gpuledger.replay.importers.common import (
    ImportLog,
    ObservedJob,
    SkipLog,
    TraceImportError,
    gpu_memory_mib,
    head_events,
)
from gpuledger.replay.importers.jsonstream import iter_items
from gpuledger.replay.importers.labels import SelectedKeys, pod_selector
from gpuledger.replay.importers.mapping import Naming, load_mapping, token
from gpuledger.replay.importers.migmap import is_profile, mig_gpus
from gpuledger.services.domain.inputs.gpu_models import Vocabulary
from gpuledger.services.domain.inputs.gpu_models import gpu_memory_mib as model_memory_mib

PRODUCER = "import/kubernetes"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
GANG_LABELS = (
    "jobset.sigs.k8s.io/jobset-name",
    "scheduling.x-k8s.io/pod-group",
    "pod-group.scheduling.sigs.k8s.io",
    "kueue.x-k8s.io/pod-group-name",
)
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
INDEX_ANNOTATIONS = ("batch.kubernetes.io/job-completion-index",)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
USER_KEYS = ("gpuledger.io/user", "runai/user", "user")
"""Annotations (then labels) naming who submitted a pod, the first one set wins (a gang: its
first member's); none: the job's user is `-`."""

_QTY = re.compile(r"^([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {
    "": 1,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def quantity(text: Any) -> float:
    """A Kubernetes resource quantity (`500m`, `4Gi`, `1e9`, `2`) as a number."""
    m = _QTY.match(str(text).strip())
    if not m:
        raise ValueError(f"cannot read quantity {text!r}")
    num, suffix = float(m.group(1)), m.group(2)
    if suffix in _BIN:
        return num * _BIN[suffix]
    if suffix in _DEC:
        return num * _DEC[suffix]
    raise ValueError(f"cannot read quantity {text!r} (unknown suffix {suffix!r})")


def ts(text: Any) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() * 1000)


def _container_total(c: dict) -> dict[str, float]:
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    out: dict[str, float] = {}
    for k in set(req) | set(lim):
        out[k] = quantity(req[k] if k in req else lim[k])
    return out


def _pod_totals(spec: dict) -> dict[str, float]:
    """What the pod asks for per resource, as the scheduler counts it: its containers' sum,
    raised to any one init container's (they run one at a time, before the others)."""
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in _container_total(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _container_total(c).items():
            total[k] = max(total.get(k, 0), v)
    return total


def pod_resources(spec: dict) -> ev.Resources:
    total = _pod_totals(spec)
    gpus = int(total.get(GPU, 0))
    migs = {
        k[len(MIG_PREFIX) :]: int(v) for k, v in total.items() if k.startswith(MIG_PREFIX) and v
    }
    if migs and gpus:
        raise ValueError("asks for whole GPUs and MIG instances at once")
    if len(migs) > 1 or any(v > 1 for v in migs.values()):
        raise ValueError(
            f"asks for more than one MIG instance ({', '.join(f'{k}={v}' for k, v in migs.items())})"
        )
    return ev.Resources(
        gpus=gpus,
        mig_profile=next(iter(migs), None),
        cpu_milli=int(-(-total.get("cpu", 0) * 1000 // 1)),
        memory_mib=int(-(-total.get("memory", 0) // 2**20)),
        gpu_models=(),
    )


def read_nodes(
    path: str | Path,
    progress=None,
    vocab: Vocabulary | None = None,
    notes: list[str] | None = None,
    single_nodes: dict[str, str] | None = None,
) -> tuple[ev.NodeInfo, ...]:
    return tuple(
        _read_node(f"{path}:{line}", item, vocab, notes, single_nodes)
        for line, item in iter_items(path, progress)
    )


def _read_node(
    where: str,
    item: dict,
    vocab: Vocabulary | None,
    notes: list[str] | None,
    single_nodes: dict[str, str] | None,
) -> ev.NodeInfo:
    """One node of `kubectl get nodes -o json` at `where` (FILE:LINE): capacity, labels (kept
    within bounds) and GPUs; TraceImportError on a bad name or quantity."""
    meta = item.get("metadata") or {}
    name = meta.get("name", "")
    labels = meta.get("labels") or {}
    cap = (item.get("status") or {}).get("capacity") or {}
    try:
        ev.validate_token("node", name)
        cpu = int(quantity(cap.get("cpu", 0)) * 1000)
        mem = int(quantity(cap.get("memory", 0)) // 2**20)
        gpus = int(quantity(cap.get(GPU, 0)))
        mig = mig_counts(labels, cap)
    except (ev.InvalidId, ValueError) as exc:
        raise TraceImportError(f"{where}: node {name!r}: {exc}") from None
    single = single_profile(labels)
    if single is not None and gpus:  # MIG single strategy: `nvidia.com/gpu` are instances
        mig, gpus = {single: gpus}, 0
        if single_nodes is not None:
            single_nodes[name] = single
    kept = {
        str(k): str(v) for k, v in sorted(labels.items()) if 0 < len(k) <= 256 and len(v) <= 256
    }
    whole = _node_gpus(name, labels, gpus, mig, vocab, notes, where)
    return ev.NodeInfo(name=name, cpu_milli=cpu, memory_mib=mem, gpus=whole, labels=kept)


def _node_gpus(
    name: str,
    labels: dict,
    gpus: int,
    mig: dict[str, int],
    vocab: Vocabulary | None,
    notes: list[str] | None,
    where: str,
) -> tuple[ev.GpuInfo, ...]:
    """The node's whole GPUs (one NVLink clique), then its MIG GPUs with their layouts (GFD
    mixed strategy: instances per profile), model and memory from GPU feature discovery."""
    product = labels.get("nvidia.com/gpu.product", "gpu")
    memory = (
        int(labels.get("nvidia.com/gpu.memory") or 0)
        or model_memory_mib(product)
        or gpu_memory_mib(product)
    )
    model = vocab.node(product, memory) if vocab is not None and (gpus or mig) else product
    whole = tuple(
        ev.GpuInfo(
            index=i,
            uuid=f"GPU-{name}-{i}",
            model=model,
            memory_mib=memory,
            clique=f"{name}-nvl0",
            sharing="exclusive",
        )
        for i in range(gpus)
    )
    if not mig:
        return whole
    physical = int(labels.get("nvidia.com/gpu.count") or 0) - gpus
    return whole + mig_gpus(
        name,
        mig,
        gpus,
        notes if notes is not None else [],
        model=None if product == "gpu" else product,
        physical=physical if physical > 0 else None,
        where=where,
    )


def single_profile(labels: dict) -> str | None:
    """The MIG profile of a node under GPU feature discovery's single strategy (every GPU in
    one profile, exposed as `nvidia.com/gpu`, product `<GPU>-MIG-<profile>`), else None."""
    if labels.get("nvidia.com/mig.strategy") != "single":
        return None
    m = re.search(r"-MIG-([^-]+)$", labels.get("nvidia.com/gpu.product", ""))
    return m.group(1).lower() if m and is_profile(m.group(1)) else None


def mig_counts(labels: dict, capacity: dict) -> dict[str, int]:
    """MIG instances per profile of a node: GPU feature discovery's
    `nvidia.com/mig-<profile>.count` labels, else the `nvidia.com/mig-<profile>` capacity."""
    out: dict[str, int] = {}
    for k, v in labels.items():
        if (
            k.startswith(MIG_PREFIX)
            and k.endswith(".count")
            and is_profile(k[len(MIG_PREFIX) : -6])
        ):
            out[k[len(MIG_PREFIX) : -6]] = int(quantity(v))
    if not out:
        for k, v in capacity.items():
            if k.startswith(MIG_PREFIX) and is_profile(k[len(MIG_PREFIX) :]):
                out[k[len(MIG_PREFIX) :]] = int(quantity(v))
    return {p: n for p, n in sorted(out.items()) if n > 0}


@dataclass
class _Member:
    line: int
    name: str
    namespace: str
    tenant: str
    cls: str
    res: ev.Resources
    submit: int
    start: int | None
    end: int | None
    cancel: int | None
    selector: dict[str, str] | None = None
    phase: str = ""
    node: str = ""
    priority: str = ""
    preempted: bool = False
    deadline_s: int | None = None
    """`spec.activeDeadlineSeconds`: the pod's time limit."""
    user: str | None = None
    """Who submitted it (`USER_KEYS`), None: not recorded."""


@dataclass
class _Context:
    log: ImportLog
    naming: Naming
    where: Callable[[int], str]
    namespaced: bool
    split: int = 0
    gangs_seen: int = 0
    ended_by_event: dict[str, int] = field(default_factory=dict)
    preempted: set[str] = field(default_factory=set)
    """`namespace/name` of pods with a `Preempted` / `EvictedDueToPreempted` event."""
    workloads: dict[str, tuple[str, str]] = field(default_factory=dict)
    selected: SelectedKeys = field(default_factory=SelectedKeys)
    single: dict[str, str] = field(default_factory=dict)
    """Nodes under MIG single strategy -> their profile (their pods' GPUs are instances)."""


def _events(path, ctx: _Context, counts: dict[str, int]) -> None:
    for _line, item in iter_items(path):
        reason = item.get("reason", "")
        obj = item.get("involvedObject") or item.get("regarding") or {}
        if reason not in ("Preempted", "Evicted", "EvictedDueToPreempted"):
            continue
        counts[f"{reason.lower()}_events"] = counts.get(f"{reason.lower()}_events", 0) + 1
        if obj.get("kind") != "Pod":
            continue
        at = ts(
            item.get("lastTimestamp")
            or item.get("eventTime")
            or item.get("firstTimestamp")
            or (item.get("metadata") or {}).get("creationTimestamp")
        )
        key = f"{obj.get('namespace', '')}/{obj.get('name', '')}"
        if reason in ("Preempted", "EvictedDueToPreempted"):
            ctx.preempted.add(key)
        if at is not None:
            ctx.ended_by_event[key] = min(at, ctx.ended_by_event.get(key, at))


def _workloads(path, ctx: _Context, counts: dict[str, int]) -> None:
    for _line, item in iter_items(path):
        meta = item.get("metadata") or {}
        spec = item.get("spec") or {}
        ns = meta.get("namespace", "")
        for cond in (item.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Evicted" and cond.get("status") == "True":
                counts["workload_evictions"] = counts.get("workload_evictions", 0) + 1
        value = (spec.get("queueName", ""), spec.get("priorityClassName", ""))
        for owner in meta.get("ownerReferences") or []:
            ctx.workloads[f"{ns}/{owner.get('name', '')}"] = value
        ctx.workloads[f"{ns}/{meta.get('name', '')}"] = value


def _gang_of(meta: dict) -> str | None:
    labels = meta.get("labels") or {}
    for label in GANG_LABELS:
        if labels.get(label):
            return labels[label]
    ann = meta.get("annotations") or {}
    if any(a in ann for a in INDEX_ANNOTATIONS) or any(a in labels for a in INDEX_ANNOTATIONS):
        for label in JOB_NAME_LABELS:
            if labels.get(label):
                return labels[label]
    return None


def _owner_name(meta: dict) -> str:
    labels = meta.get("labels") or {}
    for label in ("jobset.sigs.k8s.io/jobset-name", *JOB_NAME_LABELS):
        if labels.get(label):
            return labels[label]
    refs = meta.get("ownerReferences") or []
    return refs[0].get("name", "") if refs else ""


def _member(line: int, pod: dict, ctx: _Context, tenant_from: str) -> _Member | None:
    """The pod as a member, or None (skipped with its line): also a pod nested deeper than a
    user document may be (services/runtime/documents.py) or of a shape no Kubernetes pod
    has (a list where a mapping belongs, a number where a name belongs)."""
    from gpuledger.services.runtime.documents import DocumentError, check_bounds

    where = ctx.where(line)
    try:
        check_bounds(pod)
        return _read_member(line, pod, ctx, tenant_from)
    except DocumentError as exc:
        ctx.log.skips.skip(where, str(exc).removeprefix("not YAML/JSON: "))
    except (AttributeError, TypeError, KeyError, ValueError, OverflowError) as exc:
        ctx.log.skips.skip(where, f"not a pod: {type(exc).__name__}: {str(exc)[:200]}")
    return None


def _read_member(line: int, pod: dict, ctx: _Context, tenant_from: str) -> _Member | None:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    where = ctx.where(line)
    name, ns = meta.get("name", ""), meta.get("namespace", "default")
    unscheduled = _not_scheduled(meta)
    if unscheduled is not None:
        ctx.log.skips.skip(where, unscheduled)
        return None
    try:
        res = _member_resources(spec, ctx)
    except ValueError as exc:
        ctx.log.skips.skip(where, f"pod {ns}/{name}: {exc}")
        return None
    tenant, cls, cls_name = _tenant_and_class(meta, spec, ctx, tenant_from)
    try:
        submit, start, end = _pod_times(meta, status, ctx)
        deleted = ts(meta.get("deletionTimestamp"))
    except ValueError as exc:
        ctx.log.skips.skip(where, f"pod {ns}/{name}: cannot read a time: {exc}")
        return None
    if submit is None:
        ctx.log.skips.skip(where, f"pod {ns}/{name}: no creationTimestamp")
        return None
    cancel = deleted if start is None and deleted is not None else None
    selector, ignored = pod_selector(spec)
    ctx.selected.pod(selector, ignored)
    return _Member(
        line,
        name,
        ns,
        tenant,
        cls,
        res,
        submit,
        start,
        end,
        cancel,
        selector or None,
        phase=str(status.get("phase") or ""),
        node=str(spec.get("nodeName") or ""),
        priority=cls_name,
        preempted=f"{ns}/{name}" in ctx.preempted or status.get("reason") == "Preempted",
        deadline_s=_deadline(spec.get("activeDeadlineSeconds")),
        user=_user_of(meta),
    )


def _not_scheduled(meta: dict) -> str | None:
    """Why a pod the scheduler never placed is skipped (DaemonSet, mirror pod), else None."""
    if any(r.get("kind") == "DaemonSet" for r in meta.get("ownerReferences") or []):
        return "DaemonSet pod (runs on every node, not scheduled)"
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return "mirror (static) pod"
    return None


def _member_resources(spec: dict, ctx: _Context) -> ev.Resources:
    """The pod's resources; on a node of the MIG single strategy its GPU is one instance of
    the node's profile. ValueError: resources a member cannot hold."""
    res = pod_resources(spec)
    profile = ctx.single.get(spec.get("nodeName") or "")
    if profile is not None and res.gpus:  # MIG single strategy: a GPU is an instance
        if res.gpus > 1:
            raise ValueError(
                f"asks for {res.gpus} MIG {profile} instances on node {spec['nodeName']} "
                "(single strategy): a member holds one"
            )
        res = msgspec.structs.replace(res, gpus=0, mig_profile=profile)
    return res


def _tenant_and_class(
    meta: dict, spec: dict, ctx: _Context, tenant_from: str
) -> tuple[str, str, str]:
    """The pod's tenant (its namespace, or namespace/queue), its class and the class name it
    gave (PriorityClass, else its Kueue workload's); an auto-made class takes the pod's
    resolved priority, as Kubernetes compares them."""
    ns = meta.get("namespace", "default")
    labels = meta.get("labels") or {}
    wl_queue, wl_class = ctx.workloads.get(f"{ns}/{_owner_name(meta)}", ("", ""))
    owner = ns
    if tenant_from == "queue":
        queue = labels.get(QUEUE_LABEL) or wl_queue
        owner = f"{ns}/{queue}" if queue else ns
    tenant = ctx.naming.tenant_for(owner, "default")
    cls_name = spec.get("priorityClassName") or wl_class or ""
    cls = ctx.naming.class_for(cls_name or "default")
    if cls in ctx.naming.auto:
        prio = spec.get("priority")
        if isinstance(prio, int):
            ctx.naming.classes[cls]["value"] = prio
        elif not cls_name:
            ctx.naming.classes[cls]["value"] = 0
    return tenant, cls, cls_name


def _pod_times(
    meta: dict, status: dict, ctx: _Context
) -> tuple[int | None, int | None, int | None]:
    """Submit, start and end of the pod in ms (None: unknown): start is its first container's,
    else the pod's startTime; end is its last container's finish once none runs, else, for a
    pod that ended, its end event or its last condition change. ValueError: a bad time."""
    submit = ts(meta.get("creationTimestamp"))
    containers = status.get("containerStatuses") or []
    started = [
        ts((cs.get("state") or {}).get(k, {}).get("startedAt"))
        for cs in containers
        for k in ("running", "terminated")
    ]
    started = [t for t in started if t is not None]
    start = min(started) if started else ts(status.get("startTime"))
    return submit, start, _end_ms(meta, status, containers, start, ctx)


def _end_ms(
    meta: dict, status: dict, containers: list, start: int | None, ctx: _Context
) -> int | None:
    """The pod's end (see `_pod_times`), None while a container runs or when unknown."""
    finished = [
        ts((cs.get("state") or {}).get("terminated", {}).get("finishedAt")) for cs in containers
    ]
    running = any("running" in (cs.get("state") or {}) for cs in containers)
    end = max((t for t in finished if t is not None), default=None) if not running else None
    if end is None and start is not None and status.get("phase") in ("Failed", "Succeeded"):
        end = _ended_pod(meta, status, ctx)
    return end


def _ended_pod(meta: dict, status: dict, ctx: _Context) -> int | None:
    """When a pod that ended (Failed, Succeeded) without a container's finish ended: its end
    event, else its last condition change."""
    key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
    return (
        ctx.ended_by_event.get(key)
        or max(
            (ts(c.get("lastTransitionTime")) or 0 for c in status.get("conditions") or []),
            default=None,
        )
        or None
    )


def _user_of(meta: dict) -> str | None:
    """The pod's submitter: the first of `USER_KEYS` among its annotations, then labels."""
    for where in (meta.get("annotations") or {}, meta.get("labels") or {}):
        for key in USER_KEYS:
            value = where.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def _deadline(value) -> int | None:
    """`activeDeadlineSeconds` (a positive integer) as a time limit, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _job_id(ns: str, name: str, namespaced: bool) -> str:
    text = f"{ns}~{name}" if namespaced else name
    return re.sub(r"[^A-Za-z0-9_:+@=,~-]", "-", text)


def _add(members: list[_Member], job_id: str, ctx: _Context) -> None:
    first = members[0]
    start, end = _gang_span(members)
    ctx.log.add_job(
        ObservedJob(
            job_id=job_id,
            tenant=first.tenant,
            priority_class=first.cls,
            resources=first.res,
            replicas=len(members),
            submit_ms=min(m.submit for m in members),
            start_ms=start,
            end_ms=end,
            line=first.line,
            node_selector=first.selector,
            state=_state(members, start, end),
            nodes=tuple(sorted({m.node for m in members if m.node})),
            source_priority=first.priority or None,
            time_limit_s=min(
                (m.deadline_s for m in members if m.deadline_s is not None), default=None
            ),
            user=first.user,
        ),
        ctx.where(first.line),
    )
    ctx.selected.job(first.selector)


def _gang_span(members: list[_Member]) -> tuple[int | None, int | None]:
    """A gang's start (when its last member started, if all did) and end (when its last
    ended, if all did; for a gang that never started, its first cancel)."""
    starts = [m.start for m in members]
    start = max(starts) if all(s is not None for s in starts) else None
    ends = [m.end for m in members]
    end = max(ends) if start is not None and all(e is not None for e in ends) else None
    if start is None:
        cancels = [m.cancel for m in members if m.cancel is not None]
        end = min(cancels) if cancels else None
    return start, end


_PHASE_STATE = {"Succeeded": "COMPLETED", "Failed": "FAILED", "Running": "RUNNING"}


def _state(members: list[_Member], start: int | None, end: int | None) -> str:
    """The observed final state of a pod or gang: PREEMPTED when a member ended preempted (its
    `Preempted` event or status reason), FAILED when a member failed, COMPLETED when
    every member succeeded, RUNNING while one runs; a pod deleted before it started is
    CANCELLED; else derived from the times ('')."""
    phases = {m.phase for m in members}
    if start is None:
        return "CANCELLED" if end is not None else ("PENDING" if phases else "")
    if end is not None and any(m.preempted for m in members):
        return "PREEMPTED"
    if "Failed" in phases:
        return "FAILED"
    if phases == {"Succeeded"}:
        return "COMPLETED"
    if "Running" in phases and end is None:
        return "RUNNING"
    return ""


def _flush(gangs: dict[tuple[str, str], list[_Member]], ctx: _Context) -> None:
    for (ns, gang), members in gangs.items():
        ctx.gangs_seen += 1
        if len({(m.res, m.tenant, m.cls, str(m.selector)) for m in members}) == 1:
            _add(members, _job_id(ns, gang, ctx.namespaced), ctx)
        else:
            ctx.split += 1
            for m in members:
                _add([m], _job_id(ns, m.name, ctx.namespaced), ctx)
    gangs.clear()


@dataclass
class KubernetesImport:
    summary: dict
    events: int


def import_kubernetes(
    pods: str | Path,
    out: str | Path,
    *,
    events: str | Path | None = None,
    nodes: str | Path | None = None,
    nodes_file: str | Path | None = None,
    workloads: str | Path | None = None,
    mapping: str | Path | None = None,
    namespaced_ids: bool = False,
    progress: Callable[[int, int], None] | None = None,
    skips: SkipLog | None = None,
    run_size: int = 200_000,
) -> KubernetesImport:
    if (nodes is None) == (nodes_file is None):
        raise TraceImportError(
            "give the nodes with exactly one of --nodes FILE (kubectl get nodes -o json) "
            "or --config-nodes FILE (a gpuledger configuration)"
        )
    m = load_mapping(mapping, "kubernetes")
    naming = Naming(m, "default")
    single: dict[str, str] = {}
    if nodes is not None:
        node_infos = read_nodes(nodes, vocab=naming.gpu, notes=naming.notes, single_nodes=single)
    else:
        from gpuledger.replay.importers.slurm_nodes import read_nodes_file

        node_infos = read_nodes_file(nodes_file)
    log = ImportLog(PRODUCER, skips=skips, run_size=run_size, checkpoint=m.checkpoint_rules)
    path = str(pods)
    ctx = _Context(log, naming, lambda line: f"{path}:{line}", namespaced_ids, single=single)
    counts: dict[str, int] = {}
    if events is not None:
        _events(events, ctx, counts)
    if workloads is not None:
        _workloads(workloads, ctx, counts)
    tenant_from = m.tenant_from or "namespace"
    gangs: dict[tuple[str, str], list[_Member]] = {}
    current_ns = None
    for line, pod in iter_items(pods, progress):
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "default")
        if ns != current_ns:
            _flush(gangs, ctx)
            current_ns = ns
        member = _member(line, pod, ctx, tenant_from)
        if member is None:
            continue
        gang = _gang_of(meta)
        if gang is None:
            _add([member], _job_id(ns, member.name, namespaced_ids), ctx)
        else:
            gangs.setdefault((ns, gang), []).append(member)
    _flush(gangs, ctx)
    if nodes is not None:
        node_infos = ctx.selected.nodes(node_infos)
    doc = naming.document(sum(len(n.gpus) for n in node_infos))
    from gpuledger.services.domain.inputs.configfile import ConfigFileError

    try:
        head = head_events(doc, node_infos, PRODUCER, log.first_ms or 0)
    except ConfigFileError as exc:
        raise TraceImportError(
            "\n".join(f"{mapping or 'configuration'}: {p}" for p in exc.problems)
        ) from None
    n = log.write(out, head, ctx.where)
    summary = {
        "events": n,
        "nodes": len(node_infos),
        "gpus": sum(len(x.gpus) for x in node_infos),
        "gangs_split": ctx.split,
        **counts,
        **log.summary(),
        **ctx.selected.summary(node_infos),
        **naming.warnings(),
    }
    return KubernetesImport(summary=summary, events=n)


__all__ = ["import_kubernetes", "pod_resources", "quantity", "read_nodes", "token"]
