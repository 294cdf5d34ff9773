"""Score memos: what `Fleet` remembers of past scoring, and when a remembered score holds.

One `_ShapeCache` per (scorer, member shape, tenant for shares, timeslice allowed) keeps
every node's last score (or rejection key), a lazy max-heap of the feasible ones, and the
aggregates the explanation of a failure reads. The rules, all in this file:

1. A node's cached score is current iff ``cache.seen[seq] == node.version``, its key is
   ``"fits"`` and the node is schedulable (`_valid`; `_best_base` pops heap items whose
   version is stale). Every change of a node's record bumps its version (`state.py`).
2. A query re-scores only nodes logged since the cache's last read (`_refresh`): the
   structural log (nodes added, removed, (un)schedulable), the capacity logs of the node
   shapes that can host the member (`_live_logs`), or, with a node selector, the rarest
   selector label's log (`_label_changes`).
3. A cache behind a log's start (the log was cut) compares node versions instead
   (`_log_cut`, `ChangeLog`).
4. A shape's static rejection key (`_static_key`: capacity, model, GPU memory, sharing
   mode) never changes: nodes of that shape are never scored for the cache.
5. Every cache is dropped when the scoring context changes: tie order (`set_node_order`),
   typical tasks (`set_typical_tasks`), the largest node (`_refresh_context`), model
   scarcity or host-boundness (`_rescarce`); the oldest cache goes beyond 512.
6. For state-only scorers (the built-in ones) scores are also memoised per node state
   (`_state_id` of `NodeState.state_key`): nodes of one shape in one state are scored once
   (`_memo_score`; the memo is cleared beyond ``_memo_cap`` states, ids are never reused).
7. Caches are transparent: a decision never depends on what they hold (checking mode runs
   a decide with `caches_set_aside`; snapshots leave them out).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .feasibility import Option, eligible_gpus, options
from .fragmentation import Fragmentation, TypicalTask
from .index import ChangeLog, FleetIndex
from .model import GPU_MILLI, GangRequest, MemberRequest, NodeSpec
from .reasons import NO_WHOLE, recount, whole_probe, whole_stat
from .scorers import DEFAULT_TYPICAL_TASKS, ScoreContext, Scorer
from .state import NodeState

_MISS = object()


class _ShapeCache:
    """Scores of one (scorer, member shape) for every node, plus a lazy max-heap."""

    __slots__ = (
        "scorer",
        "member",
        "tenant",
        "allow_ts",
        "entries",
        "heap",
        "pos",
        "static_key",
        "memo",
        "seen",
        "keys",
        "hist",
        "whole",
        "probe_key",
        "wstat",
        "wsum",
        "wlargest",
        "static",
        "spos",
        "live",
        "live_n",
        "selector",
        "sel_pair",
        "lpos",
    )

    def __init__(self, scorer: Scorer, member: MemberRequest, tenant: str, allow_ts: bool) -> None:
        self.scorer = scorer
        self.member = member
        self.tenant = tenant
        self.allow_ts = allow_ts
        # The member's node selector: nodes without its labels get the key "selector" before
        # anything else is looked at (never scored, whatever their shape or state).
        self.selector = member.node_selector
        # For a selector: the label pair whose change log `_refresh` reads instead of the
        # shapes' logs (every selected node carries it; chosen by `Fleet._cache`, the rarest
        # pair then), and the position read in it (None: not read yet).
        self.sel_pair: tuple[str, str] | None = None
        self.lpos: int | None = None
        # seq -> (score, option) of the node's last scoring, if feasible: current while that
        # node's `seen` version is its version and its key is "fits" (the tuple is shared by
        # the nodes of one state: the memo's)
        self.entries: dict[int, tuple[int, Option]] = {}
        self.seen: dict[int, int] = {}  # seq -> version last scored at (feasible or not)
        self.heap: list[tuple[int, str, int, int]] = []  # (-score, node rank, seq, version)
        self.pos = -1
        self.static_key = (
            member.kind,
            member.gpus,
            member.mig_profile,
            member.gpu_models,
            member.min_gpu_memory_mib,
            allow_ts,
        )
        # (score, option) or None (infeasible) per id of `NodeState.state_key`, for scorers whose
        # score depends on the node's state only (the built-in ones): nodes of one shape in
        # one state (e.g. all empty nodes of a type) are scored once.
        self.memo: dict[int, tuple[tuple[int, Option] | str, tuple[int, int]]] | None = (
            {} if getattr(scorer, "state_only", False) else None
        )
        # The explanation of a failure, kept incrementally with the scores: each node's
        # rejection key ("fits" if feasible) and the histogram of keys over all nodes; for
        # whole-GPU members each node's (largest free clique, free GPUs) (`reasons.whole_stat`),
        # their sum and a count per largest value.
        self.keys: dict[int, str] = {}
        self.hist: dict[str, int] = {}
        # Per node shape (`NodeState.shape_id`): the static rejection key if no node of that
        # shape can ever host the member (capacity, model, GPU memory, sharing mode), else
        # None. Nodes of such shapes are never scored: their key is that one (or
        # "unschedulable"), whatever is allocated on them (the per-shape index).
        self.static: dict[Any, str | None] = {}
        self.spos: dict[Any, int] = {}  # shape id -> position read in that shape's change log
        self.live: list[tuple[Any, ChangeLog]] | None = None  # `Fleet._live_logs`
        self.live_n = 0
        self.whole = member.kind == "whole"
        probe = whole_probe(member)
        self.probe_key = (
            probe.kind,
            probe.gpus,
            probe.mig_profile,
            probe.gpu_models,
            probe.min_gpu_memory_mib,
            allow_ts,
        )
        self.wstat: dict[int, tuple[int, int]] = {}
        self.wsum = 0
        self.wlargest: dict[int, int] = {}

    def count(self, seq: int, key: str, ws: tuple[int, int]) -> None:
        """Record node ``seq``'s rejection key and whole-GPU stat in the aggregates."""
        keys, hist = self.keys, self.hist
        old = keys.get(seq)
        if old != key:
            recount(hist, old, key)
            keys[seq] = key
        if self.whole:
            wstat = self.wstat
            oldw = wstat.get(seq, NO_WHOLE)
            if oldw != ws:
                self._whole_delta(oldw, -1)
                self._whole_delta(ws, 1)
                if ws is NO_WHOLE or ws == NO_WHOLE:
                    del wstat[seq]
                else:
                    wstat[seq] = ws

    def _whole_delta(self, ws: tuple[int, int], sign: int) -> None:
        """Add (``sign`` > 0) or remove that many nodes of whole-GPU stat ``ws``."""
        largest, total = ws
        if not total:
            return
        self.wsum += sign * total
        n = self.wlargest.get(largest, 0) + sign
        if n:
            self.wlargest[largest] = n
        else:
            del self.wlargest[largest]

    def forget(self, seq: int) -> None:
        """Drop a removed node from the aggregates."""
        self.seen.pop(seq, None)
        self.entries.pop(seq, None)
        if seq in self.keys:
            self.count(seq, self.keys[seq], NO_WHOLE)
            key = self.keys.pop(seq)
            n = self.hist[key] - 1
            if n:
                self.hist[key] = n
            else:
                del self.hist[key]


