"""Scorers: how to rank the feasible options of one node for one member.

A scorer sees one node, the member and its feasible options (from `feasibility`), and
returns ``(score, option)``: an integer, higher is better, and the option it picks on that
node. The engine takes the node with the highest score; equal scores go to the node ranked
first in the fleet's node order (a seed-derived order may be supplied as data). A score
must be a pure function of the node's state, the member and the `ScoreContext`: the engine
caches it per (scorer, member shape, node) and recomputes only nodes that changed. A scorer
whose result depends on nothing of the node but `NodeState.state_key` (no names, UUIDs, GPU
indices or rank) sets ``state_only = True``: the engine then scores each distinct node
state once per member shape (all built-in scorers do).

Registry `SCORERS`: ``bestfit``, ``packing``, ``fgd`` and ``default`` (ours).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from .feasibility import Option
from .fragmentation import Fragmentation, TypicalTask
from .mig import profile_for
from .model import GPU_MILLI, MemberRequest
from .state import NodeState


class ScoreContext(msgspec.Struct, frozen=True):
    """Fleet-wide inputs of scorers: largest node capacities (normalisation), the workload's
    typical tasks (fragmentation), the same tasks weighted by the scarcity of the GPU
    models they require in this fleet (`Fragmentation.scarcity_weighted`, for `default`),
    and whether they would run the fleet out of CPU or memory before GPUs."""

    max_node_cpu: int = 1
    max_node_gpu_milli: int = 1
    frag: Fragmentation | None = None
    frag_scarce: Fragmentation | None = None
    host_bound: bool = False
    """The typical tasks ask at least the fleet's CPU (or memory) per GPU
    (`Fragmentation.host_bound`; read by `default`)."""

    def __hash__(self) -> int:  # frag is compared by identity
        return hash(
            (
                self.max_node_cpu,
                self.max_node_gpu_milli,
                id(self.frag),
                id(self.frag_scarce),
                self.host_bound,
            )
        )


class Scorer(Protocol):
    """The scorer interface."""

    name: str

    def best(
        self, ctx: ScoreContext, node: NodeState, member: MemberRequest, opts: list[Option]
    ) -> tuple[int, Option]: ...


def gpu_milli_taken(member: MemberRequest) -> int:
    """Milli a member takes from each GPU of a whole/share option."""
    return GPU_MILLI if member.gpus else member.gpu_milli


def free_gpu_milli(node: NodeState) -> int:
    """Idle milli over the node's non-MIG GPUs."""
    return sum(f for f, m in zip(node.gpu_free, node.mig, strict=True) if m is None)


def _mig_score(node: NodeState, member: MemberRequest, opts: list[Option]) -> tuple[int, Option]:
    """MIG packing: the GPU with the fewest free memory slices after carving (keeps
    empty MIG GPUs whole for large profiles); lowest position on ties."""
    best: tuple[int, Option] | None = None
    for opt in opts:
        pos = opt[0][0]
        g = node.spec.gpus[pos]
        prof = profile_for(g.model, member.mig_profile or "")
        left = node.mig[pos].free_memory_slices - prof.memory_slices  # type: ignore[union-attr]  # a MIG GPU has its slots
        score = -left
        if best is None or score > best[0]:
            best = (score, opt)
    return best  # type: ignore[return-value]  # callers pass at least one option


class BestFit:
    """Best-fit (FGD paper baseline): minimise the node's leftover CPU and GPU after the
    placement, each normalised by the largest node's capacity, equal weights; a share takes
    the tightest-fitting GPU. Score: ``-(cpu_left/max_cpu + gpu_left/max_gpu)`` scaled to
    an integer (common denominator)."""

    name = "bestfit"
    state_only = True  # the score is a function of NodeState.state_key (engine memo)

    def best(self, ctx: ScoreContext, node: NodeState, member: MemberRequest, opts: list[Option]):
        if member.kind == "mig":
            mig_score, opt = _mig_score(node, member, opts)
            cpu_left = node.free_cpu - member.cpu_milli
            return -cpu_left * ctx.max_node_gpu_milli * 8 + mig_score, opt
        taken = gpu_milli_taken(member) * max(1, member.gpus)
        gpu_left = free_gpu_milli(node) - (taken if member.kind != "cpu" else 0)
        cpu_left = node.free_cpu - member.cpu_milli
        score = -(cpu_left * ctx.max_node_gpu_milli + gpu_left * ctx.max_node_cpu)
        opt = opts[0]
        if member.kind == "milli":
            free = node.gpu_free
            opt = min(opts, key=lambda o: (free[o[0][0]], o[0][0]))
        return score, opt


