"""The nodes of a Slurm import: `sinfo --Node --noheader --format='%N|%c|%m|%G|%P'` (node,
CPUs, memory MB, GRES such as `gpu:a100:8(S:0-1)`, partition; a node listed once per
partition is kept once, labelled with its partitions: `replay.importers.labels`; the
partition column may be left out: no labels), or a gpuledger configuration file's
`cluster.nodes` (`--nodes FILE`).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from gpuledger import events as ev
from gpuledger.replay.importers.common import (
    TraceImportError,
    gpu_memory_mib,
    open_text,
    read_yaml,
    row_problem,
)
from gpuledger.replay.importers.labels import partition_labels
from gpuledger.replay.importers.migmap import is_profile, mig_gpus
from gpuledger.services.domain.inputs.gpu_models import Vocabulary
from gpuledger.services.domain.inputs.gpu_models import gpu_memory_mib as model_memory_mib
from gpuledger.services.domain.inputs.schema import MAX_GPUS_PER_NODE


def read_sinfo(
    path: str | Path,
    vocab: Vocabulary | None = None,
    notes: list[str] | None = None,
    mig_model: str | None = None,
) -> tuple[ev.NodeInfo, ...]:
    """Nodes from `sinfo --Node --noheader --format='%N|%c|%m|%G|%P'` (the partition column
    optional), labelled with their partitions."""
    out: dict[str, ev.NodeInfo] = {}
    partitions: dict[str, list[str]] = {}
    f = open_text(path)
    with f:
        for line, text in enumerate(f, 1):
            text = text.strip()
            problem = row_problem(text)
            if problem is not None:
                raise TraceImportError(f"{path}:{line}: {problem}")
            if not text or text.upper().startswith(("NODELIST", "HOSTNAMES", "NODE_NAME")):
                continue
            parts = text.split("|")
            if len(parts) < 4:
                raise TraceImportError(
                    f"{path}:{line}: expected NODE|CPUS|MEMORY|GRES, got {text!r}"
                )
            name, cpus, mem, gres = (p.strip() for p in parts[:4])
            if len(parts) > 4 and parts[4].strip().rstrip("*"):
                partitions.setdefault(name, []).append(parts[4].strip().rstrip("*"))
            if name in out:
                continue  # the same node under another partition
            try:
                ev.validate_token("node", name)
                cpu_milli = int(float(cpus.split("/")[-1]) * 1000)
                memory = int(float(mem.rstrip("+")))
            except ev.InvalidId as exc:
                raise TraceImportError(f"{path}:{line}: {exc}") from None
            except ValueError:
                raise TraceImportError(
                    f"{path}:{line}: CPUS and MEMORY must be numbers, got {cpus!r}, {mem!r}"
                ) from None
            gpus: list[ev.GpuInfo] = []
            mig: dict[str, int] = {}
            for g in gres.split(","):
                g = g.split("(", 1)[0].strip()
                bits = g.split(":")
                if bits[0] != "gpu" or len(bits) < 2:
                    continue  # (null), shard:..., mps:...
                raw_model = bits[1] if len(bits) >= 3 else "gpu"
                try:
                    count = int(bits[-1])
                except ValueError:
                    raise TraceImportError(
                        f"{path}:{line}: cannot read GRES {g!r} (expected gpu:N or gpu:TYPE:N)"
                    ) from None
                if len(bits) >= 3 and is_profile(raw_model):
                    mig[raw_model.lower()] = mig.get(raw_model.lower(), 0) + count
                    continue  # MIG instances: GPUs rebuilt below (replay.importers.migmap)
                if not 0 <= len(gpus) + count <= MAX_GPUS_PER_NODE:
                    raise TraceImportError(
                        f"{path}:{line}: GRES {g!r}: more than {MAX_GPUS_PER_NODE} GPUs on one"
                        " node (docs/inputs.md)"
                    )
                model = vocab(raw_model) if vocab is not None and len(bits) >= 3 else raw_model
                for _ in range(count):
                    i = len(gpus)
                    gpus.append(
                        ev.GpuInfo(
                            index=i,
                            uuid=f"GPU-{name}-{i}",
                            model=model,
                            memory_mib=model_memory_mib(model) or gpu_memory_mib(raw_model),
                            clique=f"{name}-nvl0",
                        )
                    )
            if mig:
                gpus += mig_gpus(
                    name,
                    mig,
                    len(gpus),
                    notes if notes is not None else [],
                    model=mig_model,
                    where=f"{path}:{line}",
                )
            out[name] = ev.NodeInfo(
                name=name, cpu_milli=cpu_milli, memory_mib=memory, gpus=tuple(gpus)
            )
    labels = partition_labels(partitions)
    return tuple(
        msgspec.structs.replace(n, labels=labels[n.name]) if labels.get(n.name) else n
        for n in out.values()
    )


def read_nodes_file(path: str | Path) -> tuple[ev.NodeInfo, ...]:
    """`cluster.nodes` of a gpuledger configuration file."""
    from gpuledger.services.domain.inputs.configfile import ConfigFileError, node_infos

    doc = read_yaml(path)
    try:
        return node_infos(doc)
    except ConfigFileError as exc:
        raise TraceImportError("\n".join(f"{path}: {p}" for p in exc.problems)) from None
