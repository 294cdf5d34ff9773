"""Explaining a "no": reason code, quantitative message, per-node histogram.

Codes (shared vocabulary, see CONVENTIONS.md): ``Unschedulable`` (no node could host the
member even when empty), ``MIGPlacementUnavailable``, ``TopologyUnsatisfiable`` (enough
free GPUs, but not inside one NVLink clique), ``IsolationConflict`` (mps GPUs held by other
tenants, timeslice GPUs not allowed), ``Resources``, and ``GangIncomplete`` (some but
fewer than ``min_members`` members fit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Evidence:
    """What the explanation rules read about one member that fits on no node."""

    nodes: list[NodeState]
    member: MemberRequest
    hist: dict[str, int]
    """Rejection key -> node count (`node_rejections`)."""
    text: str
    """The histogram as a phrase (`histogram_text`)."""
    details: dict[str, Any]

    @property
    def dynamic(self) -> dict[str, int]:
        """Rejections that capacity becoming free could lift."""
        return {k: n for k, n in self.hist.items() if k not in STATIC}


def never_hostable(e: Evidence) -> Unplaceable | None:
    """`Unschedulable`: no node could host the member even when empty (or there are no nodes)."""
    if not e.nodes:
        return Unplaceable("Unschedulable", "the fleet has no nodes", e.details)
    if not e.dynamic:
        return Unplaceable("Unschedulable", f"no node can ever host this member; {e.text}", e.details)
    return None


def topology(e: Evidence) -> Unplaceable | None:
    """`TopologyUnsatisfiable`: enough free whole GPUs, but not inside one NVLink clique."""
    m = e.member
    if m.kind != "whole" or m.gpus <= 1:
        return None
    largest, free_total = e.details["largest_free_clique"], e.details["free_gpus"]
    if not (e.hist.get("free_clique", 0) or free_total >= m.gpus):
        return None
    return Unplaceable(
        "TopologyUnsatisfiable",
        f"needs {m.gpus} GPUs in one NVLink clique; largest free clique has {largest}; {e.text}",
        e.details)


def mig_layout(e: Evidence) -> Unplaceable | None:
    """`MIGPlacementUnavailable`: every GPU offering the MIG profile has no free slot for it."""
    m = e.member
    if m.kind != "mig" or not e.hist.get("mig_layout_full", 0):
        return None
    slots = sorted({slot_text(p) for n in e.nodes for g in n.spec.gpus
                    if (p := profile_for(g.model, m.mig_profile or "")) is not None})
    return Unplaceable(
        "MIGPlacementUnavailable",
        f"MIG {m.mig_profile}: no GPU with a free {' or '.join(slots)} slot; {e.text}", e.details)


def isolation(e: Evidence) -> Unplaceable | None:
    """`IsolationConflict`: at least as many nodes refuse for isolation (mps GPUs held by
    other tenants, timeslice GPUs not allowed) as for any other dynamic reason."""
    iso = sum(n for k, n in e.hist.items() if k in ISOLATION)
    other = sum(n for k, n in e.dynamic.items() if k not in ISOLATION and k != "excluded")
    if not iso or iso < other:
        return None
    what = ("mps GPUs busy with other tenants" if e.hist.get("mps_other_tenant")
            else "timeslice GPUs need allow_timeslice")
    return Unplaceable("IsolationConflict", f"{what}; {e.text}", e.details)


def resources(e: Evidence) -> Unplaceable | None:
    """`Resources`: not enough free capacity of the kind asked for (the default)."""
    return Unplaceable("Resources", f"needs {_need_text(e.member)}; {e.text}", e.details)


UNPLACEABLE: tuple[Callable[[Evidence], Unplaceable | None], ...] = (
    never_hostable, topology, mig_layout, isolation, resources,
)
"""Why one member fits nowhere: the first rule that answers gives the code (the order is the
precedence; `resources` always answers). See services/scheduler/pending.py for the table of
every pending reason."""


def member_unplaceable(
    nodes: list[NodeState], member: MemberRequest, tenant: str, allow_timeslice: bool,
    excluded: frozenset[str],
) -> Unplaceable:
    """Why one member fits on no node: the code, message and details."""
    hist = node_rejections(nodes, member, tenant, allow_timeslice, excluded)
    details: dict[str, Any] = {"nodes": {REJECTIONS.get(k, k): n for k, n in sorted(hist.items())},
                               "total_nodes": len(nodes)}
    e = Evidence(nodes, member, hist, histogram_text(hist, len(nodes)), details)
    if nodes and e.dynamic and member.kind == "whole":
        details["largest_free_clique"], details["free_gpus"] = _free_whole_gpus(nodes, member, allow_timeslice)
    for rule in UNPLACEABLE:
        found = rule(e)
        if found is not None:
            return found
    raise AssertionError("resources always answers")  # pragma: no cover


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
    """`GangIncomplete`: some members fit but fewer than ``min_members``: nothing is bound."""
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
