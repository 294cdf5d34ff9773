"""Explaining a "no": reason code, quantitative message, per-node histogram.

Codes (shared vocabulary, see CONVENTIONS.md): ``Unschedulable`` (no node could host the
member even when empty), ``MIGPlacementUnavailable``, ``TopologyUnsatisfiable`` (enough
free GPUs, but not inside one NVLink clique), ``IsolationConflict`` (mps GPUs held by other
tenants, timeslice GPUs not allowed), ``Resources``, and ``GangIncomplete`` (some but
fewer than ``min_members`` members fit).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .feasibility import ISOLATION, REJECTIONS, STATIC, eligible_gpus, options
from .mig import profile_for, slot_text
from .model import GPU_MILLI, GangRequest, MemberRequest, Unplaceable
from .state import NodeState


def node_rejections(
    nodes: Iterable[NodeState], member: MemberRequest, tenant: str, allow_timeslice: bool,
    excluded: frozenset[str],
) -> dict[str, int]:
    """Histogram of rejection keys over ``nodes`` (nodes that would fit count as "fits")."""
    hist: dict[str, int] = {}
    for node in nodes:
        if node.name in excluded:
            key = "excluded"
        elif not node.schedulable:
            key = "unschedulable"
        else:
            elig = eligible_gpus(node, member, allow_timeslice)
            key = elig if isinstance(elig, str) else None
            if key is None:
                opts = options(node, member, tenant, elig)  # type: ignore[arg-type]
                key = opts if isinstance(opts, str) else "fits"
        hist[key] = hist.get(key, 0) + 1
    return hist


def histogram_text(hist: dict[str, int], total: int) -> str:
    """``0/64 nodes: 40 insufficient free GPUs, 20 wrong model`` (largest count first)."""
    fits = hist.get("fits", 0)
    parts = sorted(((n, REJECTIONS.get(k, k)) for k, n in hist.items() if k != "fits"),
                   key=lambda x: (-x[0], x[1]))
    return f"{fits}/{total} nodes: " + ", ".join(f"{n} {phrase}" for n, phrase in parts)


def _free_whole_gpus(nodes: list[NodeState], member: MemberRequest, allow_timeslice: bool) -> tuple[int, int]:
    """(largest count of free GPUs inside one clique, free GPUs in all) over schedulable
    nodes with enough free CPU and memory, counting GPUs of allowed models and memory."""
    probe = MemberRequest(gpus=1, gpu_models=member.gpu_models,
                          min_gpu_memory_mib=member.min_gpu_memory_mib)
    best = total = 0
    for node in nodes:
        if (not node.schedulable or node.free_cpu < member.cpu_milli
                or node.free_mem < member.memory_mib):
            continue
        elig = eligible_gpus(node, probe, allow_timeslice)
        if isinstance(elig, str):
            continue
        for _, positions in node.cliques:
            n = sum(1 for p in positions if p in elig and node.gpu_free[p] == GPU_MILLI)
            best = max(best, n)
            total += n
    return best, total


def member_unplaceable(
    nodes: list[NodeState], member: MemberRequest, tenant: str, allow_timeslice: bool,
    excluded: frozenset[str],
) -> Unplaceable:
    """Why one member fits on no node: the code, message and details."""
    hist = node_rejections(nodes, member, tenant, allow_timeslice, excluded)
    total = len(nodes)
    text = histogram_text(hist, total)
    details: dict[str, Any] = {"nodes": {REJECTIONS.get(k, k): n for k, n in sorted(hist.items())},
                               "total_nodes": total}
    dynamic = {k: n for k, n in hist.items() if k not in STATIC}
    kind = member.kind
    if not dynamic and total:
        return Unplaceable("Unschedulable", f"no node can ever host this member; {text}", details)
    if not total:
        return Unplaceable("Unschedulable", "the fleet has no nodes", details)
    if kind == "whole":
        largest, free_total = _free_whole_gpus(nodes, member, allow_timeslice)
        details["largest_free_clique"] = largest
        details["free_gpus"] = free_total
        if member.gpus > 1 and (hist.get("free_clique", 0) or free_total >= member.gpus):
            return Unplaceable(
                "TopologyUnsatisfiable",
                f"needs {member.gpus} GPUs in one NVLink clique; largest free clique has "
                f"{largest}; {text}", details)
    if kind == "mig" and hist.get("mig_layout_full", 0):
        slots = sorted({slot_text(p) for n in nodes for g in n.spec.gpus
                        if (p := profile_for(g.model, member.mig_profile or "")) is not None})
        return Unplaceable(
            "MIGPlacementUnavailable",
            f"MIG {member.mig_profile}: no GPU with a free {' or '.join(slots)} slot; {text}",
            details)
    iso = sum(n for k, n in hist.items() if k in ISOLATION)
    other = sum(n for k, n in dynamic.items() if k not in ISOLATION and k != "excluded")
    if iso and iso >= other:
        what = ("mps GPUs busy with other tenants" if hist.get("mps_other_tenant")
                else "timeslice GPUs need allow_timeslice")
        return Unplaceable("IsolationConflict", f"{what}; {text}", details)
    need = _need_text(member)
    return Unplaceable("Resources", f"needs {need}; {text}", details)


def _need_text(member: MemberRequest) -> str:
    kind = member.kind
    gpu = {
        "whole": f"{member.gpus} GPU" + ("s" * (member.gpus > 1)),
        "milli": f"{member.gpu_milli} GPU milli",
        "mig": f"MIG {member.mig_profile}",
        "cpu": "no GPU",
    }[kind]
    return f"{gpu}, {member.cpu_milli} CPU milli, {member.memory_mib} MiB per member"


def gang_incomplete(gang: GangRequest, fitted: int, why_next: Unplaceable) -> Unplaceable:
    """Some members fit but fewer than ``min_members``: nothing is bound."""
    need = gang.required_members
    details = dict(why_next.details)
    details.update({"fitted_members": fitted, "min_members": need, "replicas": gang.replicas,
                    "next_member_reason": why_next.reason})
    return Unplaceable(
        "GangIncomplete",
        f"only {fitted} of {gang.replicas} members fit (needs at least {need}); "
        f"member {fitted + 1}: {why_next.message}",
        details,
    )
