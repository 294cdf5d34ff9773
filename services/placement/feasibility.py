"""Where on one node a member could go: its feasible options, or why none exists.

An *option* is ``(gpu_positions, mig_start)``: positions index ``NodeSpec.gpus``; whole-GPU
options hold ``gpus`` positions of one NVLink clique, share and MIG options hold one.
Scorers choose among options; they never invent them, so every scorer obeys the same hard
rules (capacity, clique, isolation, MIG validity).

Rules per GPU sharing mode (see `model.SHARING_MODES`): whole GPUs come from fully free
``exclusive`` or ``mps`` GPUs (``timeslice`` only for gangs allowing it); shares from
``mps`` GPUs idle or held by the same tenant, or ``timeslice`` GPUs when allowed; MIG
instances only from ``mig`` GPUs of a model offering the profile.

Rejections are keys of `REJECTIONS`; `STATIC` ones hold even on an empty node.
"""

from __future__ import annotations

from .mig import best_start, profile_for
from .model import GPU_MILLI, GpuSpec, MemberRequest
from .state import NodeState

Option = tuple[tuple[int, ...], int | None]

REJECTIONS: dict[str, str] = {
    "excluded": "excluded",
    "selector": "not matching the node selector",
    "unschedulable": "unschedulable",
    "cpu_capacity": "CPU capacity too small",
    "memory_capacity": "memory capacity too small",
    "wrong_model": "wrong model",
    "gpu_memory": "GPU memory too small",
    "no_mig_profile": "no MIG GPU offering the profile",
    "no_shareable_gpu": "no mps/timeslice GPU",
    "no_whole_gpu": "only MIG GPUs",
    "clique_too_small": "NVLink clique too small",
    "timeslice_not_allowed": "timeslice not allowed",
    "free_gpus": "insufficient free GPUs",
    "free_clique": "free GPUs split across cliques",
    "free_milli": "no GPU with enough free milli",
    "mps_other_tenant": "mps GPUs busy with other tenants",
    "mig_layout_full": "MIG layout full",
    "free_cpu": "insufficient free CPU",
    "free_memory": "insufficient free memory",
}
STATIC = frozenset(
    {
        "selector",
        "cpu_capacity",
        "memory_capacity",
        "wrong_model",
        "gpu_memory",
        "no_mig_profile",
        "no_shareable_gpu",
        "no_whole_gpu",
        "clique_too_small",
    }
)
ISOLATION = frozenset({"timeslice_not_allowed", "mps_other_tenant"})


def eligible_gpus(
    node: NodeState, member: MemberRequest, allow_timeslice: bool
) -> tuple[int, ...] | str:
    """Positions of GPUs that could ever serve this member, or a static rejection key."""
    spec = node.spec
    if spec.cpu_milli < member.cpu_milli:
        return "cpu_capacity"
    if spec.memory_mib < member.memory_mib:
        return "memory_capacity"
    if member.kind == "cpu":
        return ()
    out: list[int] = []
    misses: set[str] = set()
    for pos, g in enumerate(spec.gpus):
        miss = _gpu_miss(g, member, allow_timeslice)
        if miss is None:
            out.append(pos)
        else:
            misses.add(miss)
    if not out:
        return _no_gpu(member.kind, misses)
    if member.kind == "whole":
        cliques = [sum(1 for p in ps if p in out) for _, ps in node.cliques]
        if max(cliques, default=0) < member.gpus:
            return "clique_too_small"
    return tuple(out)


def _gpu_miss(g: GpuSpec, member: MemberRequest, allow_timeslice: bool) -> str | None:
    """Why GPU `g` can never serve the member, checked in this order (a rejection key, or
    "sharing" for a GPU of another sharing mode), or None when it can."""
    models = member.gpu_models
    if models and g.model not in models:
        return "wrong_model"
    if g.memory_mib < member.min_gpu_memory_mib:
        return "gpu_memory"
    kind = member.kind
    if kind == "mig":
        return None if _offers_profile(g, member) else "sharing"
    if g.sharing == "mig" or (kind == "milli" and g.sharing == "exclusive"):
        return "sharing"
    if g.sharing == "timeslice" and not allow_timeslice:
        return "timeslice_not_allowed"
    return None


