"""Reading the openb trace: GPU nodes and pod (task) lists, as placement requests.

Accepts the pod-list variants: the optional columns (``gpu_spec``, ``qos``, ``pod_phase``,
times) may be missing; the node list names its GPU count ``gpu`` (or ``num_gpu``).
Every GPU of an openb node sits in one NVLink clique and is an ``mps`` GPU: the whole trace
is one tenant, so this is plain milli sharing.
"""

from __future__ import annotations

import csv
from pathlib import Path

import msgspec

from gpuledger.services.placement import GangRequest, GpuSpec, MemberRequest, NodeSpec

TENANT = "openb"
TRACE_ENV = "GPULEDGER_OPENB_DIR"
"""Environment variable naming a folder that holds the full openb CSV files."""
TRACE_URL = "https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023/csv"
DEFAULT_PODS = "openb_pod_list_default.csv"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"


class TraceNotFound(Exception):
    """A trace file is missing; the message says where to get the trace (one line)."""


def trace_files(trace: Path | None, pods: Path | None, nodes: Path | None) -> tuple[Path, Path]:
    """The pod and node lists to read: `pods`/`nodes` when given, else the default files in
    the `trace` folder. Raises TraceNotFound naming the missing path and the trace's source."""
    chosen: list[Path] = []
    for given, default, flag in ((pods, DEFAULT_PODS, "--pods"), (nodes, DEFAULT_NODES, "--nodes")):
        path = given if given is not None else None if trace is None else trace / default
        if path is None:
            raise TraceNotFound(
                f"openb trace not given: pass --trace DIR (or set {TRACE_ENV}) or {flag} FILE; "
                f"get the trace from {TRACE_URL}"
            )
        if not path.is_file():
            raise TraceNotFound(missing_message(path))
        chosen.append(path)
    return chosen[0], chosen[1]


def missing_message(path: Path, how: str = f"pass --trace DIR (or set {TRACE_ENV})") -> str:
    """One line for a missing trace file: where it was looked for and where to get it."""
    return f"openb trace not found at {path}; get it from {TRACE_URL} or {how}"


class Task(msgspec.Struct, frozen=True):
    """One pod of the trace: CPU, memory, GPUs (``num_gpu``, per-GPU ``gpu_milli``)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()

    @property
    def shared(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < 1000

    @property
    def gpu_request_milli(self) -> int:
        """GPU milli the task requests (its share, or 1000 per whole GPU)."""
        return self.gpu_milli if self.shared else 1000 * self.num_gpu

    def member(self) -> MemberRequest:
        if self.shared:
            return MemberRequest(
                gpu_milli=self.gpu_milli,
                cpu_milli=self.cpu_milli,
                memory_mib=self.memory_mib,
                gpu_models=self.gpu_spec,
            )
        return MemberRequest(
            gpus=self.num_gpu,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_models=self.gpu_spec if self.num_gpu else (),
        )

    def gang(self, job_id: str) -> GangRequest:
        return GangRequest(job_id=job_id, tenant=TENANT, member=self.member())


class Node(msgspec.Struct, frozen=True):
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    model: str

    def spec(self) -> NodeSpec:
        gpus = tuple(
            GpuSpec(i, f"{self.name}-gpu{i}", self.model, 0, f"{self.name}/nvlink", "mps")
            for i in range(self.num_gpu)
        )
        return NodeSpec(self.name, self.cpu_milli, self.memory_mib, gpus)


def _int(row: dict[str, str], *names: str, default: int | None = None) -> int:
    for n in names:
        v = row.get(n)
        if v not in (None, ""):
            return int(float(v))
    if default is None:
        raise ValueError(f"missing column {names[0]}")
    return default


def load_nodes(path: str | Path) -> list[Node]:
    """GPU nodes of a node list (nodes without GPUs are dropped), in file order."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            n = _int(row, "gpu", "num_gpu", default=0)
            if n > 0:
                out.append(
                    Node(
                        row["sn"],
                        _int(row, "cpu_milli"),
                        _int(row, "memory_mib"),
                        n,
                        row.get("model") or "",
                    )
                )
    return out


def load_tasks(path: str | Path) -> list[Task]:
    """Tasks of a pod list, in file order."""
    out = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            spec = (row.get("gpu_spec") or "").strip()
            num_gpu = _int(row, "num_gpu", default=0)
            milli = _int(row, "gpu_milli", default=1000 if num_gpu else 0)
            out.append(
                Task(
                    name=row.get("name") or f"pod-{i:05d}",
                    cpu_milli=_int(row, "cpu_milli", default=0),
                    memory_mib=_int(row, "memory_mib", default=0),
                    num_gpu=num_gpu,
                    gpu_milli=milli if num_gpu else 0,
                    gpu_spec=tuple(s for s in spec.split("|") if s)
                    if spec and spec != "nan"
                    else (),
                )
            )
    return out
