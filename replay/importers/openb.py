"""Import the Alibaba `openb` GPU trace (cluster-trace-gpu-v2023) as a log of external inputs.

Output, in time order (every event at `occurred_at_ms` = trace seconds x 1000):

1. configuration at t=0: one tenant `openb` guaranteed every GPU of the node list (the trace
   has no tenant information), one priority class per QoS (table below), the default policy;
2. `NodeRegistered` at t=0 for every node of the node list (`simulated=True`,
   `heartbeat_s=0`; CPU-only nodes too when the list has them), every GPU in one NVLink
   clique per node and in `mps` sharing mode;
3. `JobSubmitted` at each pod's `creation_time`, and `JobCancelled` at `deletion_time` for
   pods that were deleted before they were ever scheduled (no `scheduled_time`).

QoS -> priority class (the trace's Kubernetes-style QoS; names matched case-insensitively):

    QoS         class        value  preemptible  slo_class
    LS          ls           125    no           latency-critical   (online inference)
    Guaranteed  guaranteed   80     yes          interactive
    Burstable   burstable    75     yes          interactive
    BE          be           50     yes          batch

A pod list without a `qos` column maps every pod to `burstable` (what Kubernetes calls a pod
with requests but no equal limits).

Resources: `num_gpu == 1 and 0 < gpu_milli < 1000` -> a `gpu_milli` share of one GPU;
`num_gpu >= 1` otherwise -> `num_gpu` whole GPUs in one clique; `num_gpu == 0` -> CPU-only.
`gpu_spec` `A|B` -> `gpu_models = (A, B)` (the trace's model codes, as on the nodes).

Checkpoints: none (the trace does not say a pod can save its work): an evicted pod loses its
work back to its start (replay.importers.checkpoint). What the trace recorded of each pod
(creation, scheduling, deletion, phase) is kept beside the log (`write_observed`).

Run time: `duration_s = deletion_time - scheduled_time` (the observed run time, what the
simulated agents run and what a replay keeps per job). A pod with no `scheduled_time` (never
ran) has no duration (it would run until cancelled) and is cancelled at `deletion_time`. A pod
list without the time columns submits every pod at t=0 with `default_duration_s` (None = run
until cancelled). The trace's `pod_phase` (Failed, Succeeded, Running at the snapshot) is not
replayed: a replayed pod ends when its observed run time is over.

Why `mps` and one tenant: shares need `mps` or `timeslice` GPUs; `mps` keeps one tenant per
GPU at a time, which with a single tenant is plain milli sharing (the FGD paper's model), and
an idle `mps` GPU may also be taken whole, so whole-GPU pods run on the same GPUs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gpuledger.events import (
    Event,
    GpuInfo,
    InvalidId,
    JobCancelled,
    JobSpec,
    NodeInfo,
    NodeRegistered,
    PriorityClassConfigured,
    Resources,
    subject_for,
    validate_token,
)
from gpuledger.replay.importers.checkpoint import NO_CHECKPOINT, describe
from gpuledger.replay.importers.common import TraceImportError, open_text, row_problem
from gpuledger.replay.importers.outcomes import replayed
from gpuledger.replay.observed import Observation
from gpuledger.services.domain.inputs.configfile import config_events
from gpuledger.services.domain.tooling.stamp import stamp, submission

PRODUCER = "import/alibaba-openb"
TENANT = "openb"

GPU_MEMORY_GIB: dict[str, int] = {
    "V100M16": 16,
    "V100M32": 32,
    "P100": 16,
    "T4": 16,
    "A10": 24,
    # Undisclosed internal codes; documented guesses (openb pods request no GPU memory, so
    # these values never change a placement):
    "G1": 16,
    "G2": 32,
    "G3": 80,
}
"""GPU memory per model code of the trace."""


@dataclass(frozen=True)
class QosClass:
    name: str
    value: int
    preemptible: bool
    slo_class: str
    description: str


QOS_CLASSES: dict[str, QosClass] = {
    "ls": QosClass(
        "ls", 125, False, "latency-critical", "openb LS: latency-sensitive (online inference)"
    ),
    "guaranteed": QosClass("guaranteed", 80, True, "interactive", "openb Guaranteed QoS"),
    "burstable": QosClass("burstable", 75, True, "interactive", "openb Burstable QoS"),
    "be": QosClass("be", 50, True, "batch", "openb BE: best effort, preemptible batch"),
}
"""Trace QoS (lower-cased) -> priority class."""

DEFAULT_QOS = "burstable"
POD_REQUIRED = ("name", "num_gpu")
NODE_REQUIRED = ("sn", "cpu_milli", "memory_mib")


@dataclass
class OpenbImport:
    """The imported log and what it holds."""

    events: list[Event]
    nodes: tuple[NodeInfo, ...]
    gpus: int
    jobs: int
    cancels: int
    by_class: dict[str, int] = field(default_factory=dict)
    by_shape: dict[str, int] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)
    """What the trace recorded of each pod (creation, scheduling, deletion, phase)."""
    never_ran: dict[str, int] = field(default_factory=dict)
    """Pods that were never scheduled, by what the replay does with them
    (`replay.importers.outcomes`)."""

    def write_observed(self, log: str | Path) -> Path:
        """The observation sidecar of `log` (`replay.observed`); returns its path."""
        import tempfile

        from gpuledger.replay import observed as obs
        from gpuledger.services.domain.fold.config import ConfigState

        cfg = ConfigState()
        for e in self.events:
            if isinstance(e, PriorityClassConfigured):
                cfg.apply(e)
        times = [
            t
            for o in self.observations
            for t in (o.submit_ms, o.start_ms, o.end_ms)
            if t is not None
        ]
        header = obs.Header(
            source=str(log),
            window_ms=(min(times), max(times)) if times else (0, 0),
            capacity_gpu_milli=1000 * self.gpus,
            slo_classes={n: c.slo_class for n, c in sorted(cfg.classes.items())},
            checkpoint=describe(NO_CHECKPOINT),
        )
        path = obs.sidecar(log)
        with tempfile.TemporaryFile() as body:
            for o in self.observations:
                body.write(obs.encode(o) + b"\n")
            body.seek(0)
            obs.write(path, header, body)
        return path

    def entries(self) -> list[tuple[int, str, Event]]:
        """`(seq, subject, event)` with `seq` 1..N gap-free."""
        return [(i, subject_for(e), e) for i, e in enumerate(self.events, 1)]

    def inputs(self) -> list[tuple[int, Event]]:
        """Submissions and cancellations as `(at_ms, event)` (for `Simulator.schedule`)."""
        return [
            (e.occurred_at_ms, e)
            for e in self.events
            if type(e).__name__ in ("JobSubmitted", "JobCancelled")
        ]

    def summary(self) -> dict:
        return {
            "events": len(self.events),
            "nodes": len(self.nodes),
            "gpus": self.gpus,
            "jobs": self.jobs,
            "cancels": self.cancels,
            "never_ran": dict(sorted(self.never_ran.items())),
            "by_class": dict(sorted(self.by_class.items())),
            "by_shape": dict(sorted(self.by_shape.items())),
        }


PHASES = {"succeeded": "COMPLETED", "failed": "FAILED", "running": "RUNNING", "pending": "PENDING"}
"""The trace's `pod_phase` (its last phase) -> the observed final state."""


