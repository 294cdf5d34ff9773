"""Consolidation: migrate a few running allocations so a job blocked only by fragmentation fits.

A queued job is *blocked by fragmentation* when the free capacity it could use would hold it
but no node (or NVLink clique, or MIG slot) has room in one piece. The pass looks, node by
node, for at most `consolidation_max_moves` movable allocations on that node whose release
lets the job be placed, and that themselves fit elsewhere at once (never on the freed nodes,
which are nominated to the job). The smallest such set wins: fewest moves, then fewest GPUs
moved, then least work at risk, then the node name (a total order).

Movable: active, not already being preempted or chosen in this decision, of a preemptible
class, checkpointable (its checkpoint save fits in its grace period, so the move loses no
work when the agent honours the request), not the job's own, not cancelled, and not
protected by the eviction protections that apply to any eviction (`NonPreemptible`,
`MinRuntime`, `EvictionBudget`, `DisruptionBudget` of `rules.EXCLUSIONS`); the moves together
stay within `max_lost_gpu_hours`. Grounds (priority, reclaim) do not matter: a move takes
nobody's capacity, the mover pays one checkpoint.

Pure: reads the ledger and plans on the outlook's trial fleet (forks of it), writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger.events.reasons import ExclusionReason, PreemptionReason
from gpuledger.services.domain.fold.config import defrag_settings
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.placement import Placement, UnknownAllocation, UnknownNode
from gpuledger.services.preemption.rules import EXCLUSIONS, Candidate, Scene
from gpuledger.services.preemption.victims import (
    Exclusion,
    candidate,
    count_replicas,
    lost_work_bound,
    over_guarantee,
    scene,
)

MOVE_PROTECTIONS = frozenset(
    {
        ExclusionReason.NonPreemptible,
        ExclusionReason.MinRuntime,
        ExclusionReason.EvictionBudget,
        ExclusionReason.DisruptionBudget,
    }
)
"""The exclusions that protect an allocation from being moved (the others are about the
right to take capacity, which a move does not)."""


@dataclass
class Move:
    cand: Candidate
    to_nodes: tuple[str, ...]


@dataclass
class ConsolidationPlan:
    moves: list[Move] = field(default_factory=list)
    target: Placement | None = None
    free_gpu_milli: int = 0
    considered: int = 0
    exclusions: list[Exclusion] = field(default_factory=list)
    declined: str | None = None
    """Why no consolidation (a message), when `moves` is empty."""

    def details(self) -> dict[str, Any]:
        return {
            "moves": [{**m.cand.describe(), "to_nodes": list(m.to_nodes)} for m in self.moves],
            "candidates_considered": self.considered,
            "excluded": [x.describe() for x in self.exclusions[:10]],
            "excluded_total": len(self.exclusions),
            "free_gpus": self.free_gpu_milli / 1000,
        }


def free_gpu_milli(state: Ledger, job: JobRecord, fleet, exclude: frozenset[str]) -> int:
    """Idle GPU milli the job's members could draw on (non-MIG GPUs of its allowed models on
    schedulable nodes it may use; MIG GPUs count their free memory slices for MIG jobs)."""
    models = job.spec.resources.gpu_models
    mig = job.spec.resources.mig_profile is not None
    total = 0
    for name in sorted(state.nodes):
        if name in exclude or state.nodes[name].lost:
            continue
        try:
            node = fleet.node_state(name)
        except UnknownNode:  # registered but not in the fleet: holds nothing
            continue
        if not node.schedulable:
            continue
        for pos, g in enumerate(node.spec.gpus):
            if models and g.model not in models:
                continue
            slots = node.mig[pos]
            if mig and slots is not None:
                total += slots.free_memory_slices * 1000 // 8
            elif not mig and slots is None:
                total += node.gpu_free[pos]
    return total


def _movable(
    state: Ledger, job: JobRecord, now_ms: int, taken, exclusions: list[Exclusion]
) -> list[Candidate]:
    s: Scene = scene(state, job, now_ms, taken)
    out: list[Candidate] = []
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        if rec.preemption is not None or alloc_id in taken or rec.job_id == job.job_id:
            continue
        victim = state.jobs[rec.job_id]
        if victim.cancel_requested:
            continue
        grace = state.config.grace_ms(victim.spec.checkpoint.grace_s, victim.spec.priority_class)
        if victim.spec.checkpoint.save_s * 1000 > grace:
            continue  # its checkpoint cannot finish before the kill: not checkpointable
        borrowing = over_guarantee(state, victim.tenant, s.releasing)
        cand = candidate(state, rec, victim, PreemptionReason.Consolidate, now_ms, borrowing)
        if victim.service is not None:
            count_replicas(s, victim.service, taken)
        verdict = None
        for rule in EXCLUSIONS:
            if rule.code in MOVE_PROTECTIONS:
                verdict = rule.protects(s, cand)
                if verdict is not None:
                    exclusions.append(Exclusion(cand, rule.code, verdict.message, verdict.until_ms))
                    break
        if verdict is None:
            out.append(cand)
            if victim.service is not None:
                s.budget_left[victim.service] -= 1
    return out


def _held_on(c: Candidate, node: str) -> int:
    """GPU milli the candidate holds on `node`."""
    per = c.rec.gpu_milli // max(1, len(c.rec.members))
    return per * sum(1 for m in c.rec.members if m.node == node)


def _idle_whole(state: Ledger, job: JobRecord, fleet, node: str) -> int:
    """Idle GPU milli on `node` in GPUs of the job's models (a cheap bound for the filter)."""
    try:
        n = fleet.node_state(node)
    except UnknownNode:
        return 0
    models = job.spec.resources.gpu_models
    return sum(
        n.gpu_free[pos]
        for pos, g in enumerate(n.spec.gpus)
        if n.mig[pos] is None and (not models or g.model in models)
    )


