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

F also counts host memory when the typical tasks ask memory (a node without the memory for
a task cannot host it, like one without its CPU), and S is fed by the node's CPU and its
memory (`Fragmentation.strand_profile`, `Fragmentation.stranded`).

Score: FGD's integer sigmoid score of ``d(F) + w d(S)`` (S weighted by its demand ``w``,
F by the scarcity-weighted typical tasks), then (tie) less S after the placement, then the
fleet's node order (an implicit consolidation, as in FGD). Two cases score by
``d(F) + w d(S)`` itself instead (the sigmoid is monotone, so only ties inside its integer
bands change: 0 below -4.6 GPUs' worth, 99 above +4.6, 40 milli wide near 0):

- a CPU-only member: it adds no GPU, so on every node it can only make F and S worse, and
  the bands tied every node it would damage by more than 4.6 GPUs' worth, leaving the
  choice to the tie order;
- every member when the workload is *host-bound* (`ScoreContext.host_bound`: the typical
  tasks ask at least the fleet's CPU, or memory, per GPU): then F and S move by several
  GPUs' worth per placement, and packing the first nodes of the tie order runs their CPU
  out under GPUs still idle. Where the workload is not host-bound the bands' ties are
  what consolidates (scoring every member without them lost 0.5 points on the default
  openb pod list, seeds 42-43).

MIG members use MIG packing. Gang members are kept under one leaf switch by the engine.
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
        raw = ctx.host_bound or member.kind == "cpu"
        for delta, _, opt in frag_delta_scores(frag, node, member, opts):
            score = delta + bonus if raw else frag.score(delta + bonus)
            if best is None or score > best[0]:
                best = (score, opt)
        score, opt = best  # type: ignore[misc]  # opts is never empty here
        return score * _TIE - strand_after, opt


register(DefaultScorer())