def _observed_state(phase: str, scheduled: int | None, deleted: int | None) -> str:
    """A pod deleted before it was scheduled, or deleted while its last phase was Running or
    Pending, was ended by its deletion: CANCELLED. Otherwise the phase (Succeeded ->
    COMPLETED, Failed -> FAILED, Running -> RUNNING, Pending -> PENDING); a pod without a
    phase: from its times."""
    if deleted is not None and (scheduled is None or phase in ("running", "pending")):
        return "CANCELLED"
    if phase in PHASES:
        return PHASES[phase]
    if scheduled is None:
        return "PENDING"
    return "COMPLETED" if deleted is not None else "RUNNING"


# ---------------------------------------------------------------------------- reading


class _Rows:
    """CSV rows with file/line-aware errors."""

    def __init__(self, path: str | Path, required: tuple[str, ...]) -> None:
        self.path = str(path)
        self._f = open_text(path)
        self.reader = csv.DictReader(self._f)
        header = self.reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            self._f.close()
            raise TraceImportError(
                f"{path}:1: missing column(s) {', '.join(missing)} (header: {','.join(header) or 'empty'})"
            )
        self.columns = frozenset(header)

    def __iter__(self):
        with self._f:
            for row in self.reader:
                problem = row_problem([*row.values(), *(row.get(None) or ())])
                if problem is not None:
                    raise self.error(self.reader.line_num, problem)
                yield self.reader.line_num, row

    def unique_id(
        self, line: int, row: dict, column: str, kind: str, seen: set[str], label: str | None = None
    ) -> str:
        """The row's id in `column`: a valid subject token (`kind`) not seen before in this
        file (`label` names it in the duplicate error, default `kind`)."""
        value = (row.get(column) or "").strip()
        try:
            validate_token(kind, value)
        except InvalidId as exc:
            raise self.error(line, str(exc)) from None
        if value in seen:
            raise self.error(line, f"duplicate {label or kind} {value!r}")
        seen.add(value)
        return value

    def error(self, line: int, message: str) -> TraceImportError:
        return TraceImportError(f"{self.path}:{line}: {message}")

    def int(self, line: int, row: dict, column: str, default: int | None = None) -> int | None:
        raw = (row.get(column) or "").strip()
        if raw == "" or raw.lower() == "nan":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise self.error(line, f"{column}: not a number: {raw!r}") from None
        if value != int(value) or value < 0:
            raise self.error(line, f"{column}: must be a non-negative integer, got {raw!r}")
        return int(value)


