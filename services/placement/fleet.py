"""The fleet index: free capacity per node, allocations, and gang placement.

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

import heapq
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from .errors import PlacementConflict, UnknownAllocation, UnknownNode, UnknownPolicy
from .feasibility import Option, eligible_gpus, options
from .fragmentation import Fragmentation, TypicalTask
from .mig import profile_for
from .model import (
    GPU_MILLI,
    GangRequest,
    MemberAssignment,
    MemberRequest,
    NodeSpec,
    Placement,
    Unplaceable,
)
from .reasons import NO_WHOLE, explain, gang_incomplete, node_key, whole_probe, whole_stat
from .scorers import DEFAULT_TYPICAL_TASKS, SCORERS, ScoreContext, Scorer
from .state import MemberDelta, NodeState, node_rank

_LAST = 1 << 40
_MISS = object()


class Allocation(msgspec.Struct, frozen=True):
    """A bound gang: who holds it and the per-member resources it takes."""

    allocation_id: str
    tenant: str
    request: GangRequest
    placement: Placement
    deltas: tuple[MemberDelta, ...]
    gpu_milli: int
    """GPU milli held (MIG instances counted by their compute share): `held_milli(deltas)`."""

    @classmethod
    def of(
        cls,
        allocation_id: str,
        tenant: str,
        request: GangRequest,
        placement: Placement,
        deltas: tuple[MemberDelta, ...],
    ) -> Allocation:
        return cls(allocation_id, tenant, request, placement, deltas, held_milli(deltas))


def held_milli(deltas: Iterable[MemberDelta]) -> int:
    """GPU milli the members' deltas take (MIG instances counted by their compute share)."""
    total = 0
    for d in deltas:
        for _, m in d.gpu_milli:
            total += m
        if d.mig is not None:
            total += d.mig[1].milli_equivalent
    return total


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
        self.live: list[tuple[Any, _Log]] | None = None  # `Fleet._live_logs`
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
            if old is not None:
                n = hist[old] - 1
                if n:
                    hist[old] = n
                else:
                    del hist[old]
            hist[key] = hist.get(key, 0) + 1
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


class _Log:
    """The capacity change log of the nodes of one shape (entries: node seqs); ``base`` is
    the absolute position of ``entries[0]`` (the log is cut when long)."""

    __slots__ = ("entries", "base", "limit")

    def __init__(self) -> None:
        self.entries: list[int] = []
        self.base = 0
        self.limit = 1024  # cut beyond this many entries (label logs: 4 x nodes + 1024)

    @property
    def end(self) -> int:
        return self.base + len(self.entries)


