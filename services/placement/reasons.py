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

from gpuledger.events.reasons import PendingReason

from .feasibility import ISOLATION, REJECTIONS, STATIC, eligible_gpus, options
from .mig import profile_for, slot_text
from .model import GPU_MILLI, GangRequest, MemberRequest, Unplaceable
from .state import NodeState


def node_key(node: NodeState, member: MemberRequest, tenant: str, allow_timeslice: bool) -> str:
    """One node's rejection key for the member ("fits" if it would fit), excluded aside. A
    node outside the member's `node_selector` is "selector" whatever its state."""
    if not node.selected(member.node_selector):
        return "selector"
    if not node.schedulable:
        return "unschedulable"
    elig = eligible_gpus(node, member, allow_timeslice)
    if isinstance(elig, str):
        return elig
    opts = options(node, member, tenant, elig)
    return opts if isinstance(opts, str) else "fits"


def node_rejections(
    nodes: Iterable[NodeState],
    member: MemberRequest,
    tenant: str,
    allow_timeslice: bool,
    excluded: frozenset[str],
) -> dict[str, int]:
    """Histogram of rejection keys over ``nodes`` (nodes that would fit count as "fits").
    The brute-force walk; `Fleet` keeps the same counts incrementally per request shape."""
    hist: dict[str, int] = {}
    for node in nodes:
        key = (
            "excluded" if node.name in excluded else node_key(node, member, tenant, allow_timeslice)
        )
        hist[key] = hist.get(key, 0) + 1
    return hist


def selector_text(selector: tuple[tuple[str, str], ...]) -> str:
    """``not in partition=a100`` (pairs joined by commas): the phrase of the "selector" key."""
    return "not in " + ",".join(f"{k}={v}" for k, v in selector)


def phrase(key: str, member: MemberRequest | None = None) -> str:
    """The words of one rejection key (the selector's own for "selector")."""
    if key == "selector" and member is not None and member.node_selector:
        return selector_text(member.node_selector)
    return REJECTIONS.get(key, key)


def histogram_text(hist: dict[str, int], total: int, member: MemberRequest | None = None) -> str:
    """``0/64 nodes: 40 insufficient free GPUs, 20 wrong model`` (largest count first);
    nodes outside a member's node selector read ``120 not in partition=a100``."""
    fits = hist.get("fits", 0)
    parts = sorted(
        ((n, phrase(k, member)) for k, n in hist.items() if k != "fits"),
        key=lambda x: (-x[0], x[1]),
    )
    return f"{fits}/{total} nodes: " + ", ".join(f"{n} {phrase}" for n, phrase in parts)


NO_WHOLE: tuple[int, int] = (0, 0)


def whole_probe(member: MemberRequest) -> MemberRequest:
    """The one-GPU request whose eligible GPUs `whole_stat` counts."""
    return MemberRequest(
        gpus=1, gpu_models=member.gpu_models, min_gpu_memory_mib=member.min_gpu_memory_mib
    )


def whole_stat(
    node: NodeState,
    member: MemberRequest,
    allow_timeslice: bool,
    eligible: tuple[int, ...] | str | None = None,
) -> tuple[int, int]:
    """(largest count of free GPUs inside one clique, free GPUs) of one node for a whole-GPU
    member: 0s unless the node is schedulable with enough free CPU and memory; counts GPUs
    of allowed models and memory (``eligible``: `eligible_gpus` of `whole_probe`, if known)."""
    if (
        not node.schedulable
        or not node.selected(member.node_selector)
        or node.free_cpu < member.cpu_milli
        or node.free_mem < member.memory_mib
    ):
        return NO_WHOLE
    elig = (
        eligible
        if eligible is not None
        else eligible_gpus(node, whole_probe(member), allow_timeslice)
    )
    if isinstance(elig, str):
        return NO_WHOLE
    free = node.gpu_free
    best = total = 0
    for _, positions in node.cliques:
        n = 0
        for p in positions:
            if free[p] == GPU_MILLI and p in elig:
                n += 1
        if n > best:
            best = n
        total += n
    return (best, total) if total else NO_WHOLE


def _free_whole_gpus(
    nodes: list[NodeState], member: MemberRequest, allow_timeslice: bool
) -> tuple[int, int]:
    """(largest count of free GPUs inside one clique, free GPUs in all) over schedulable
    nodes with enough free CPU and memory, counting GPUs of allowed models and memory."""
    best = total = 0
    for node in nodes:
        b, t = whole_stat(node, member, allow_timeslice)
        best = max(best, b)
        total += t
    return best, total


@dataclass(frozen=True)
class Evidence:
    """What the explanation rules read about one member that fits on no node."""

    total: int
    """Nodes in the fleet."""
    models: tuple[str, ...]
    """GPU models present in the fleet (sorted)."""
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
    if not e.total:
        return Unplaceable(PendingReason.Unschedulable, "the fleet has no nodes", e.details)
    if not e.dynamic:
        return Unplaceable(
            PendingReason.Unschedulable, f"no node can ever host this member; {e.text}", e.details
        )
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
        PendingReason.TopologyUnsatisfiable,
        f"needs {m.gpus} GPUs in one NVLink clique; largest free clique has {largest}; {e.text}",
        e.details,
    )