def read_nodes(path: str | Path) -> tuple[NodeInfo, ...]:
    """Every node of an openb node list (GPU and CPU-only), in file order."""
    rows = _Rows(path, NODE_REQUIRED)
    gpu_col = "gpu" if "gpu" in rows.columns else "num_gpu" if "num_gpu" in rows.columns else None
    if gpu_col is None:
        raise rows.error(1, "missing column gpu (or num_gpu)")
    out: list[NodeInfo] = []
    seen: set[str] = set()
    for line, row in rows:
        name = rows.unique_id(line, row, "sn", "node", seen)
        cpu = rows.int(line, row, "cpu_milli")
        mem = rows.int(line, row, "memory_mib")
        if cpu is None or mem is None:
            raise rows.error(line, "cpu_milli and memory_mib are required")
        n = rows.int(line, row, gpu_col, 0) or 0
        model = (row.get("model") or "").strip()
        if model.lower() == "nan":
            model = ""
        gpus: tuple[GpuInfo, ...] = ()
        if n:
            if model not in GPU_MEMORY_GIB:
                known = ", ".join(GPU_MEMORY_GIB)
                raise rows.error(line, f"unknown GPU model {model!r} for {n} GPUs (known: {known})")
            gpus = tuple(
                GpuInfo(
                    index=i,
                    uuid=f"GPU-{name}-{i}",
                    model=model,
                    memory_mib=GPU_MEMORY_GIB[model] * 1024,
                    clique=f"{name}-nvl0",
                    sharing="mps",
                )
                for i in range(n)
            )
        out.append(NodeInfo(name=name, cpu_milli=cpu, memory_mib=mem, gpus=gpus))
    return tuple(out)


def _resources(rows: _Rows, line: int, row: dict) -> tuple[Resources, str]:
    num_gpu = rows.int(line, row, "num_gpu", 0) or 0
    gpu_milli = rows.int(line, row, "gpu_milli", 1000 if num_gpu else 0)
    cpu = rows.int(line, row, "cpu_milli", 0) or 0
    mem = rows.int(line, row, "memory_mib", 0) or 0
    spec = (row.get("gpu_spec") or "").strip()
    models = tuple(m.strip() for m in spec.split("|") if m.strip()) if spec.lower() != "nan" else ()
    if num_gpu == 0:
        return Resources(cpu_milli=cpu, memory_mib=mem), "cpu"
    if gpu_milli is not None and gpu_milli > 1000:
        raise rows.error(line, f"gpu_milli must be at most 1000, got {gpu_milli}")
    if num_gpu == 1 and gpu_milli and gpu_milli < 1000:
        return Resources(
            gpu_milli=gpu_milli, cpu_milli=cpu, memory_mib=mem, gpu_models=models
        ), "share"
    return Resources(
        gpus=num_gpu, cpu_milli=cpu, memory_mib=mem, gpu_models=models
    ), f"{num_gpu}gpu"


def _head(node_infos: tuple[NodeInfo, ...]) -> list[Event]:
    """The trace's configuration (one tenant guaranteed every GPU, a class per QoS) and its
    nodes, registered at 0 as simulated."""
    total_gpus = sum(len(n.gpus) for n in node_infos)
    doc = {
        "tenants": [{"name": TENANT, "guaranteed": total_gpus, "weight": 1}],
        "priority_classes": [
            {
                "name": c.name,
                "value": c.value,
                "preemptible": c.preemptible,
                "slo_class": c.slo_class,
                "description": c.description,
            }
            for c in QOS_CLASSES.values()
        ],
        "policy": {},
    }
    head: list[Event] = list(config_events(doc, producer=PRODUCER))
    for info in node_infos:
        head.append(
            stamp(
                NodeRegistered,
                key=f"{info.name}@0",
                producer=PRODUCER,
                now_ms=0,
                correlation_id=info.name,
                node=info,
                simulated=True,
                heartbeat_s=0,
            )
        )
    return head