def _offers_profile(g: GpuSpec, member: MemberRequest) -> bool:
    """Whether MIG GPU `g` offers the member's profile (within its fixed layout, if any)."""
    if g.sharing != "mig":
        return False
    prof = profile_for(g.model, member.mig_profile or "")
    if prof is None:
        return False
    return not g.mig_layout or any(i.profile == prof.name for i in g.mig_layout)


def _no_gpu(kind: str, misses: set[str]) -> str:
    """The static rejection of a node none of whose GPUs serves the member: the furthest
    check any GPU passed (`_gpu_miss`'s order) tells which."""
    if not misses - {"wrong_model"}:
        return "wrong_model"
    if not misses - {"wrong_model", "gpu_memory"}:
        return "gpu_memory"
    if "timeslice_not_allowed" in misses:
        return "timeslice_not_allowed"
    return {"mig": "no_mig_profile", "milli": "no_shareable_gpu"}.get(kind, "no_whole_gpu")


def options(
    node: NodeState,
    member: MemberRequest,
    tenant: str,
    eligible: tuple[int, ...],
) -> list[Option] | str:
    """Feasible options on ``node`` now (GPU rules first, then CPU and memory), or the
    dynamic rejection key. ``eligible`` comes from `eligible_gpus`."""
    kind = member.kind
    if kind == "whole":
        out = _whole_options(node, member, eligible)
    elif kind == "milli":
        out = _share_options(node, member, tenant, eligible)
    elif kind == "mig":
        out = _mig_options(node, member, eligible)
    else:
        out = [((), None)]
    if isinstance(out, str):
        return out
    if node.free_cpu < member.cpu_milli:
        return "free_cpu"
    if node.free_mem < member.memory_mib:
        return "free_memory"
    return out


def _whole_options(
    node: NodeState, member: MemberRequest, eligible: tuple[int, ...]
) -> list[Option] | str:
    """The first `gpus` fully free eligible GPUs of each NVLink clique that has as many."""
    need = member.gpus
    free = node.gpu_free
    out: list[Option] = []
    total = 0
    for _, positions in node.cliques:
        picked = [p for p in positions if p in eligible and free[p] == GPU_MILLI]
        total += len(picked)
        if len(picked) >= need:
            out.append((tuple(picked[:need]), None))
    if not out:
        return "free_clique" if total >= need else "free_gpus"
    return out


def _share_options(
    node: NodeState, member: MemberRequest, tenant: str, eligible: tuple[int, ...]
) -> list[Option] | str:
    """Each eligible GPU with the share free, idle or held by the same tenant (mps)."""
    d = member.gpu_milli
    free = node.gpu_free
    out: list[Option] = []
    blocked = False
    owners = node.mps_tenant
    for p in eligible:
        if free[p] >= d:
            owner = owners[p]
            if owner is not None and owner != tenant:
                blocked = True
            else:
                out.append(((p,), None))
    if not out:
        return "mps_other_tenant" if blocked else "free_milli"
    return out


def _mig_options(
    node: NodeState, member: MemberRequest, eligible: tuple[int, ...]
) -> list[Option] | str:
    """Each eligible MIG GPU with the best free start for the profile (within its layout)."""
    out: list[Option] = []
    for p in eligible:
        g = node.spec.gpus[p]
        prof = profile_for(g.model, member.mig_profile or "")
        allowed = None
        if g.mig_layout:
            allowed = tuple(i.start for i in g.mig_layout if i.profile == prof.name)  # type: ignore[union-attr]  # MIG GPUs carry a layout tuple
        start = best_start(node.mig[p], prof, g.model, allowed)  # type: ignore[arg-type]  # a MIG GPU has its slots
        if start is not None:
            out.append(((p,), start))
    if not out:
        return "mig_layout_full"
    return out