class Packing:
    """GPU packing (FGD paper baseline): consolidate on the busiest GPUs and nodes. Prefer
    the node with the most allocated GPU milli after placement; inside it, a share takes
    the fullest GPU that fits."""

    name = "packing"
    state_only = True  # the score is a function of NodeState.state_key (engine memo)

    def best(self, ctx: ScoreContext, node: NodeState, member: MemberRequest, opts: list[Option]):
        if member.kind == "mig":
            return _mig_score(node, member, opts)
        total = sum(GPU_MILLI for m in node.mig if m is None)
        used = total - free_gpu_milli(node)
        if member.kind == "milli":
            free = node.gpu_free
            opt = min(opts, key=lambda o: (free[o[0][0]], o[0][0]))
            return (used + member.gpu_milli) * 2048 - (free[opt[0][0]] - member.gpu_milli), opt
        return (used + GPU_MILLI * member.gpus) * 2048, opts[0]


def frag_delta_scores(
    frag: Fragmentation, node: NodeState, member: MemberRequest, opts: list[Option]
) -> list[tuple[int, int, Option]]:
    """For each option: (scaled F before - F after, FGD score, option). Options that leave
    the same GPU free-milli multiset share one evaluation."""
    layout = node.frag_layout
    free = node.gpu_free
    memo = node.frag_memo
    if memo is not None and memo[0] == node.version and memo[1] is frag:
        before = memo[2]
    else:
        before = frag.node_frag(layout, node.free_cpu, free, node.free_mem)
        node.frag_memo = (node.version, frag, before)
    cpu_after = node.free_cpu - member.cpu_milli
    mem_after = node.free_mem - member.memory_mib
    taken = gpu_milli_taken(member)
    out = []
    seen: dict[int | tuple[int, ...], int] = {}
    for opt in opts:
        positions = opt[0]
        sig = free[positions[0]] if len(positions) == 1 else tuple([free[p] for p in positions])
        delta = seen.get(sig)
        if delta is None:
            after_free = list(free)
            for p in positions:
                after_free[p] -= taken
            delta = before - frag.node_frag(layout, cpu_after, after_free, mem_after)
            seen[sig] = delta
        out.append((delta, frag.score(delta), opt))
    return out


class Fgd:
    """Fragmentation gradient descent (Weng et al., ATC '23): the option that increases the
    node's expected fragmentation least. Score ``floor(100 / (1 + e^(-dF/1000)))`` with
    ``dF = F_before - F_after``; a node takes its best GPU, lowest index on equal score.
    MIG members fall back to MIG packing (FGD does not model slices)."""

    name = "fgd"
    state_only = True  # the score is a function of NodeState.state_key (engine memo)

    def best(self, ctx: ScoreContext, node: NodeState, member: MemberRequest, opts: list[Option]):
        if member.kind == "mig" or ctx.frag is None:
            return _mig_score(node, member, opts) if member.kind == "mig" else (0, opts[0])
        best = None
        for _delta, score, opt in frag_delta_scores(ctx.frag, node, member, opts):
            if best is None or score > best[0]:
                best = (score, opt)
        return best


SCORERS: dict[str, Scorer] = {}


def register(scorer: Scorer) -> Scorer:
    SCORERS[scorer.name] = scorer
    return scorer


for _s in (BestFit(), Packing(), Fgd()):
    register(_s)

DEFAULT_TYPICAL_TASKS: tuple[TypicalTask, ...] = (
    TypicalTask(8_000, 1, 1000, weight=40),
    TypicalTask(4_000, 1, 500, weight=20),
    TypicalTask(2_000, 1, 250, weight=10),
    TypicalTask(16_000, 2, 1000, weight=10),
    TypicalTask(32_000, 4, 1000, weight=10),
    TypicalTask(64_000, 8, 1000, weight=10),
)
"""Workload assumed by `fgd`/`default` until the fleet is told its typical tasks."""