def mig_layout(e: Evidence) -> Unplaceable | None:
    """`MIGPlacementUnavailable`: every GPU offering the MIG profile has no free slot for it."""
    m = e.member
    if m.kind != "mig" or not e.hist.get("mig_layout_full", 0):
        return None
    slots = sorted(
        {
            slot_text(p)
            for model in e.models
            if (p := profile_for(model, m.mig_profile or "")) is not None
        }
    )
    return Unplaceable(
        PendingReason.MIGPlacementUnavailable,
        f"MIG {m.mig_profile}: no GPU with a free {' or '.join(slots)} slot; {e.text}",
        e.details,
    )


def isolation(e: Evidence) -> Unplaceable | None:
    """`IsolationConflict`: at least as many nodes refuse for isolation (mps GPUs held by
    other tenants, timeslice GPUs not allowed) as for any other dynamic reason."""
    iso = sum(n for k, n in e.hist.items() if k in ISOLATION)
    other = sum(n for k, n in e.dynamic.items() if k not in ISOLATION and k != "excluded")
    if not iso or iso < other:
        return None
    what = (
        "mps GPUs busy with other tenants"
        if e.hist.get("mps_other_tenant")
        else "timeslice GPUs need allow_timeslice"
    )
    return Unplaceable(PendingReason.IsolationConflict, f"{what}; {e.text}", e.details)


def resources(e: Evidence) -> Unplaceable | None:
    """`Resources`: not enough free capacity of the kind asked for (the default)."""
    return Unplaceable(
        PendingReason.Resources, f"needs {_need_text(e.member)}; {e.text}", e.details
    )


UNPLACEABLE: tuple[Callable[[Evidence], Unplaceable | None], ...] = (
    never_hostable,
    topology,
    mig_layout,
    isolation,
    resources,
)
"""Why one member fits nowhere: the first rule that answers gives the code (the order is the
precedence; `resources` always answers). See services/domain/policy/pending.py for the table of
every pending reason."""


def member_unplaceable(
    nodes: list[NodeState],
    member: MemberRequest,
    tenant: str,
    allow_timeslice: bool,
    excluded: frozenset[str],
) -> Unplaceable:
    """Why one member fits on no node: the code, message and details (brute force: walks
    every node; `Fleet` answers the same from its incremental counts via `explain`)."""
    hist = node_rejections(nodes, member, tenant, allow_timeslice, excluded)
    free = None
    if nodes and member.kind == "whole":
        free = _free_whole_gpus(nodes, member, allow_timeslice)
    models = tuple(sorted({g.model for n in nodes for g in n.spec.gpus}))
    return explain(hist, len(nodes), models, member, free)


def explain(
    hist: dict[str, int],
    total: int,
    models: tuple[str, ...],
    member: MemberRequest,
    free_whole: tuple[int, int] | None,
) -> Unplaceable:
    """The explanation from aggregate counts: ``hist`` (rejection key -> nodes, zero counts
    left out), ``total`` nodes, the fleet's GPU ``models`` and, for whole-GPU members,
    (largest free clique, free GPUs) from `whole_stat` over the nodes."""
    details: dict[str, Any] = {
        "nodes": {phrase(k, member): n for k, n in sorted(hist.items())},
        "total_nodes": total,
    }
    if member.node_selector:
        details["node_selector"] = dict(member.node_selector)
    e = Evidence(total, models, member, hist, histogram_text(hist, total, member), details)
    if total and e.dynamic and member.kind == "whole":
        details["largest_free_clique"], details["free_gpus"] = free_whole or NO_WHOLE
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
    where = ""
    if member.node_selector:
        where = " on nodes with " + ",".join(f"{k}={v}" for k, v in member.node_selector)
    return f"{gpu}, {member.cpu_milli} CPU milli, {member.memory_mib} MiB per member{where}"


def gang_incomplete(gang: GangRequest, fitted: int, why_next: Unplaceable) -> Unplaceable:
    """`GangIncomplete`: some members fit but fewer than ``min_members``: nothing is bound."""
    need = gang.required_members
    details = dict(why_next.details)
    details.update(
        {
            "fitted_members": fitted,
            "min_members": need,
            "replicas": gang.replicas,
            "next_member_reason": why_next.reason,
        }
    )
    return Unplaceable(
        PendingReason.GangIncomplete,
        f"only {fitted} of {gang.replicas} members fit (needs at least {need}); "
        f"member {fitted + 1}: {why_next.message}",
        details,
    )


def recount(hist: dict[Any, int], old: Any, new: Any) -> None:
    """Move one count of the multiset `hist` from key `old` (None: from nowhere) to `new`; a
    key whose count reaches 0 is dropped, so `hist` never holds a zero."""
    if old is not None:
        n = hist[old] - 1
        if n:
            hist[old] = n
        else:
            del hist[old]
    hist[new] = hist.get(new, 0) + 1