def _qos_class(rows: _Rows, line: int, row: dict[str, str]) -> Any:
    """The priority class of the pod's QoS (empty: the default QoS)."""
    qos = (row.get("qos") or "").strip().lower() or DEFAULT_QOS
    cls = QOS_CLASSES.get(qos)
    if cls is None:
        raise rows.error(
            line, f"unknown qos {row.get('qos')!r} (expected LS, Guaranteed, Burstable or BE)"
        )
    return cls


def _pod_times(
    rows: _Rows, line: int, row: dict[str, str], has_times: bool
) -> tuple[int, int | None, int | None]:
    """Creation (0 in a trace without times), scheduled and deletion time in seconds; an
    empty creation or a deletion before the pod's start is an error."""
    created = rows.int(line, row, "creation_time") if has_times else 0
    if created is None:
        raise rows.error(line, "creation_time is empty")
    scheduled = rows.int(line, row, "scheduled_time")
    deleted = rows.int(line, row, "deletion_time")
    if scheduled is not None and deleted is not None and deleted < scheduled:
        raise rows.error(line, f"deletion_time {deleted} is before scheduled_time {scheduled}")
    if scheduled is None and deleted is not None and deleted < created:
        raise rows.error(line, f"deletion_time {deleted} is before creation_time {created}")
    return created, scheduled, deleted


def _ms(seconds: int | None) -> int | None:
    """A trace time in seconds as ms (None: not in the trace)."""
    return None if seconds is None else seconds * 1000


def import_openb(
    pods: str | Path,
    nodes: str | Path,
    *,
    default_duration_s: int | None = None,
    limit: int | None = None,
) -> OpenbImport:
    """Read a pod list and a node list; return the log of external inputs.

    `limit` keeps only the first N pods of the file (a slice, for tests and quick looks)."""
    node_infos = read_nodes(nodes)
    total_gpus = sum(len(n.gpus) for n in node_infos)
    head = _head(node_infos)

    rows = _Rows(pods, POD_REQUIRED)
    has_times = "creation_time" in rows.columns
    timed: list[tuple[int, int, int, Event]] = []
    seen: set[str] = set()
    by_class: dict[str, int] = {}
    by_shape: dict[str, int] = {}
    observations: list[Observation] = []
    cancels = 0
    never_ran: dict[str, int] = {}
    for index, (line, row) in enumerate(rows):
        if limit is not None and index >= limit:
            break
        name = rows.unique_id(line, row, "name", "job id", seen, "pod name")
        cls = _qos_class(rows, line, row)
        resources, shape = _resources(rows, line, row)
        created, scheduled, deleted = _pod_times(rows, line, row, has_times)
        phase = (row.get("pod_phase") or "").strip().lower()
        state = _observed_state(phase, scheduled, deleted)
        r = replayed(
            state,
            created * 1000,
            _ms(scheduled),
            _ms(deleted),
            None,
        )
        if r.never_ran is not None:
            never_ran[r.never_ran] = never_ran.get(r.never_ran, 0) + 1
        spec = JobSpec(
            job_id=name,
            tenant=TENANT,
            priority_class=cls.name,
            resources=resources,
            checkpoint=NO_CHECKPOINT,
            # a pod that outlived the trace (or a trace without times) runs the default
            duration_s=r.duration_s if deleted is not None else default_duration_s,
            ends=r.ends or msgspec.UNSET,
        )
        observations.append(
            Observation(
                job=name,
                tenant=TENANT,
                priority_class=cls.name,
                gpu_milli=resources.gpu_milli_total(),
                submit_ms=created * 1000,
                start_ms=_ms(scheduled),
                end_ms=_ms(deleted),
                state=state,
                checkpoint_s=0,
                line=line,
            )
        )
        at_ms = created * 1000
        timed.append((at_ms, 0, index, submission(spec, now_ms=at_ms, producer=PRODUCER)))
        if r.cancel_at_ms is not None:
            cancels += 1
            c_ms = r.cancel_at_ms
            timed.append(
                (
                    c_ms,
                    1,
                    index,
                    stamp(
                        JobCancelled,
                        key=name,
                        producer=PRODUCER,
                        now_ms=c_ms,
                        correlation_id=name,
                        job_id=name,
                        tenant=TENANT,
                        reason="DeletedBeforeScheduled"
                        if scheduled is None
                        else "CancelledWhileRunning",
                    ),
                )
            )
        by_class[cls.name] = by_class.get(cls.name, 0) + 1
        by_shape[shape] = by_shape.get(shape, 0) + 1
    timed.sort(key=lambda t: t[:3])
    return OpenbImport(
        events=head + [t[3] for t in timed],
        nodes=node_infos,
        gpus=total_gpus,
        jobs=len(seen),
        cancels=cancels,
        by_class=by_class,
        by_shape=by_shape,
        observations=observations,
        never_ran=never_ran,
    )
