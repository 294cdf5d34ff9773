"""MIG re-geometry: give an idle MIG GPU a layout with the profile a queued job asks for.

A GPU with a fixed MIG layout (`GpuInfo.mig_layout`) offers only its pre-created instances;
changing the layout drains the GPU, so it is done only on a GPU with no instance in use, at
most `mig_regeometry_per_window` times per node per `mig_regeometry_window_s`, one request
per node at a time, and only when the job is waiting with `MIGPlacementUnavailable`. The new
layout keeps as much of the old one as still fits around one instance of the profile
(`services.domain.inputs.mig_layouts.target_layout`). GPUs are tried in node then index order.

Only simulated agents apply layouts today (the NVML agent has no create/destroy path yet), so
only simulated nodes are candidates. Pure: reads the ledger and the trial fleet only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger.services.domain.fold.config import defrag_settings
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.inputs.mig_layouts import offers, target_layout
from gpuledger.services.placement import UnknownNode, profile_for


@dataclass
class Regeometry:
    node: str = ""
    gpu_index: int = -1
    layout: tuple[str, ...] = ()
    previous: tuple[str, ...] = ()
    considered: int = 0
    rate_limited: list[str] = field(default_factory=list)
    busy: int = 0

    def details(self, profile: str, window_ms: int, per_window: int, used: int) -> dict[str, Any]:
        return {
            "profile": profile,
            "gpus_considered": self.considered,
            "gpus_in_use": self.busy,
            "rate_limited_nodes": self.rate_limited[:10],
            "window_s": window_ms // 1000,
            "per_window": per_window,
            "node_regeometries_in_window": used,
        }


def in_window(state: Ledger, node: str, now_ms: int, window_ms: int) -> int:
    """Re-geometry requests of `node` in the window ending now."""
    return sum(1 for t in state.mig.mig_history.get(node, ()) if t > now_ms - window_ms)


def regeometry_for(
    state: Ledger, job: JobRecord, now_ms: int, exclude: frozenset[str], fleet: Any
) -> Regeometry:
    """The idle GPU to re-partition for `job` (node empty when there is none)."""
    settings = defrag_settings(state.config.policy)
    res = job.spec.resources
    out = Regeometry()
    profile = res.mig_profile
    if profile is None:
        return out
    for name in sorted(state.nodes):
        node = _candidate_node(state, name, res, exclude, fleet)
        if node is None:
            continue
        rec = state.nodes[name]
        for g in rec.info.gpus:
            fixed = _layout_lacking(g, res, profile)
            if fixed is None:
                continue
            out.considered += 1
            pos = next(i for i, s in enumerate(node.spec.gpus) if s.index == g.index)
            if not node.mig[pos].empty:
                out.busy += 1
                continue
            if in_window(state, name, now_ms, settings.window_ms) >= settings.per_window:
                if name not in out.rate_limited:
                    out.rate_limited.append(name)
                continue
            layout = target_layout(g.model, fixed, profile)
            if layout is None:
                continue
            out.node, out.gpu_index, out.layout, out.previous = (
                name,
                g.index,
                layout,
                fixed,
            )
            return out
    return out


def _candidate_node(
    state: Ledger, name: str, res: Any, exclude: frozenset[str], fleet: Any
) -> Any | None:
    """The fleet's state of node `name` if a re-geometry may go there for a member needing
    `res`: a live simulated node, not excluded, with no re-geometry under way, schedulable,
    with the member's CPU and memory free; else None."""
    rec = state.nodes[name]
    if rec.lost or not rec.simulated or name in exclude or name in state.mig.mig_requests:
        return None
    try:
        node = fleet.node_state(name)
    except UnknownNode:
        return None
    if not node.schedulable or node.free_cpu < res.cpu_milli or node.free_mem < res.memory_mib:
        return None
    return node


def _layout_lacking(g: Any, res: Any, profile: str) -> tuple[str, ...] | None:
    """The fixed layout of healthy MIG GPU `g`, of a model and memory the member allows, if
    the GPU could offer `profile` but its layout does not (else its instances are busy, not
    missing); None otherwise."""
    layout = g.mig_layout
    if g.sharing != "mig" or not layout or not g.healthy:
        return None
    if res.gpu_models and g.model not in res.gpu_models:
        return None
    if g.memory_mib < res.min_gpu_memory_mib or profile_for(g.model, profile) is None:
        return None
    return None if offers(g.model, layout, profile) else tuple(layout)


def rate_limit_lapses_ms(state: Ledger, nodes: list[str], now_ms: int) -> int | None:
    """When the first of the rate-limited `nodes` may be re-partitioned again."""
    settings = defrag_settings(state.config.policy)
    times = []
    for n in nodes:
        recent = sorted(
            t for t in state.mig.mig_history.get(n, ()) if t > now_ms - settings.window_ms
        )
        if len(recent) >= settings.per_window:
            times.append(recent[-settings.per_window] + settings.window_ms)
    return min(times, default=None)