def _move_key(c: Candidate) -> tuple:
    return (c.rec.gpu_milli, c.at_risk_gpu_ms, -c.started_ms, c.rec.allocation_id)


def consolidation_plan(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    taken: set[str],
    exclude: frozenset[str],
    fleet,
) -> ConsolidationPlan:
    """The smallest set of moves that lets `job` be placed now, or why there is none."""
    settings = defrag_settings(state.config.policy)
    result = ConsolidationPlan()
    request = state.gang_request(job)
    policy = state.config.policy.placement_policy
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    result.free_gpu_milli = free_gpu_milli(state, job, fleet, exclude)
    if result.free_gpu_milli < need:
        result.declined = (
            f"not fragmentation: {result.free_gpu_milli / 1000:g} GPUs free where "
            f"it may run, it needs {need / 1000:g}"
        )
        return result
    movable = _movable(state, job, now_ms, taken, result.exclusions)
    result.considered = len(movable)
    by_node: dict[str, list[Candidate]] = {}
    for c in movable:
        for node in c.rec.nodes():
            if node not in exclude:
                by_node.setdefault(node, []).append(c)
    best: tuple[tuple, list[Move], Placement] | None = None
    member_need = job.spec.resources.gpus * 1000
    for node in sorted(by_node):
        cands = sorted(by_node[node], key=_move_key)
        most = max(
            max(_held_on(c, node) for c in cands),
            sum(_held_on(c, node) for c in cands[: settings.max_moves]),
        )
        if member_need and _idle_whole(state, job, fleet, node) + most < member_need:
            continue  # no set of moves tried here (below) frees enough GPUs on this node
        for chosen in _subsets(cands, settings.max_moves):
            found = _try(state, job, request, policy, exclude, fleet, chosen)
            if found is None:
                continue
            moves, placed = found
            key = (
                len(chosen),
                sum(c.rec.gpu_milli for c in chosen),
                sum(c.at_risk_gpu_ms for c in chosen),
                node,
            )
            if best is None or key < best[0]:
                best = (key, moves, placed)
            break  # subsets come smallest first: the first that works is this node's best
    if best is None:
        result.declined = (
            f"{result.free_gpu_milli / 1000:g} GPUs free but no set of at most "
            f"{settings.max_moves} movable allocations on one node makes room "
            f"({len(movable)} movable, {len(result.exclusions)} protected)"
        )
        return result
    _, moves, placed = best
    bound = lost_work_bound(state, [m.cand for m in moves])
    if bound is not None:
        result.declined = bound[1]
        return result
    result.moves, result.target = moves, placed
    return result


def _subsets(cands: list[Candidate], max_moves: int):
    """Candidate sets to try on one node, fewest moves first: every single candidate, then
    prefixes of the move order up to `max_moves` (bounded work: n + max_moves tries)."""
    for c in cands:
        yield [c]
    for k in range(2, min(max_moves, len(cands)) + 1):
        yield cands[:k]


def _try(
    state: Ledger,
    job: JobRecord,
    request,
    policy: str,
    exclude: frozenset[str],
    fleet,
    chosen: list[Candidate],
) -> tuple[list[Move], Placement] | None:
    """With `chosen` released: the job's placement and where each mover lands, or None."""
    released = tuple(c.rec.allocation_id for c in chosen)
    try:
        held = [fleet.allocation(a) for a in released]
    except UnknownAllocation:
        return None  # already released in the outlook
    placed = fleet.place(request, policy, exclude=exclude, assume_released=released, explain=False)
    if not isinstance(placed, Placement):
        return None
    trial = fleet.fork()  # dropped on return: the movers gone, the job placed, movers re-placed
    for a in released:
        trial.release(a)
    trial.allocate(f"~consolidation:{job.job_id}", job.tenant, placed, request)
    freed = frozenset(n for c in chosen for n in c.rec.nodes())
    moves: list[Move] = []
    for c, alloc in zip(chosen, held, strict=True):
        again = trial.place(alloc.request, policy, exclude=exclude | freed, explain=False)
        if not isinstance(again, Placement):
            return None
        trial.allocate(f"~moved:{c.rec.allocation_id}", alloc.tenant, again, alloc.request)
        moves.append(Move(c, tuple(sorted({m.node for m in again.members}))))
    return moves, placed
