"""The trial view: a copy-on-write `Fleet` for trial placements inside `decide`."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import PlacementConflict, UnknownAllocation
from .index import Allocation
from .memo import _ShapeCache
from .model import GangRequest, Placement, Unplaceable
from .scorers import Scorer
from .search import GangSearch, _SideScores
from .state import MemberDelta, NodeState


class TrialFleet:
    """A copy-on-write view of a `Fleet` for trial placements inside `decide`.

    Reads consult the view's own node copies and allocation changes first, then the base
    fleet; writes (`allocate`, `release`) go only to the view, copying a node the first time
    it changes. The base fleet's records are never written (its score caches, memoization
    of pure functions of node states, may be filled). Throw the view away when done; a view
    must not outlive a change to its base (fold an event only after the decision)."""

    def __init__(self, base: GangSearch) -> None:
        self.base = base
        self.overlay: dict[str, NodeState] = {}
        """Node name -> this view's copy (nodes a trial allocation or release touched)."""
        self._owned: set[str] = set()
        self._added: dict[str, Allocation] = {}
        self._released: set[str] = set()
        self._changed: list[str] = []
        """Names of the copies, in the order this view changed them (with repeats)."""
        self._sides: dict[int, tuple[_ShapeCache, _SideScores, int]] = {}
        """id(cache) -> (cache, the copies' scores for it, length of `_changed` they saw)."""

    def side_scores(self, cache: _ShapeCache) -> _SideScores:
        """The scores of this view's copies for `cache`'s member, brought up to date by
        re-scoring only the copies changed since the last query of the same cache (a decide
        that places k jobs scores O(k) copies, not O(k^2)). They read `overlay` itself, so
        they hold for queries that add no copies of their own (one-member gangs)."""
        known = self._sides.get(id(cache))
        if known is None or known[0] is not cache:
            side = _SideScores(self.base, cache, self.overlay)
        else:
            side = known[1]
            for name in dict.fromkeys(self._changed[known[2] :]):
                side.update(name)
        self._sides[id(cache)] = (cache, side, len(self._changed))
        return side

    def fork(self) -> TrialFleet:
        """A view over this view: changes to either are invisible to the other."""
        child = TrialFleet(self.base)
        child.overlay = dict(self.overlay)
        child._added = dict(self._added)
        child._released = set(self._released)
        self._owned.clear()  # shared copies: both sides copy again before writing
        return child

    def node_state(self, name: str) -> NodeState:
        return self.overlay.get(name) or self.base.node_state(name)

    def allocation(self, allocation_id: str) -> Allocation:
        a = self._added.get(allocation_id)
        if a is not None:
            return a
        if allocation_id in self._released:
            raise UnknownAllocation(allocation_id)
        return self.base.allocation(allocation_id)

    def allocation_ids(self) -> tuple[str, ...]:
        return tuple(sorted((set(self.base._allocs) - self._released) | set(self._added)))

    def changes(self) -> tuple[dict[str, Allocation], tuple[str, ...]]:
        """What this view changed of its base: the allocations it added (id -> allocation),
        and the ids of base allocations it no longer holds as they are (released, or added
        again), sorted."""
        gone = self._released | (self._added.keys() & self.base._allocs.keys())
        return self._added, tuple(sorted(gone))

    def _own(self, name: str) -> NodeState | None:
        if name in self._owned:
            return self.overlay[name]
        current = self.overlay.get(name) or self.base._nodes.get(name)
        if current is None:
            return None
        copy = self.overlay[name] = current.copy()
        self._owned.add(name)
        return copy

    def _changing(self, name: str) -> NodeState | None:
        """This view's own copy of node `name`, about to change (None: no such node)."""
        self._changed.append(name)
        return self._own(name)

    def allocate(
        self, allocation_id: str, tenant: str, placement: Placement, request: GangRequest
    ) -> Allocation:
        """As `Fleet.allocate`, in the view only."""
        try:
            existing = self.allocation(allocation_id)
        except UnknownAllocation:
            existing = None
        if existing is not None:
            return existing.bound_again(tenant, placement, request)
        deltas = self.base._deltas(tenant, placement, request)
        done: list[tuple[NodeState, MemberDelta]] = []
        try:
            for d in deltas:
                state = self._changing(d.node)
                if state is None:
                    raise PlacementConflict(f"unknown node {d.node}")
                state.apply(d)
                done.append((state, d))
        except PlacementConflict:
            for state, d in reversed(done):
                state.revert(d)
            raise
        alloc = Allocation.of(allocation_id, tenant, request, placement, deltas)
        self._added[allocation_id] = alloc
        self._released.discard(allocation_id)
        return alloc

    def release(self, allocation_id: str) -> Allocation:
        """As `Fleet.release`, in the view only."""
        alloc = self.allocation(allocation_id)
        for d in alloc.deltas:
            state = self._changing(d.node)
            if state is not None:
                state.revert(d)
        if self._added.pop(allocation_id, None) is None:
            self._released.add(allocation_id)
        return alloc

    def place(
        self,
        gang: GangRequest,
        policy: str | Scorer = "default",
        exclude: Iterable[str] = (),
        assume_released: Iterable[str] = (),
        explain: bool = True,
    ) -> Placement | Unplaceable:
        """As `Fleet.place`, against this view."""
        released = sorted(set(assume_released))
        view = self
        if released:
            view = self.fork()
            for alloc_id in released:
                view.release(alloc_id)
        return self.base._place(
            gang,
            self.base.scorer(policy),
            frozenset(exclude),
            explain,
            view.overlay,
            view.side_scores,
        )
