"""Gang search: where the members of a gang go, and why not when they do not fit.

`GangSearch` answers from the score memos (`memo.py`): the best current heap entry per member
(ties by node rank), each later member against private copies of the nodes earlier members
took, so the fleet's records are only read; `_SideScores` scores those copies (and a trial
view's) beside the cached heap. A failure is explained from the caches' incremental counts.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from .errors import UnknownPolicy
from .feasibility import Option
from .memo import ScoreMemos, _ShapeCache
from .mig import profile_for
from .model import GPU_MILLI, GangRequest, MemberAssignment, MemberRequest, Placement, Unplaceable
from .reasons import NO_WHOLE, explain, gang_incomplete, node_key, recount, whole_stat
from .scorers import SCORERS, Scorer
from .state import MemberDelta, NodeState


class GangSearch(ScoreMemos):
    """Placement queries over the memos (the third layer of `Fleet`)."""

    def scorer(self, policy: str | Scorer) -> Scorer:
        if isinstance(policy, str):
            s = SCORERS.get(policy)
            if s is None:
                raise UnknownPolicy(policy)
            return s
        return policy

    def _best(
        self,
        cache: _ShapeCache,
        excluded: frozenset[str],
        side: _SideScores | None = None,
    ) -> tuple[NodeState, Option] | None:
        """The best node of the base heap, skipping nodes the trial overlay replaces, against
        the best of the overlay's own nodes (`side`); ties by node rank."""
        if side is None:
            return self._best_base(cache, excluded, {})[1]
        key, found = side.base_best(excluded, lambda: self._best_base(cache, excluded, side.states))
        alt = side.best(excluded)
        if alt is not None and (key is None or alt[0] < key):
            return alt[1], alt[2]
        return found

    def _best_base(
        self,
        cache: _ShapeCache,
        excluded: frozenset[str],
        shadowed: dict[str, NodeState],
    ) -> tuple[tuple[int, str] | None, tuple[NodeState, Option] | None]:
        """(heap key, (node, option)) of the best base heap entry that is current and neither
        excluded nor `shadowed` (replaced by a trial's copy); (None, None) if none is."""
        heap = cache.heap
        aside = []
        found = None
        key = None
        while heap:
            neg, _, seq, version = heap[0]
            state = self._by_seq.get(seq)
            if state is None or state.version != version or not state.schedulable:
                heapq.heappop(heap)
                continue
            if state.name in excluded or state.name in shadowed:
                aside.append(heapq.heappop(heap))
                continue
            found = (state, cache.entries[seq][1])
            key = (neg, state.rank)
            break
        for item in aside:
            heapq.heappush(heap, item)
        return key, found

    def _best_in_leaves(
        self,
        cache: _ShapeCache,
        leaves: dict[str, None],
        excluded: frozenset[str],
        side: _SideScores | None = None,
    ) -> tuple[NodeState, Option] | None:
        best = None
        shadowed = side.states if side is not None else {}
        for leaf in leaves:
            for seq in self._leaf.get(leaf, ()):
                base = self._by_seq.get(seq)
                if base is not None and base.name in shadowed:
                    v = side.valid(base.name)  # type: ignore[union-attr]  # side exists when shadowed is not empty
                else:
                    v = self._valid(cache, seq)
                if v is None or v[0].name in excluded:
                    continue
                key = (-v[1], v[0].rank)
                if best is None or key < best[0]:
                    best = (key, v[0], v[2])
        return None if best is None else (best[1], best[2])

    def _place(
        self,
        gang: GangRequest,
        scorer: Scorer,
        excluded: frozenset[str],
        explain: bool,
        overlay: dict[str, NodeState],
        sides: Callable[[_ShapeCache], _SideScores] | None = None,
    ) -> Placement | Unplaceable:
        """Place member after member, each against the state the earlier ones leave. The
        members go to private copies of their nodes (layered over `overlay`, the trial's
        copies, which stay untouched too): the fleet's node records are only read.
        `sides` (a trial view's `side_scores`, whose overlay `overlay` is) keeps its copies'
        scores between queries; a one-member gang reads them instead of scoring every copy
        again."""
        member = gang.member
        tenant = gang.tenant
        assignments: list[MemberAssignment] = []
        leaves: dict[str, None] = {}
        states = dict(overlay)
        owned: set[str] = set()
        side: _SideScores | None = None
        for rank in range(gang.replicas):
            cache = self._cache(scorer, gang)
            if side is None and states:
                if sides is not None and gang.replicas == 1:
                    side = sides(cache)
                else:
                    side = _SideScores(self, cache, states)
            choice = self._best(cache, excluded, side)
            if (
                choice is not None
                and leaves
                and gang.prefer_same_leaf
                and choice[0].spec.leaf_switch not in leaves
            ):
                # The best node anywhere is the best under the gang's leaves when it is under
                # one of them (same order); otherwise scan those leaves' nodes.
                choice = self._best_in_leaves(cache, leaves, excluded, side) or choice
            if choice is None:
                break
            state, (positions, mig_start) = choice
            delta, assignment = self._member(state, member, tenant, rank, positions, mig_start)
            assignments.append(assignment)
            if rank + 1 == gang.replicas:
                break  # the last member: no later one sees what it takes
            name = state.name
            if name not in owned:
                state = state.copy()
                states[name] = state
                owned.add(name)
            state.apply(delta)
            if side is not None:
                side.update(name)  # else made at the next member, if there is one
            if state.spec.leaf_switch:
                leaves[state.spec.leaf_switch] = None
        if len(assignments) >= gang.required_members:
            return Placement(tuple(assignments))
        if not explain:
            return Unplaceable(
                "Unexplained",
                "explanation skipped (explain=False)",
                {"fitted_members": len(assignments)},
            )
        why = self._explain(cache, states, excluded)
        if not assignments:
            return self._with_gang(why, gang)
        return gang_incomplete(gang, len(assignments), why)

    def _explain(
        self, cache: _ShapeCache, states: dict[str, NodeState], excluded: frozenset[str]
    ) -> Unplaceable:
        """Why the cache's member fits on no node, from the cache's incremental counts
        (refreshed by the query), corrected for the nodes this query sees differently: its
        own copies (earlier members, a trial overlay) and excluded nodes. The same answer as
        `reasons.member_unplaceable` over all nodes (tests compare the two)."""
        member, tenant, allow_ts = cache.member, cache.tenant, cache.allow_ts
        hist = dict(cache.hist)
        wsum = cache.wsum
        wlargest = dict(cache.wlargest)
        nodes = self._nodes

        def move(d: dict, old, new) -> None:
            if old != new:
                recount(d, old, new)

        for name in sorted(set(states) | set(excluded)):
            base = nodes.get(name)
            if base is None:
                continue
            state = states.get(name)
            if name in excluded:
                key = "excluded"
            elif state is not None:
                key = node_key(state, member, tenant, allow_ts)
            else:
                continue
            move(hist, cache.keys[base.seq], key)
            if cache.whole and state is not None:
                old_ws = cache.wstat.get(base.seq, NO_WHOLE)
                new_ws = whole_stat(state, member, allow_ts)
                if old_ws != new_ws:
                    if old_ws[1]:
                        wsum -= old_ws[1]
                        n = wlargest[old_ws[0]] - 1
                        if n:
                            wlargest[old_ws[0]] = n
                        else:
                            del wlargest[old_ws[0]]
                    if new_ws[1]:
                        wsum += new_ws[1]
                        wlargest[new_ws[0]] = wlargest.get(new_ws[0], 0) + 1
        free = (max(wlargest, default=0), wsum) if cache.whole else None
        models = tuple(m for m, n in sorted(self._models.items()) if n)
        return explain(hist, len(nodes), models, member, free)

    @staticmethod
    def _with_gang(why: Unplaceable, gang: GangRequest) -> Unplaceable:
        details: dict[str, Any] = dict(why.details)
        details.update(
            {"fitted_members": 0, "min_members": gang.required_members, "replicas": gang.replicas}
        )
        return Unplaceable(why.reason, why.message, details)

    @staticmethod
    def _member(
        state: NodeState,
        member: MemberRequest,
        tenant: str,
        rank: int,
        positions: tuple[int, ...],
        mig_start: int | None,
    ) -> tuple[MemberDelta, MemberAssignment]:
        gpus = state.spec.gpus
        indices = tuple(gpus[p].index for p in positions)
        kind = member.kind
        if kind == "mig":
            prof = profile_for(gpus[positions[0]].model, member.mig_profile or "")
            delta = MemberDelta(
                state.name,
                tenant,
                member.cpu_milli,
                member.memory_mib,
                (),
                (indices[0], prof, mig_start),
            )  # type: ignore[arg-type]  # a MIG option: the start is known
            return delta, MemberAssignment(
                rank, state.name, indices, None, member.mig_profile, mig_start
            )
        milli = member.gpu_milli if kind == "milli" else GPU_MILLI
        delta = MemberDelta(
            state.name,
            tenant,
            member.cpu_milli,
            member.memory_mib,
            tuple((i, milli) for i in indices),
        )
        return delta, MemberAssignment(
            rank, state.name, indices, member.gpu_milli if kind == "milli" else None
        )