class Fleet:
    """Mutable incremental index of nodes and allocations; answers placement queries."""

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
        self._nodes: dict[str, NodeState] = {}
        self._by_seq: dict[int, NodeState] = {}
        self._leaf: dict[str, list[int]] = {}
        self._seq = 0
        self._order: dict[str, int] = {}
        self._log: list[int] = []  # structural changes: nodes added, removed, (un)schedulable
        self._log_base = 0
        self._slogs: dict[Any, _Log] = {}  # shape id -> capacity changes of its nodes
        self._shape_nodes: dict[Any, dict[int, None]] = {}  # shape id -> seqs of its nodes
        # The label index: (key, value) -> seqs of the nodes carrying it, and the capacity
        # change log of those nodes (what a node-selector query reads: `_refresh`).
        self._label_nodes: dict[tuple[str, str], dict[int, None]] = {}
        self._llogs: dict[tuple[str, str], _Log] = {}
        self._llogs_of: dict[int, tuple[_Log, ...]] = {}  # seq -> its labels' change logs
        self._caches: dict[tuple, _ShapeCache] = {}
        self._shape_ids: dict[tuple, int] = {}
        self._state_ids: dict[tuple, int] = {}  # NodeState.state_key -> id (never reused)
        self._next_state_id = 0
        self._allocs: dict[str, Allocation] = {}
        self._allocs_on: dict[str, dict[str, None]] = {}
        self._tenant_milli: dict[str, int] = {}
        self._models: dict[str, int] = {}  # GPU model -> GPUs of that model on known nodes
        self._host_total = [0, 0]  # CPU milli, memory MiB of known nodes
        self._memo_cap = 4096  # states memoised per shape cache: max(4096, 2 x nodes)
        self._frag = Fragmentation(typical_tasks or DEFAULT_TYPICAL_TASKS)
        self._dfrag = self._memory_frag(self._frag)
        self._scarce = self._dfrag  # `default`'s, weighted by model scarcity (`_rescarce`)
        self._ctx = ScoreContext(frag=self._frag, frag_scarce=self._scarce)
        if node_order is not None:
            self.set_node_order(node_order)
        for spec in nodes:
            self.add_node(spec)

    # -- configuration -----------------------------------------------------------------

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

    def _rank(self, name: str) -> str:
        return node_rank(self._order.get(name, _LAST), name)

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

    # -- nodes -------------------------------------------------------------------------

    def add_node(self, spec: NodeSpec) -> None:
        """Add a node, or replace its spec; allocations recorded on it are re-applied
        (PlacementConflict, and no change, if the new spec cannot hold them)."""
        old = self._nodes.get(spec.name)
        self._seq += 1
        state = NodeState(spec, self._seq)
        state.rank = self._rank(spec.name)
        state.shape_id = self._shape_ids.setdefault(state.shape_id, len(self._shape_ids))  # type: ignore[arg-type]  # a spec shape is its key until interned
        if old is not None:
            state.schedulable = old.schedulable
        for alloc_id in self._allocs_on.get(spec.name, {}):
            for d in self._allocs[alloc_id].deltas:
                if d.node == spec.name:
                    state.apply(d)
        if old is not None:
            self._drop_node(old)
        self._nodes[spec.name] = state
        self._by_seq[state.seq] = state
        self._shape_nodes.setdefault(state.shape_id, {})[state.seq] = None
        if spec.labels:
            for pair in spec.labels:
                nodes = self._label_nodes.setdefault(pair, {})
                nodes[state.seq] = None
                llog = self._llogs.get(pair)
                if llog is None:
                    llog = self._llogs[pair] = _Log()
                llog.limit = 4 * len(nodes) + 1024
            self._llogs_of[state.seq] = tuple(self._llogs[p] for p in spec.labels)
        self._dfrag.remember_profile(state.frag_layout, spec.cpu_milli, spec.memory_mib)
        if state.shape_id not in self._slogs:
            self._slogs[state.shape_id] = _Log()
        self._memo_cap = max(self._memo_cap, 2 * len(self._nodes))
        for g in spec.gpus:
            self._models[g.model] = self._models.get(g.model, 0) + 1
        self._host_total[0] += spec.cpu_milli
        self._host_total[1] += spec.memory_mib
        self._leaf.setdefault(spec.leaf_switch, []).append(state.seq)
        self._logged(state.seq)
        self._refresh_context(added=None if old is not None else spec)
        self._rescarce()

    def _drop_node(self, state: NodeState) -> None:
        del self._nodes[state.name]
        del self._by_seq[state.seq]
        del self._shape_nodes[state.shape_id][state.seq]
        for pair in state.spec.labels:
            del self._label_nodes[pair][state.seq]
            self._llogs[pair].limit = 4 * len(self._label_nodes[pair]) + 1024
        self._llogs_of.pop(state.seq, None)
        for g in state.spec.gpus:
            self._models[g.model] -= 1
        self._host_total[0] -= state.spec.cpu_milli
        self._host_total[1] -= state.spec.memory_mib
        self._leaf[state.spec.leaf_switch].remove(state.seq)
        self._logged(state.seq)

    def remove_node(self, name: str) -> None:
        """Forget a node (allocations on it stay recorded until released)."""
        state = self._nodes.get(name)
        if state is None:
            raise UnknownNode(name)
        self._drop_node(state)
        self._refresh_context()
        self._rescarce()

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        """Unhealthy or lost nodes get no new placements; their allocations stay."""
        state = self._node(name)
        if state.schedulable != schedulable:
            state.schedulable = schedulable
            state.version += 1
            self._logged(state.seq)

    def _node(self, name: str) -> NodeState:
        state = self._nodes.get(name)
        if state is None:
            raise UnknownNode(name)
        return state

    # -- read-outs ---------------------------------------------------------------------

    def node_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._nodes))

    def node_spec(self, name: str) -> NodeSpec:
        return self._node(name).spec

    def node_state(self, name: str) -> NodeState:
        """The live per-node record (read-only by convention)."""
        return self._node(name)

    def capacity_gpus(self) -> int:
        """GPUs on all known nodes."""
        return sum(len(n.spec.gpus) for n in self._nodes.values())

    def capacity_by_model(self) -> dict[str, int]:
        """Milli-GPUs on all known nodes per GPU model (as `capacity_gpus`, per model)."""
        out: dict[str, int] = {}
        for name in sorted(self._nodes):
            for g in self._nodes[name].spec.gpus:
                out[g.model] = out.get(g.model, 0) + 1000
        return out

    def free_gpus(self) -> int:
        """Fully free GPUs (no share, no MIG instance) on schedulable nodes."""
        return sum(n.free_gpu_count() for n in self._nodes.values() if n.schedulable)

    def free_gpu_milli(self) -> int:
        """Idle milli over non-MIG GPUs of schedulable nodes."""
        return sum(
            sum(f for f, m in zip(n.gpu_free, n.mig, strict=True) if m is None)
            for n in self._nodes.values()
            if n.schedulable
        )

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

    def allocation(self, allocation_id: str) -> Allocation:
        a = self._allocs.get(allocation_id)
        if a is None:
            raise UnknownAllocation(allocation_id)
        return a

    def allocation_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._allocs))

    def tenant_gpu_milli(self, tenant: str | None = None) -> int | dict[str, int]:
        """GPU milli allocated to one tenant, or the whole map (sorted by tenant)."""
        if tenant is not None:
            return self._tenant_milli.get(tenant, 0)
        return dict(sorted((t, m) for t, m in self._tenant_milli.items() if m))

    # -- allocations -------------------------------------------------------------------

    def allocate(
        self, allocation_id: str, tenant: str, placement: Placement, request: GangRequest
    ) -> Allocation:
        """Bind a placement. Re-binding the identical allocation is a no-op; anything that
        would double-book a GPU, slice or share, exceed CPU/memory, break a clique or an
        isolation rule raises PlacementConflict and changes nothing."""
        existing = self._allocs.get(allocation_id)
        if existing is not None:
            if (existing.tenant, existing.placement, existing.request) == (
                tenant,
                placement,
                request,
            ):
                return existing
            raise PlacementConflict(f"allocation {allocation_id} already exists")
        deltas = self._deltas(tenant, placement, request)
        self._apply_all(deltas)
        alloc = Allocation.of(allocation_id, tenant, request, placement, deltas)
        self._allocs[allocation_id] = alloc
        for d in deltas:
            self._allocs_on.setdefault(d.node, {})[allocation_id] = None
        self._tenant_milli[tenant] = self._tenant_milli.get(tenant, 0) + alloc.gpu_milli
        return alloc

    def release(self, allocation_id: str) -> Allocation:
        """Give an allocation's resources back (members on removed nodes are skipped)."""
        alloc = self.allocation(allocation_id)
        for d in alloc.deltas:
            state = self._nodes.get(d.node)
            if state is not None:
                state.revert(d)
                self._touched(state)
            on = self._allocs_on.get(d.node)
            if on is not None:
                on.pop(allocation_id, None)
        del self._allocs[allocation_id]
        self._tenant_milli[alloc.tenant] -= alloc.gpu_milli
        return alloc

    def _apply_all(self, deltas: Iterable[MemberDelta]) -> None:
        done: list[tuple[NodeState, MemberDelta]] = []
        try:
            for d in deltas:
                state = self._nodes.get(d.node)
                if state is None:
                    raise PlacementConflict(f"unknown node {d.node}")
                state.apply(d)
                self._touched(state)
                done.append((state, d))
        except PlacementConflict:
            for state, d in reversed(done):
                state.revert(d)
                self._touched(state)
            raise

    def _deltas(
        self, tenant: str, placement: Placement, request: GangRequest
    ) -> tuple[MemberDelta, ...]:
        member = request.member
        n = len(placement.members)
        if not request.required_members <= n <= request.replicas:
            raise PlacementConflict(
                f"{n} members placed; gang needs {request.required_members}..{request.replicas}"
            )
        if len({m.rank for m in placement.members}) != n:
            raise PlacementConflict("duplicate member rank")
        out = []
        for m in placement.members:
            state = self._nodes.get(m.node)
            if state is None:
                raise PlacementConflict(f"member {m.rank}: unknown node {m.node}")
            positions = []
            for index in m.gpus:
                pos = state.pos_of_index.get(index)
                if pos is None:
                    raise PlacementConflict(f"member {m.rank}: {m.node} has no GPU {index}")
                gpu = state.spec.gpus[pos]
                if gpu.sharing == "timeslice" and not request.allow_timeslice:
                    raise PlacementConflict(f"member {m.rank}: GPU {index} is timeslice-only")
                positions.append(pos)
            kind = member.kind
            mig = None
            if kind == "whole":
                if len(m.gpus) != member.gpus:
                    raise PlacementConflict(f"member {m.rank}: needs {member.gpus} GPUs")
                if len({state.spec.gpus[p].clique for p in positions}) > 1:
                    raise PlacementConflict(f"member {m.rank}: GPUs span NVLink cliques")
                gpu_milli = tuple((i, GPU_MILLI) for i in m.gpus)
            elif kind == "milli":
                if len(m.gpus) != 1 or m.gpu_milli not in (None, member.gpu_milli):
                    raise PlacementConflict(
                        f"member {m.rank}: needs one GPU share of {member.gpu_milli}"
                    )
                gpu_milli = ((m.gpus[0], member.gpu_milli),)
            elif kind == "mig":
                if (
                    len(m.gpus) != 1
                    or m.mig_start is None
                    or m.mig_profile not in (None, member.mig_profile)
                ):
                    raise PlacementConflict(f"member {m.rank}: needs one MIG GPU and a start")
                prof = profile_for(state.spec.gpus[positions[0]].model, member.mig_profile or "")
                if prof is None:
                    raise PlacementConflict(f"member {m.rank}: GPU offers no {member.mig_profile}")
                gpu_milli = ()
                mig = (m.gpus[0], prof, m.mig_start)
            else:
                if m.gpus:
                    raise PlacementConflict(f"member {m.rank}: CPU-only member got GPUs")
                gpu_milli = ()
            out.append(
                MemberDelta(m.node, tenant, member.cpu_milli, member.memory_mib, gpu_milli, mig)
            )
        return tuple(out)

    # -- placement ---------------------------------------------------------------------

    def scorer(self, policy: str | Scorer) -> Scorer:
        if isinstance(policy, str):
            s = SCORERS.get(policy)
            if s is None:
                raise UnknownPolicy(policy)
            return s
        return policy

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

    def trial(self) -> TrialFleet:
        """A copy-on-write view of this fleet for trial placements (see `TrialFleet`)."""
        return TrialFleet(self)

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
                cache.sel_pair = rarest[1]  # type: ignore[index]
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
        by_seq = self._by_seq
        if start < 0:
            # New, or behind the change log's start: rescore every node whose version
            # differs from the one it was last scored at (all of them for a new cache).
            fresh = not cache.seen
            if fresh:
                cache.entries.clear()
            if fresh:
                self._score_fresh(cache)
                heapq.heapify(cache.heap)
            else:
                for seq in [q for q in cache.keys if q not in by_seq]:  # removed nodes
                    cache.forget(seq)
                self._rescore(cache, self._nodes.values(), True)
            for sid, slog in self._slogs.items():
                cache.spos[sid] = slog.end
            if cache.sel_pair is not None:
                llog = self._llogs.get(cache.sel_pair)
                cache.lpos = None if llog is None else llog.end
            cache.live = None  # the static keys are known now
        else:
            changed: list[NodeState] = []
            if start < len(log):
                for seq in dict.fromkeys(log[start:]):
                    st = by_seq.get(seq)
                    if st is not None:
                        changed.append(st)
                    elif seq in cache.keys:
                        cache.forget(seq)
            static = cache.static
            spos = cache.spos
            if cache.sel_pair is not None:  # the label index: only nodes carrying the pair
                changed += self._label_changes(cache)
            for sid, slog in () if cache.sel_pair is not None else self._live_logs(cache):
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
            if changed:  # a node in several logs is rescored once (`seen`)
                self._rescore(cache, changed, True)
        cache.pos = self._log_base + len(log)
        if len(cache.heap) > 2 * len(self._nodes) + 64:
            self._compact(cache)

    def _label_changes(self, cache: _ShapeCache) -> list[NodeState]:
        """Nodes carrying the cache's selector pair whose capacity changed since the cache last
        read that pair's change log (all of them when it never did or fell behind the log's
        start): the nodes outside the selector are never read."""
        pair = cache.sel_pair
        llog = self._llogs.get(pair)  # type: ignore[arg-type]
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
            return [by_seq[q] for q in self._label_nodes.get(pair, ())]  # type: ignore[arg-type]
        return [st for q in dict.fromkeys(entries[at - llog.base :]) if (st := by_seq.get(q))]

    def _live_logs(self, cache: _ShapeCache) -> list[tuple[Any, _Log]]:
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
                    seqs = [st.seq for st in states]  # type: ignore[assignment]
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

    def _logged(self, seq: int) -> None:
        """Append a structural change (node added, removed, (un)schedulable) to the fleet's
        log (fold only); a long log is cut to its last 2N entries, and a cache further
        behind compares node versions on its next query."""
        log = self._log
        log.append(seq)
        if len(log) > 4 * len(self._nodes) + 4096:
            keep = 2 * len(self._nodes) + 1024
            cut = self._log_base + len(log) - keep
            self._log = log[-keep:]
            self._log_base = cut
            for c in self._caches.values():
                if c.pos < cut:
                    c.pos = -1

    def _touched(self, state: NodeState) -> None:
        """Append a capacity change of a node to its shape's log (fold only); a long log is
        cut, and a cache behind its start compares that shape's node versions."""
        llogs = self._llogs_of.get(state.seq)
        if llogs is not None:  # the label index (`_label_changes`)
            for llog in llogs:
                le = llog.entries
                le.append(state.seq)
                if len(le) > llog.limit:
                    keep = (llog.limit - 1024) // 2 + 512
                    llog.base += len(le) - keep
                    llog.entries = le[-keep:]
        slog = self._slogs[state.shape_id]
        entries = slog.entries
        entries.append(state.seq)
        n = len(self._shape_nodes[state.shape_id])
        if len(entries) > 4 * n + 1024:
            keep = 2 * n + 512
            slog.base += len(entries) - keep
            slog.entries = entries[-keep:]

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
        trial: TrialFleet | None = None,
    ) -> Placement | Unplaceable:
        """Place member after member, each against the state the earlier ones leave. The
        members go to private copies of their nodes (layered over `overlay`, the trial's
        copies, which stay untouched too): the fleet's node records are only read.
        `trial` (whose overlay `overlay` is) keeps its copies' scores between queries; a
        one-member gang reads them instead of scoring every copy again."""
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
                if trial is not None and gang.replicas == 1:
                    side = trial.side_scores(cache)
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
            if old == new:
                return
            n = d[old] - 1
            if n:
                d[old] = n
            else:
                del d[old]
            d[new] = d.get(new, 0) + 1

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

    def __init__(self, fleet: Fleet, cache: _ShapeCache, states: dict[str, NodeState]) -> None:
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


class TrialFleet:
    """A copy-on-write view of a `Fleet` for trial placements inside `decide`.

    Reads consult the view's own node copies and allocation changes first, then the base
    fleet; writes (`allocate`, `release`) go only to the view, copying a node the first time
    it changes. The base fleet's records are never written (its score caches, memoization
    of pure functions of node states, may be filled). Throw the view away when done; a view
    must not outlive a change to its base (fold an event only after the decision)."""

    def __init__(self, base: Fleet) -> None:
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
            if (existing.tenant, existing.placement, existing.request) == (
                tenant,
                placement,
                request,
            ):
                return existing
            raise PlacementConflict(f"allocation {allocation_id} already exists")
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
            gang, self.base.scorer(policy), frozenset(exclude), explain, view.overlay, view
        )