class ScoreMemos(FleetIndex):
    """The index with score caches over it (the second layer of `Fleet`; rules above)."""

    def __init__(self, typical_tasks: tuple[TypicalTask, ...] | None = None) -> None:
        super().__init__()
        self._caches: dict[tuple, _ShapeCache] = {}
        self._state_ids: dict[tuple, int] = {}  # NodeState.state_key -> id (never reused)
        self._next_state_id = 0
        self._memo_cap = 4096  # states memoised per shape cache: max(4096, 2 x nodes)
        self._frag = Fragmentation(typical_tasks or DEFAULT_TYPICAL_TASKS)
        self._dfrag = self._memory_frag(self._frag)
        self._scarce = self._dfrag  # `default`'s, weighted by model scarcity (`_rescarce`)
        self._ctx = ScoreContext(frag=self._frag, frag_scarce=self._scarce)

    # -- the scoring context (rule 5) ---------------------------------------------------

    def set_typical_tasks(self, tasks: tuple[TypicalTask, ...]) -> None:
        """The workload fragmentation-aware scorers optimise for (drops score caches)."""
        self._frag = Fragmentation(tasks)
        self._dfrag = self._memory_frag(self._frag)
        for state in self._nodes.values():
            self._dfrag.remember_profile(
                state.frag_layout, state.spec.cpu_milli, state.spec.memory_mib
            )
        self._scarce = self._dfrag.scarcity_weighted(self._supply())
        self._refresh_context(force=True)

    def set_node_order(self, names: Iterable[str]) -> None:
        """Tie order: equal scores go to the node listed first; unlisted nodes come after,
        by name. A seed-derived permutation may be passed here (as data)."""
        self._order = {name: i for i, name in enumerate(names)}
        for state in self._nodes.values():
            state.rank = self._rank(state.name)
        self._caches.clear()

    def _refresh_context(self, force: bool = False, added: NodeSpec | None = None) -> None:
        if added is not None and not force:
            gpu_milli = GPU_MILLI * len(added.gpus)
            if (
                added.cpu_milli <= self._ctx.max_node_cpu
                and gpu_milli <= self._ctx.max_node_gpu_milli
            ):
                return
            if len(self._nodes) > 1 and self._ctx.max_node_cpu > 1:
                self._ctx = ScoreContext(
                    max(self._ctx.max_node_cpu, added.cpu_milli),
                    max(self._ctx.max_node_gpu_milli, gpu_milli),
                    self._frag,
                    self._scarce,
                    self._ctx.host_bound,
                )
                self._caches.clear()
                return
        nodes = self._nodes.values()
        ctx = ScoreContext(
            max_node_cpu=max((n.spec.cpu_milli for n in nodes), default=1) or 1,
            max_node_gpu_milli=max((GPU_MILLI * len(n.spec.gpus) for n in nodes), default=1) or 1,
            frag=self._frag,
            frag_scarce=self._scarce,
            host_bound=self._host_bound(),
        )
        if force or ctx != self._ctx:
            self._ctx = ctx
            self._caches.clear()

    @staticmethod
    def _memory_frag(frag: Fragmentation) -> Fragmentation:
        """`default`'s measure: FGD's plus host memory (the same object when no typical
        task asks memory, so its memo is shared)."""
        with_memory = Fragmentation(frag.tasks, memory=True)
        return with_memory if with_memory.memory else frag

    def _supply(self) -> dict[str, int]:
        return {m: n for m, n in sorted(self._models.items()) if n}

    def _host_bound(self) -> bool:
        gpu_milli = GPU_MILLI * sum(self._models.values())
        return self._dfrag.host_bound(self._host_total[0], self._host_total[1], gpu_milli)

    def _rescarce(self) -> None:
        """Re-weigh the typical tasks by model scarcity after the fleet's GPU models changed,
        and re-check whether they are host-bound after its capacity changed (score caches
        are dropped only if a weight or that answer changed)."""
        scarce = self._dfrag.scarcity_weighted(self._supply())
        bound = self._host_bound()
        if scarce.tasks != self._scarce.tasks or bound != self._ctx.host_bound:
            self._scarce = scarce
            c = self._ctx
            self._ctx = ScoreContext(
                c.max_node_cpu, c.max_node_gpu_milli, self._frag, scarce, bound
            )
            self._caches.clear()

    def _nodes_changed(self, added: NodeState | None, new: bool) -> None:
        """A node was added or removed: remember its fragmentation profile, let the memo cap
        grow with the fleet, and refresh the scoring context (rule 5)."""
        if added is not None:
            spec = added.spec
            self._dfrag.remember_profile(added.frag_layout, spec.cpu_milli, spec.memory_mib)
            self._memo_cap = max(self._memo_cap, 2 * len(self._nodes))
        self._refresh_context(added=added.spec if added is not None and new else None)
        self._rescarce()

    def _log_cut(self, cut: int) -> None:
        """A cache behind the cut structural log compares node versions next time (rule 3)."""
        for c in self._caches.values():
            if c.pos < cut:
                c.pos = -1

    @contextmanager
    def caches_set_aside(self) -> Iterator[None]:
        """Answer from empty score caches inside the block (checking mode: a decision must
        not depend on what the caches hold); the caches are put back after it."""
        kept = self._caches
        self._caches = {}
        try:
            yield
        finally:
            self._caches = kept

    # -- caches brought up to date (rules 1-4) ------------------------------------------

    def _cache(self, scorer: Scorer, gang: GangRequest) -> _ShapeCache:
        member = gang.member
        tenant = gang.tenant if member.kind == "milli" else ""
        key = (scorer.name, scorer, member, tenant, gang.allow_timeslice)
        cache = self._caches.get(key)
        if cache is None:
            if len(self._caches) >= 512:
                del self._caches[next(iter(self._caches))]
            cache = self._caches[key] = _ShapeCache(scorer, member, tenant, gang.allow_timeslice)
            if member.node_selector:  # the rarest pair (fewest nodes, then by name)
                rarest = None
                for pair in member.node_selector:
                    n = len(self._label_nodes.get(pair, ()))
                    if rarest is None or (n, pair) < rarest:
                        rarest = (n, pair)
                cache.sel_pair = rarest[1]  # type: ignore[index]  # a selector has at least one pair
        self._refresh(cache)
        return cache

    def _refresh(self, cache: _ShapeCache) -> None:
        """Bring a shape cache up to date: structural changes (nodes added, removed,
        (un)schedulable) from the fleet's log, capacity changes from the logs of the node
        shapes that can host the member (the per-shape index: a share request never reads
        the changes of exclusive nodes, a model-constrained one never those of other
        models). A cache behind a log's start compares node versions instead."""
        log = self._log
        start = cache.pos - self._log_base
        if start < 0:
            self._refresh_behind(cache)
        else:
            changed = self._changed_since(cache, log[start:])
            if changed:  # a node in several logs is rescored once (`seen`)
                self._rescore(cache, changed, True)
        cache.pos = self._log_base + len(log)
        if len(cache.heap) > 2 * len(self._nodes) + 64:
            self._compact(cache)

    def _refresh_behind(self, cache: _ShapeCache) -> None:
        """A new cache, or one behind the change log's start: rescore every node whose version
        differs from the one it was last scored at (all of them for a new cache), and read
        every change log from its end on."""
        if not cache.seen:
            cache.entries.clear()
            self._score_fresh(cache)
            heapq.heapify(cache.heap)
        else:
            by_seq = self._by_seq
            for seq in [q for q in cache.keys if q not in by_seq]:  # removed nodes
                cache.forget(seq)
            self._rescore(cache, self._nodes.values(), True)
        for sid, slog in self._slogs.items():
            cache.spos[sid] = slog.end
        if cache.sel_pair is not None:
            llog = self._llogs.get(cache.sel_pair)
            cache.lpos = None if llog is None else llog.end
        cache.live = None  # the static keys are known now

    def _changed_since(self, cache: _ShapeCache, structural: list[int]) -> list[NodeState]:
        """The nodes to rescore for a cache that read the fleet's log up to `structural`
        (the entries since): those the fleet's log names (removed ones forgotten), then those
        of the node shapes' (or the selector pair's) capacity logs since the cache read them."""
        by_seq = self._by_seq
        changed: list[NodeState] = []
        for seq in dict.fromkeys(structural):
            st = by_seq.get(seq)
            if st is not None:
                changed.append(st)
            elif seq in cache.keys:
                cache.forget(seq)
        if cache.sel_pair is not None:  # the label index: only nodes carrying the pair
            return changed + self._label_changes(cache)
        static = cache.static
        spos = cache.spos
        for sid, slog in self._live_logs(cache):
            entries = slog.entries
            end = slog.base + len(entries)  # `slog.end`, inline (hot loop)
            at = spos.get(sid)
            if at == end:
                continue
            spos[sid] = end
            fixed = static.get(sid, _MISS)
            if fixed is not None and fixed is not _MISS:
                continue  # no node of this shape can host the member: keys are static
            if at is None or at < slog.base:
                changed += [by_seq[q] for q in self._shape_nodes.get(sid, ())]
            else:
                changed += [
                    st
                    for q in dict.fromkeys(entries[at - slog.base :])
                    if (st := by_seq.get(q)) is not None
                ]
        return changed

    def _label_changes(self, cache: _ShapeCache) -> list[NodeState]:
        """Nodes carrying the cache's selector pair whose capacity changed since the cache last
        read that pair's change log (all of them when it never did or fell behind the log's
        start): the nodes outside the selector are never read."""
        pair = cache.sel_pair
        llog = self._llogs.get(pair)  # type: ignore[arg-type]  # set with the selector: never None here
        if llog is None:
            return []
        entries = llog.entries
        end = llog.base + len(entries)
        at = cache.lpos
        if at == end:
            return []
        cache.lpos = end
        by_seq = self._by_seq
        if at is None or at < llog.base:
            return [by_seq[q] for q in self._label_nodes.get(pair, ())]  # type: ignore[arg-type]  # set with the selector: never None here
        return [st for q in dict.fromkeys(entries[at - llog.base :]) if (st := by_seq.get(q))]

    def _live_logs(self, cache: _ShapeCache) -> list[tuple[Any, ChangeLog]]:
        """The change logs `_refresh` reads for a cache: those of the node shapes not known to
        be unable to host its member (its static keys), kept on the cache until a shape is
        added (a shape's static key never changes once known)."""
        live = cache.live
        if live is None or cache.live_n != len(self._slogs):
            static = cache.static
            live = cache.live = [
                (sid, slog) for sid, slog in self._slogs.items() if static.get(sid) is None
            ]
            cache.live_n = len(self._slogs)
        return live

    def _score_fresh(self, cache: _ShapeCache) -> None:
        """Score every node for a new cache, one node shape at a time: the nodes of a shape
        that can never host the member get its static rejection key in bulk (or
        "unschedulable"), the others are scored one by one (`_rescore`; the heap is left for
        the caller to heapify). The same aggregates as rescoring every node."""
        by_seq = self._by_seq
        static = cache.static
        seen, keys, hist = cache.seen, cache.keys, cache.hist
        selector = cache.selector
        for sid, seqs in self._shape_nodes.items():
            if not seqs:
                continue
            states = [by_seq[q] for q in seqs]
            if selector:
                outside = [st.seq for st in states if not st.selected(selector)]
                if outside:
                    for q in outside:
                        seen[q] = by_seq[q].version
                    keys.update(dict.fromkeys(outside, "selector"))
                    hist["selector"] = hist.get("selector", 0) + len(outside)
                    states = [st for st in states if st.selected(selector)]
                    if not states:
                        continue
                    seqs = [st.seq for st in states]  # type: ignore[assignment]  # a list where the array is read only
            fixed = static.get(sid, _MISS)
            if fixed is _MISS:
                fixed = self._static_key(cache, states[0])
            if fixed is None:
                if cache.memo is None:
                    self._rescore(cache, states, False)
                else:
                    self._score_fresh_shape(cache, states)
                continue
            for st in states:
                seen[st.seq] = st.version
            keys.update(dict.fromkeys(seqs, fixed))
            hist[fixed] = hist.get(fixed, 0) + len(seqs)  # type: ignore[index]  # histogram keys mix str and tuples
            for st in states:
                if not st.schedulable:
                    cache.count(st.seq, "unschedulable", NO_WHOLE)

    def _score_fresh_shape(self, cache: _ShapeCache, states: list[NodeState]) -> None:
        """`_rescore` of a new memoising cache over nodes of one shape that may host its
        member (so CPU and memory capacity pass), grouped by `state_key`: each group is
        scored once (the memo) and its nodes' keys and whole-GPU stats are written in bulk."""
        memo = cache.memo
        assert memo is not None
        seen, keys, entries, heap, hist = (
            cache.seen,
            cache.keys,
            cache.entries,
            cache.heap,
            cache.hist,
        )
        seen.update({st.seq: st.version for st in states})
        groups: dict[int, list[NodeState]] = {}  # state id -> schedulable nodes in that state
        unschedulable: list[int] = []
        state_id = self._state_id
        for state in states:
            if not state.schedulable:
                unschedulable.append(state.seq)
                continue
            known = state.state_key_memo  # `_state_id`'s memo, read inline (hot loop)
            sid = known[1] if known is not None and known[0] == state.version else state_id(state)
            group = groups.get(sid)
            if group is None:
                groups[sid] = [state]
            else:
                group.append(state)
        if unschedulable:
            keys.update(dict.fromkeys(unschedulable, "unschedulable"))
            hist["unschedulable"] = hist.get("unschedulable", 0) + len(unschedulable)
        for sid, group in groups.items():
            found, ws = self._memo_score(cache, memo, sid, group[0])
            seqs = [st.seq for st in group]
            if found.__class__ is str:
                key = found
            else:
                key = "fits"
                entries.update(dict.fromkeys(seqs, found))
                neg = -found[0]  # type: ignore[index]  # found is a score tuple on this branch
                heap += [(neg, st.rank, st.seq, st.version) for st in group]
            keys.update(dict.fromkeys(seqs, key))
            hist[key] = hist.get(key, 0) + len(seqs)  # type: ignore[index]  # histogram keys mix str and tuples
            if cache.whole and ws != NO_WHOLE:
                cache.wstat.update(dict.fromkeys(seqs, ws))
                cache._whole_delta(ws, len(seqs))

    def _compact(self, cache: _ShapeCache) -> None:
        heap = []
        by_seq = self._by_seq
        for seq in [s for s in cache.seen if s not in by_seq]:  # removed nodes
            cache.forget(seq)
        seen, keys = cache.seen, cache.keys
        for seq, (score, _) in cache.entries.items():
            state = by_seq[seq]
            version = state.version
            if seen[seq] == version and keys[seq] == "fits" and state.schedulable:
                heap.append((-score, state.rank, seq, version))
        heapq.heapify(heap)
        cache.heap = heap

    def _rescore(self, cache: _ShapeCache, states: Iterable[NodeState], push: bool) -> None:
        """(Re)score nodes not yet scored at their current version; feasible ones get an
        entry and a heap item (pushed, or appended for the caller to heapify); every node's
        rejection key (and whole-GPU stat) goes to the cache's aggregates."""
        seen = cache.seen
        entries = cache.entries
        heap = cache.heap
        memo = cache.memo
        count = cache.count
        static = cache.static
        keys = cache.keys
        whole, wstat = cache.whole, cache.wstat
        selector = cache.selector
        for state in states:
            seq = state.seq
            version = state.version
            if seen.get(seq) == version:
                continue
            seen[seq] = version
            if selector and not state.selected(selector):
                if keys.get(seq) != "selector":
                    count(seq, "selector", NO_WHOLE)
                entries.pop(seq, None)
                continue
            fixed = static.get(state.shape_id, _MISS)
            if fixed is _MISS:
                fixed = self._static_key(cache, state)
            if fixed is not None:
                key = fixed if state.schedulable else "unschedulable"
                if keys.get(seq) != key:
                    count(seq, key, NO_WHOLE)  # type: ignore[arg-type]  # histogram keys mix str and tuples
                continue
            if not state.schedulable:  # (CPU and memory capacity pass: the static key is None)
                count(seq, "unschedulable", NO_WHOLE)
                continue
            if memo is None:
                found, ws = self._score_now(cache, state), self._whole_stat(cache, state)
            else:  # `_state_id` and `_memo_score` with their hits inline (the hot path)
                known = state.state_key_memo
                sid = (
                    known[1] if known is not None and known[0] == version else self._state_id(state)
                )
                hit = memo.get(sid)
                found, ws = hit if hit is not None else self._memo_score(cache, memo, sid, state)
            if found.__class__ is str:
                if keys.get(seq) != found or (whole and wstat.get(seq, NO_WHOLE) != ws):
                    count(seq, found, ws)  # type: ignore[arg-type]  # histogram keys mix str and tuples
                continue
            if keys.get(seq) != "fits" or (whole and wstat.get(seq, NO_WHOLE) != ws):
                count(seq, "fits", ws)
            entries[seq] = found  # type: ignore[assignment]  # a score tuple on this branch
            if push:
                heapq.heappush(heap, (-found[0], state.rank, seq, version))  # type: ignore[index]  # found is a score tuple on this branch
            else:
                heap.append((-found[0], state.rank, seq, version))  # type: ignore[index]  # found is a score tuple on this branch

    @staticmethod
    def _static_key(cache: _ShapeCache, state: NodeState) -> str | None:
        """The rejection key every node of ``state``'s shape gives the cache's member
        whatever its free capacity, or None (see `_ShapeCache.static`)."""
        member = cache.member
        spec = state.spec
        if spec.cpu_milli < member.cpu_milli:
            key: str | None = "cpu_capacity"
        elif spec.memory_mib < member.memory_mib:
            key = "memory_capacity"
        else:
            elig = state.eligible.get(cache.static_key)
            if elig is None:
                elig = state.eligible[cache.static_key] = eligible_gpus(
                    state, member, cache.allow_ts
                )
            key = elig if isinstance(elig, str) else None
            if key == "clique_too_small" and cache.whole:
                key = None  # its free GPUs still count in the free-clique figures
        cache.static[state.shape_id] = key
        return key

    def _whole_stat(self, cache: _ShapeCache, state: NodeState) -> tuple[int, int]:
        if not cache.whole:
            return NO_WHOLE
        elig = state.eligible.get(cache.probe_key)
        if elig is None:
            elig = state.eligible[cache.probe_key] = eligible_gpus(
                state, whole_probe(cache.member), cache.allow_ts
            )
        return whole_stat(state, cache.member, cache.allow_ts, elig)

    # -- memoised scores (rule 6) and their validity (rule 1) --------------------------

    def _memo_score(
        self,
        cache: _ShapeCache,
        memo: dict,
        sid: int,
        state: NodeState,
    ) -> tuple[tuple[int, Option] | str, tuple[int, int]]:
        """(score or rejection key, whole-GPU stat) of `state`, whose state id is `sid`, from
        the cache's memo of node states (computed and remembered on a miss)."""
        hit = memo.get(sid)
        if hit is None:
            hit = (self._score_now(cache, state), self._whole_stat(cache, state))
            if len(memo) >= self._memo_cap:
                memo.clear()
            memo[sid] = hit
        return hit

    def _state_id(self, state: NodeState) -> int:
        """A small id of the node's `state_key` (equal keys, equal ids while the id table
        lasts; ids are never reused, so a cleared table only costs memo misses); kept on the
        node (`state_key_memo`) until its version changes."""
        known = state.state_key_memo
        if known is not None and known[0] == state.version:
            return known[1]
        key = state.state_key()
        sid = self._state_ids.get(key)
        if sid is None:
            if len(self._state_ids) >= 16 * self._memo_cap:
                self._state_ids.clear()
            sid = self._state_ids[key] = self._next_state_id
            self._next_state_id += 1
        state.state_key_memo = (state.version, sid)
        return sid

    def _score_now(self, cache: _ShapeCache, state: NodeState) -> tuple[int, Option] | str:
        """(score, option) on a node with the capacity for the member, or the rejection key."""
        member = cache.member
        elig = state.eligible.get(cache.static_key)
        if elig is None:  # capacity passed in _score, so the memo holds GPU eligibility only
            elig = state.eligible[cache.static_key] = eligible_gpus(state, member, cache.allow_ts)
        if isinstance(elig, str):
            return elig
        opts = options(state, member, cache.tenant, elig)
        if isinstance(opts, str):
            return opts
        return cache.scorer.best(self._ctx, state, member, opts)

    def _valid(self, cache: _ShapeCache, seq: int) -> tuple[NodeState, int, Option] | None:
        state = self._by_seq.get(seq)
        if state is None or not state.schedulable:
            return None
        entry = cache.entries.get(seq)
        if entry is None or cache.seen.get(seq) != state.version or cache.keys.get(seq) != "fits":
            return None
        return state, entry[0], entry[1]