class _SideScores:
    """Scores of the overlay's node copies for one placement query: a small lazy max-heap
    beside the fleet's cached one (entries carry a token; an updated node gets a new one)."""

    __slots__ = ("fleet", "cache", "states", "entries", "heap", "token", "_base")

    def __init__(self, fleet: ScoreMemos, cache: _ShapeCache, states: dict[str, NodeState]) -> None:
        self.fleet = fleet
        self.cache = cache
        self.states = states
        self.entries: dict[str, tuple[int, int, Option]] = {}  # name -> (token, score, option)
        self.heap: list[tuple[int, str, str, int]] = []
        self.token = 0
        self._base: tuple[frozenset[str], tuple] | None = None
        for name in sorted(states):
            self._score(name, push=False)
        heapq.heapify(self.heap)

    def base_best(self, excluded: frozenset[str], look: Callable[[], tuple]) -> tuple:
        """The base heap's best entry beside these copies (`look()`, `Fleet._best_base`),
        remembered: the last answer for the same `excluded` is reused while its node is not
        replaced by a copy. It stays the best: the base fleet does not change while a trial
        view lives, and copies are only added, so entries above it (stale, excluded or
        replaced) stay passed over."""
        if self._base is not None and self._base[0] == excluded:
            found = self._base[1][1]
            if found is None or found[0].name not in self.states:
                return self._base[1]
        best = look()
        self._base = (excluded, best)
        return best

    def _score(self, name: str, push: bool) -> None:
        state = self.states[name]
        self.entries.pop(name, None)
        member = self.cache.member
        spec = state.spec
        if (
            not state.schedulable
            or not state.selected(member.node_selector)
            or spec.cpu_milli < member.cpu_milli
            or spec.memory_mib < member.memory_mib
            or name not in self.fleet._nodes
        ):
            return
        found = self.fleet._score_now(self.cache, state)
        if isinstance(found, str):
            return
        self.token += 1
        score, opt = found
        self.entries[name] = (self.token, score, opt)
        item = (-score, state.rank, name, self.token)
        if push:
            heapq.heappush(self.heap, item)
        else:
            self.heap.append(item)

    def update(self, name: str) -> None:
        self._score(name, push=True)

    def valid(self, name: str) -> tuple[NodeState, int, Option] | None:
        entry = self.entries.get(name)
        return None if entry is None else (self.states[name], entry[1], entry[2])

    def best(self, excluded: frozenset[str]) -> tuple[tuple[int, str], NodeState, Option] | None:
        heap = self.heap
        aside = []
        found = None
        while heap:
            neg, rank, name, token = heap[0]
            entry = self.entries.get(name)
            if entry is None or entry[0] != token:
                heapq.heappop(heap)
                continue
            if name in excluded:
                aside.append(heapq.heappop(heap))
                continue
            found = ((neg, rank), self.states[name], entry[2])
            break
        for item in aside:
            heapq.heappush(heap, item)
        return found
