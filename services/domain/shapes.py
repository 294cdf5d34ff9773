"""Whether a job's shape is well-formed and could ever run on the registered fleet.

Pure: returns `(reason, message, details)` for the first problem found, or None.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from events.specs import JobSpec

MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb(\+me)?$")
Problem = tuple[str, str, dict[str, Any]]


def shape_problem(spec: JobSpec, nodes: Iterable[Any]) -> Problem | None:
    problem = _form_problem(spec)
    if problem is not None:
        return problem
    nodes = [n for n in nodes if not n.lost]
    return _fleet_problem(spec, nodes) if nodes else None


def _form_problem(spec: JobSpec) -> Problem | None:
    r = spec.resources
    forms = sum([r.gpus > 0, r.gpu_milli > 0, r.mig_profile is not None])
    checks = [
        (spec.replicas < 1, f"replicas must be >= 1 (got {spec.replicas})"),
        (
            spec.min_members is not None and not 1 <= spec.min_members <= spec.replicas,
            f"min_members must be within 1..replicas={spec.replicas} (got {spec.min_members})",
        ),
        (forms > 1, "use only one of gpus, gpu_milli and mig_profile"),
        (r.gpus < 0 or r.cpu_milli < 0 or r.memory_mib < 0, "resources must not be negative"),
        (not 0 <= r.gpu_milli < 1000, f"gpu_milli must be within 1..999 (got {r.gpu_milli})"),
        (
            r.mig_profile is not None and not MIG_PROFILE.match(r.mig_profile),
            f"mig_profile {r.mig_profile!r} is not a MIG profile name like '3g.40gb'",
        ),
        (spec.duration_s is not None and spec.duration_s < 0, "duration_s must be >= 0"),
    ]
    for bad, message in checks:
        if bad:
            return ("InvalidSpec", message, {})
    return None


def _fleet_problem(spec: JobSpec, nodes: list[Any]) -> Problem | None:
    r = spec.resources
    models = set(r.gpu_models)
    if models and not any(g.model in models for n in nodes for g in n.info.gpus):
        return ("Unschedulable", f"no registered GPU of model {sorted(models)}", {})
    largest_cpu = max(n.info.cpu_milli for n in nodes)
    largest_mem = max(n.info.memory_mib for n in nodes)
    if r.cpu_milli > largest_cpu or r.memory_mib > largest_mem:
        return (
            "Unschedulable",
            f"member needs {r.cpu_milli}m CPU / {r.memory_mib} MiB; largest node has "
            f"{largest_cpu}m / {largest_mem} MiB",
            {},
        )
    usable = [
        (n.info.name, g)
        for n in nodes
        for g in n.info.gpus
        if (not models or g.model in models) and g.memory_mib >= r.min_gpu_memory_mib
    ]
    if r.gpus:
        cliques = Counter((name, g.clique) for name, g in usable if g.sharing == "exclusive")
        largest = max(cliques.values(), default=0)
        if r.gpus > largest:
            return (
                "TopologyUnsatisfiable",
                f"needs {r.gpus} GPUs in one NVLink clique; largest clique in the fleet has {largest}",
                {"largest_clique": largest},
            )
    if r.mig_profile and not any(g.sharing == "mig" for _, g in usable):
        return ("MIGProfileUnavailable", f"MIG {r.mig_profile}: no MIG-enabled GPU in the fleet", {})
    if (r.gpu_milli or r.gpus) and not usable:
        return ("Unschedulable", "no registered GPU matches the request", {})
    return None
