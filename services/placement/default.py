"""The `default` scorer (ours): fragmentation- and stranding-aware, topology-aware.

FGD's fragmentation F (clique-aware: multi-GPU typical tasks need one NVLink clique) plus
*stranded GPU* S, per GPU model and node type: idle GPU milli that the node's free CPU can
no longer feed at the CPU-per-GPU ratio of the typical tasks that could run on a node of
its type (a model they allow, enough GPUs and CPU capacity), capped at the type's own CPU
per GPU, weighted by those tasks' count (`Fragmentation.strand_profile`). Under plain FGD
most GPUs left idle at full load sit behind exhausted CPU; counting S as fragmentation
steers CPU-heavy work (including CPU-only tasks) away from nodes whose GPUs would be
stranded. The per-type demand and cap keep S from calling a CPU-lean node type stranded
when it is empty (a fleet-wide ratio did, and filled scarce GPU models with tasks that
could run anywhere, losing to FGD on model-constrained traces).

F is computed over the typical tasks weighted by scarcity (`Fragmentation.scarcity_weighted`:
a task that requires GPU models holding 1/7 of the fleet's GPUs counts 7 times), so keeping
a scarce model usable for the tasks that can only run there outweighs filling it with work
that could run anywhere; on a fleet of one model, or a workload without model constraints,
F is FGD's.

Score: FGD's integer sigmoid score of ``d(F) + w d(S)`` (S weighted by its demand ``w``,
F by the scarcity-weighted typical tasks), then (tie) less S after the placement,
then the fleet's node order (an implicit consolidation, as in FGD). MIG members use MIG
packing. Gang members are kept under one leaf switch by the engine.
"""

from __future__ import annotations

from .feasibility import Option
from .model import GPU_MILLI, MemberRequest
from .scorers import ScoreContext, _mig_score, frag_delta_scores, free_gpu_milli, register
from .state import NodeState

_TIE = 1 << 40


class DefaultScorer:
    """See module docstring."""

    name = "default"
    state_only = True  # the score is a function of NodeState.state_key (engine memo)

    def best(self, ctx: ScoreContext, node: NodeState, member: MemberRequest, opts: list[Option]):
        if member.kind == "mig":
            return _mig_score(node, member, opts)
        base = ctx.frag
        if base is None:
            return 0, opts[0]
        frag = ctx.frag_scarce or base
        idle = free_gpu_milli(node)
        taken = 0 if member.kind == "cpu" else (member.gpu_milli or GPU_MILLI * member.gpus)
        spec = node.spec
        weight, ratio, mem_ratio = frag.base.strand_profile(
            node.frag_layout, spec.cpu_milli, spec.memory_mib
        )
        strand_before = frag.stranded(ratio, idle, node.free_cpu, mem_ratio, node.free_mem)
        strand_after = frag.stranded(
            ratio,
            idle - taken,
            node.free_cpu - member.cpu_milli,
            mem_ratio,
            node.free_mem - member.memory_mib,
        )
        bonus = weight * (strand_before - strand_after)
        best: tuple[int, Option] | None = None
        for delta, _, opt in frag_delta_scores(frag, node, member, opts):
            score = frag.score(delta + bonus)
            if best is None or score > best[0]:
                best = (score, opt)
        score, opt = best  # type: ignore[misc]
        return score * _TIE - strand_after, opt


register(DefaultScorer())
