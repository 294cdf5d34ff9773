"""Whether a job's shape is well-formed and could ever run on the registered fleet.

Pure: returns `(reason, message, details)` for the first problem found, or None.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpuledger.events.reasons import RejectReason
from gpuledger.events.specs import JobSpec
from gpuledger.services.domain.inputs.model_names import suggestion
from gpuledger.services.placement.mig import PROFILES, family, profile_for

MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb(\+me)?$")
Problem = tuple[str, str, dict[str, Any]]
_MISS = object()


@dataclass(frozen=True)
class FleetSummary:
    """What the registered (not lost) fleet could ever offer, by GPU model and memory."""

    nodes: int
    max_cpu_milli: int
    max_memory_mib: int
    largest_clique: dict[tuple[str, int], int]
    """(model, GPU memory) -> most non-MIG GPUs of that kind in one NVLink clique."""
    mig: frozenset[tuple[str, int]]
    """(model, GPU memory) kinds with MIG-enabled GPUs."""
    shared: frozenset[tuple[str, int, str]]
    """(model, GPU memory, sharing) kinds of GPUs that take fractions (`mps`, `timeslice`)."""
    cliques: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    """(model, GPU memory) -> sizes of every non-MIG NVLink clique of that kind (largest first):
    how many whole-GPU members the fleet could ever hold at once."""
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """`_fleet_problem` answers per (resources, allow_timeslice): a pure function of them."""


def summarize(nodes: Iterable[Any]) -> FleetSummary:
    nodes = [n for n in nodes if not n.lost]
    cliques: Counter[tuple[str, int, str, str]] = Counter()
    mig: set[tuple[str, int]] = set()
    shared: set[tuple[str, int, str]] = set()
    for n in nodes:
        for g in n.info.gpus:
            if g.sharing in ("mps", "timeslice"):
                shared.add((g.model, g.memory_mib, g.sharing))
            if g.sharing == "mig":
                mig.add((g.model, g.memory_mib))
            else:
                cliques[(g.model, g.memory_mib, n.info.name, g.clique)] += 1
    largest: dict[tuple[str, int], int] = {}
    sizes: dict[tuple[str, int], list[int]] = {}
    for (model, memory, _, _), size in cliques.items():
        largest[(model, memory)] = max(largest.get((model, memory), 0), size)
        sizes.setdefault((model, memory), []).append(size)
    return FleetSummary(
        nodes=len(nodes),
        max_cpu_milli=max((n.info.cpu_milli for n in nodes), default=0),
        max_memory_mib=max((n.info.memory_mib for n in nodes), default=0),
        largest_clique=largest,
        mig=frozenset(mig),
        shared=frozenset(shared),
        cliques={k: tuple(sorted(v, reverse=True)) for k, v in sorted(sizes.items())},
    )


def shape_problem(
    spec: JobSpec, fleet: FleetSummary, allow_timeslice: bool = False
) -> Problem | None:
    problem = _form_problem(spec)
    if problem is not None:
        return problem
    if not fleet.nodes:
        return None
    key = (spec.resources, spec.members_min(), allow_timeslice)
    found = fleet.memo.get(key, _MISS)
    if found is _MISS:
        if len(fleet.memo) >= 4096:
            fleet.memo.clear()
        found = fleet.memo[key] = _fleet_problem(spec, fleet, allow_timeslice)
    if found is None:
        return None
    reason, message, details = found
    return (reason, message, dict(details))  # callers get their own details


def _form_problem(spec: JobSpec) -> Problem | None:
    """The first malformed field of `spec` (checked in this order), as `InvalidSpec`."""
    r = spec.resources
    forms = (r.gpus > 0) + (r.gpu_milli > 0) + (r.mig_profile is not None)
    if spec.replicas < 1:
        message = f"replicas must be >= 1 (got {spec.replicas})"
    elif spec.min_members is not None and not 1 <= spec.min_members <= spec.replicas:
        message = f"min_members must be within 1..replicas={spec.replicas} (got {spec.min_members})"
    elif forms > 1:
        message = "use only one of gpus, gpu_milli and mig_profile"
    elif r.gpus < 0 or r.cpu_milli < 0 or r.memory_mib < 0:
        message = "resources must not be negative"
    elif not 0 <= r.gpu_milli < 1000:
        message = f"gpu_milli must be within 1..999 (got {r.gpu_milli})"
    elif r.mig_profile is not None and not MIG_PROFILE.match(r.mig_profile):
        message = f"mig_profile {r.mig_profile!r} is not a MIG profile name like '3g.40gb'"
    elif spec.duration_s is not None and spec.duration_s < 0:
        message = "duration_s must be >= 0"
    else:
        return None
    return (RejectReason.InvalidSpec, message, {})


def _usable(kind: tuple[str, int], models: set[str], min_memory_mib: int) -> bool:
    """Whether GPUs of `kind` (model, memory) are of an allowed model with the memory."""
    return (not models or kind[0] in models) and kind[1] >= min_memory_mib


Usable = Callable[[tuple[str, int]], bool]
"""Whether GPUs of a (model, memory) kind are of a model the request allows, with its memory."""


def _fleet_problem(spec: JobSpec, fleet: FleetSummary, allow_timeslice: bool) -> Problem | None:
    """The first of `FLEET_RULES` that says the registered fleet could never run `spec`."""
    r = spec.resources
    usable = partial(_usable, models=set(r.gpu_models), min_memory_mib=r.min_gpu_memory_mib)
    for rule in FLEET_RULES:
        problem = rule(spec, fleet, allow_timeslice, usable)
        if problem is not None:
            return problem
    return None


def _model_missing(spec: JobSpec, fleet: FleetSummary, _ts: bool, _u: Usable) -> Problem | None:
    """No registered GPU of any model the request allows."""
    models = set(spec.resources.gpu_models)
    kinds = set(fleet.largest_clique) | fleet.mig
    if not models or any(model in models for model, _ in kinds):
        return None
    have = {model for model, _ in kinds}
    hint = suggestion(min(models), have) if len(models) == 1 else ""
    return (RejectReason.Unschedulable, f"no registered GPU of model {sorted(models)}{hint}", {})


def _node_too_small(spec: JobSpec, fleet: FleetSummary, _ts: bool, _u: Usable) -> Problem | None:
    """No node has the CPU and memory of one member."""
    r = spec.resources
    if r.cpu_milli <= fleet.max_cpu_milli and r.memory_mib <= fleet.max_memory_mib:
        return None
    return (
        RejectReason.Unschedulable,
        f"member needs {r.cpu_milli}m CPU / {r.memory_mib} MiB; largest node has "
        f"{fleet.max_cpu_milli}m / {fleet.max_memory_mib} MiB",
        {},
    )


def _cliques_too_small(
    spec: JobSpec, fleet: FleetSummary, _ts: bool, usable: Usable
) -> Problem | None:
    """Whole GPUs: no usable NVLink clique holds one member, or all of them together hold
    fewer members than the gang's minimum."""
    r = spec.resources
    if not r.gpus:
        return None
    largest = max((size for kind, size in fleet.largest_clique.items() if usable(kind)), default=0)
    if r.gpus > largest:
        return (
            RejectReason.TopologyUnsatisfiable,
            f"needs {r.gpus} GPUs in one NVLink clique; largest clique in the fleet has {largest}",
            {"largest_clique": largest},
        )
    members = spec.members_min()
    cliques = [size for kind, sizes in fleet.cliques.items() if usable(kind) for size in sizes]
    fit = sum(size // r.gpus for size in cliques)
    if members <= fit:
        return None
    return (
        RejectReason.Unschedulable,
        f"gang needs {members} x {r.gpus} GPUs (each member in one NVLink clique); the whole "
        f"fleet could hold at most {fit} such members ({sum(cliques)} GPUs in {len(cliques)} cliques)",
        {
            "members": members,
            "gpus_per_member": r.gpus,
            "max_members": fit,
            "fleet_gpus": sum(cliques),
        },
    )


def _no_shared_gpu(
    spec: JobSpec, fleet: FleetSummary, allow_timeslice: bool, usable: Usable
) -> Problem | None:
    """A GPU share: no usable mps GPU (nor timeslice GPU, for a class that allows them)."""
    r = spec.resources
    if not r.gpu_milli or any(
        usable((model, memory)) and (sharing == "mps" or allow_timeslice)
        for model, memory, sharing in fleet.shared
    ):
        return None
    return (
        RejectReason.Unschedulable,
        f"a {r.gpu_milli}m GPU share needs an mps GPU"
        + (
            " or a timeslice GPU"
            if allow_timeslice
            else " (timeslice GPUs are for classes that allow them)"
        )
        + "; the fleet has none matching",
        {},
    )


def _no_mig_profile(
    spec: JobSpec, fleet: FleetSummary, _ts: bool, usable: Usable
) -> Problem | None:
    """A MIG instance: no usable MIG-enabled GPU, or none offering the profile."""
    profile = spec.resources.mig_profile
    if not profile:
        return None
    if not any(usable(kind) for kind in fleet.mig):
        return (
            RejectReason.MIGProfileUnavailable,
            f"MIG {profile}: no MIG-enabled GPU in the fleet",
            {},
        )
    if any(usable(k) and profile_for(k[0], profile) for k in fleet.mig):
        return None
    offered = sorted({p for k in fleet.mig if usable(k) for p in profiles_of(k[0])})
    return (
        RejectReason.MIGProfileUnavailable,
        f"MIG {profile}: no MIG GPU in the fleet offers this profile (offered: "
        f"{', '.join(offered) or 'none'})",
        {"offered": offered},
    )


def _no_gpu_matches(
    spec: JobSpec, fleet: FleetSummary, _ts: bool, usable: Usable
) -> Problem | None:
    """Whole GPUs or a share: no registered GPU of an allowed model with the memory."""
    r = spec.resources
    kinds = set(fleet.largest_clique) | fleet.mig
    if not (r.gpu_milli or r.gpus) or any(usable(kind) for kind in kinds):
        return None
    return (RejectReason.Unschedulable, "no registered GPU matches the request", {})


FLEET_RULES: tuple[Callable[[JobSpec, FleetSummary, bool, Usable], Problem | None], ...] = (
    _model_missing,
    _node_too_small,
    _cliques_too_small,
    _no_shared_gpu,
    _no_mig_profile,
    _no_gpu_matches,
)
"""Why the registered fleet could never run a shape, in the order they are told."""


def profiles_of(model: str) -> list[str]:
    """MIG profile names a GPU model offers (none for a model without MIG)."""
    fam = family(model)
    return [] if fam is None else list(PROFILES[fam])
