"""The fleet: free capacity per node, allocations, and gang placement.

`Fleet` is the one mutable structure of the placement engine; the scheduler folds node and
allocation events into it and asks `place` for decisions. It is pure in the project's
sense: no I/O, clock, randomness or logging; iteration orders are deterministic (node order
given as data, else node names; ties end in unique ids).

Incremental indexes: every node change bumps the node's version and appends it to a change
log. Scores are cached per (scorer, member shape, node) together with a max-heap per
shape; a query re-scores only the nodes logged since that shape's last query, then pops
stale heap entries. No decision rescans the fleet unless it fails (the explanation then
counts every node's reason) or a shape is seen for the first time.

`place` never writes a node record: later members of a gang are scored against private
copies of the nodes earlier members took, and ``assume_released`` releases allocations in
a `TrialFleet`, the copy-on-write view deciders use for trial placements.
"""

from __future__ import annotations

from collections.abc import Iterable

from .fragmentation import TypicalTask
from .model import GangRequest, NodeSpec, Placement, Unplaceable
from .scorers import Scorer
from .search import GangSearch
from .trial import TrialFleet


class Fleet(GangSearch):
    """Mutable incremental index of nodes and allocations; answers placement queries.

    Three layers by role, each its own module: `index.FleetIndex` (nodes, change logs,
    allocations), `memo.ScoreMemos` (score caches and the rules of when a cached score
    holds) and `search.GangSearch` (gang placement and its explanation); `trial.TrialFleet`
    is the copy-on-write view over it."""

    __transparent_memos__ = ("_caches", "_state_ids", "_next_state_id")
    """Score caches per (scorer, shape): memos of pure functions of node records, filled by
    queries (`place`) and keyed by node versions, so a read-only view (checking mode) lets a
    decide fill them (docs/deciders.md, "Caches"). Everything else is written by the fold."""

    def __init__(
        self,
        nodes: Iterable[NodeSpec] = (),
        typical_tasks: tuple[TypicalTask, ...] | None = None,
        node_order: Iterable[str] | None = None,
    ) -> None:
        super().__init__(typical_tasks)
        if node_order is not None:
            self.set_node_order(node_order)
        for spec in nodes:
            self.add_node(spec)

    def idle_breakdown(self) -> tuple[int, int, int]:
        """Idle milli over non-MIG GPUs of schedulable nodes as (usable, fragmented,
        stranded) for the fleet's typical tasks (`Fragmentation.idle_breakdown`, host
        memory counted when the tasks ask memory): *stranded* is idle GPU that some typical
        task could use but whose node lacks the CPU or memory for every such task."""
        frag = self._dfrag
        usable = fragmented = stranded = 0
        for n in self._nodes.values():
            if n.schedulable:
                u, f, s = frag.idle_breakdown(n.frag_layout, n.free_cpu, n.free_mem, n.gpu_free)
                usable, fragmented, stranded = usable + u, fragmented + f, stranded + s
        return usable, fragmented, stranded

    def place(
        self,
        gang: GangRequest,
        policy: str | Scorer = "default",
        exclude: Iterable[str] = (),
        assume_released: Iterable[str] = (),
        explain: bool = True,
    ) -> Placement | Unplaceable:
        """Where the gang would go now (or if ``assume_released`` allocations were gone),
        without changing the fleet: members in rank order, at least ``min_members`` and
        as many as fit up to ``replicas``, or an `Unplaceable` with the reason.

        ``explain=False`` (benchmarks) skips the per-node explanation of a failure, which
        counts every node; the answer is then ``Unplaceable("Unexplained", ...)``."""
        scorer = self.scorer(policy)
        released = sorted(set(assume_released))
        if released:
            trial = TrialFleet(self)
            for alloc_id in released:
                trial.release(alloc_id)
            return self._place(gang, scorer, frozenset(exclude), explain, trial.overlay)
        return self._place(gang, scorer, frozenset(exclude), explain, {})

    def trial(self) -> TrialFleet:
        """A copy-on-write view of this fleet for trial placements (see `TrialFleet`)."""
        return TrialFleet(self)
