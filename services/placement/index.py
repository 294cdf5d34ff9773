"""The fleet's index: node records, their change logs and the allocations bound on them.

`FleetIndex` is the fold's side of `Fleet`: nodes by name, by sequence number, by leaf
switch, by shape and by label; allocations per node and GPU milli per tenant. Every node
change bumps the node's version and appends its sequence number to a change log: the
fleet's structural log (nodes added, removed, (un)schedulable: `_logged`), its shape's
capacity log and its labels' capacity logs (`_touched`). The score memos (`memo.py`) read
those logs to re-score only what changed. Pure: no I/O, clock or randomness.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from .errors import PlacementConflict, UnknownAllocation, UnknownNode
from .mig import MigProfile, profile_for
from .model import GPU_MILLI, GangRequest, MemberAssignment, MemberRequest, NodeSpec, Placement
from .state import MemberDelta, NodeState, node_rank

_LAST = 1 << 40


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

    def bound_again(self, tenant: str, placement: Placement, request: GangRequest) -> Allocation:
        """This allocation, when its id is bound again: the identical binding is a no-op (this
        one back); anything else under the same id raises PlacementConflict."""
        if (self.tenant, self.placement, self.request) == (tenant, placement, request):
            return self
        raise PlacementConflict(f"allocation {self.allocation_id} already exists")


def held_milli(deltas: Iterable[MemberDelta]) -> int:
    """GPU milli the members' deltas take (MIG instances counted by their compute share)."""
    total = 0
    for d in deltas:
        for _, m in d.gpu_milli:
            total += m
        if d.mig is not None:
            total += d.mig[1].milli_equivalent
    return total


class ChangeLog:
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


class FleetIndex:
    """Nodes and allocations with their change logs (the first layer of `Fleet`)."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeState] = {}
        self._by_seq: dict[int, NodeState] = {}
        self._leaf: dict[str, list[int]] = {}
        self._seq = 0
        self._order: dict[str, int] = {}
        self._log: list[int] = []  # structural changes: nodes added, removed, (un)schedulable
        self._log_base = 0
        self._slogs: dict[Any, ChangeLog] = {}  # shape id -> capacity changes of its nodes
        self._shape_nodes: dict[Any, dict[int, None]] = {}  # shape id -> seqs of its nodes
        # The label index: (key, value) -> seqs of the nodes carrying it, and the capacity
        # change log of those nodes (what a node-selector query reads: `_refresh`).
        self._label_nodes: dict[tuple[str, str], dict[int, None]] = {}
        self._llogs: dict[tuple[str, str], ChangeLog] = {}
        self._llogs_of: dict[int, tuple[ChangeLog, ...]] = {}  # seq -> its labels' change logs
        self._shape_ids: dict[tuple, int] = {}
        self._allocs: dict[str, Allocation] = {}
        self._allocs_on: dict[str, dict[str, None]] = {}
        self._tenant_milli: dict[str, int] = {}
        self._models: dict[str, int] = {}  # GPU model -> GPUs of that model on known nodes
        self._host_total = [0, 0]  # CPU milli, memory MiB of known nodes

    def _rank(self, name: str) -> str:
        return node_rank(self._order.get(name, _LAST), name)

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
                    llog = self._llogs[pair] = ChangeLog()
                llog.limit = 4 * len(nodes) + 1024
            self._llogs_of[state.seq] = tuple(self._llogs[p] for p in spec.labels)
        if state.shape_id not in self._slogs:
            self._slogs[state.shape_id] = ChangeLog()
        for g in spec.gpus:
            self._models[g.model] = self._models.get(g.model, 0) + 1
        self._host_total[0] += spec.cpu_milli
        self._host_total[1] += spec.memory_mib
        self._leaf.setdefault(spec.leaf_switch, []).append(state.seq)
        self._logged(state.seq)
        self._nodes_changed(state, old is None)

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
        self._nodes_changed(None, False)

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

    def _nodes_changed(self, added: NodeState | None, new: bool) -> None:
        """Hook after a node was added (`added`; `new`: not a replaced spec) or removed
        (None): the memo layer (`memo.ScoreMemos`) refreshes its scoring context here."""

    def _log_cut(self, cut: int) -> None:
        """Hook after the structural log was cut at absolute position `cut`: readers behind
        it must compare node versions (`memo.ScoreMemos`)."""

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
            self._log_cut(cut)

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
            return existing.bound_again(tenant, placement, request)
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
        n = len(placement.members)
        if not request.required_members <= n <= request.replicas:
            raise PlacementConflict(
                f"{n} members placed; gang needs {request.required_members}..{request.replicas}"
            )
        if len({m.rank for m in placement.members}) != n:
            raise PlacementConflict("duplicate member rank")
        return tuple(self._delta(tenant, m, request) for m in placement.members)

    def _delta(self, tenant: str, m: MemberAssignment, request: GangRequest) -> MemberDelta:
        """What member `m` takes of its node, checked against the request's member shape;
        PlacementConflict naming the member for anything that does not fit it."""
        member = request.member
        state = self._nodes.get(m.node)
        if state is None:
            raise PlacementConflict(f"member {m.rank}: unknown node {m.node}")
        positions = _positions(state, m, request.allow_timeslice)
        kind = member.kind
        mig = None
        if kind == "whole":
            if len(m.gpus) != member.gpus:
                raise PlacementConflict(f"member {m.rank}: needs {member.gpus} GPUs")
            if len({state.spec.gpus[p].clique for p in positions}) > 1:
                raise PlacementConflict(f"member {m.rank}: GPUs span NVLink cliques")
            gpu_milli: tuple[tuple[int, int], ...] = tuple((i, GPU_MILLI) for i in m.gpus)
        elif kind == "milli":
            if len(m.gpus) != 1 or m.gpu_milli not in (None, member.gpu_milli):
                raise PlacementConflict(
                    f"member {m.rank}: needs one GPU share of {member.gpu_milli}"
                )
            gpu_milli = ((m.gpus[0], member.gpu_milli),)
        elif kind == "mig":
            gpu_milli = ()
            mig = _mig_instance(state, m, member, positions)
        else:
            if m.gpus:
                raise PlacementConflict(f"member {m.rank}: CPU-only member got GPUs")
            gpu_milli = ()
        return MemberDelta(m.node, tenant, member.cpu_milli, member.memory_mib, gpu_milli, mig)


def _positions(state: NodeState, m: MemberAssignment, allow_timeslice: bool) -> list[int]:
    """The positions of member `m`'s GPUs on its node; PlacementConflict for a GPU the node
    lacks, or a timeslice GPU for a gang that does not allow it."""
    positions = []
    for index in m.gpus:
        pos = state.pos_of_index.get(index)
        if pos is None:
            raise PlacementConflict(f"member {m.rank}: {m.node} has no GPU {index}")
        gpu = state.spec.gpus[pos]
        if gpu.sharing == "timeslice" and not allow_timeslice:
            raise PlacementConflict(f"member {m.rank}: GPU {index} is timeslice-only")
        positions.append(pos)
    return positions


def _mig_instance(
    state: NodeState, m: MemberAssignment, member: MemberRequest, positions: list[int]
) -> tuple[int, MigProfile, int]:
    """(GPU index, profile, start) of a MIG member; PlacementConflict unless it names one
    GPU offering the member's profile and a start."""
    if len(m.gpus) != 1 or m.mig_start is None or m.mig_profile not in (None, member.mig_profile):
        raise PlacementConflict(f"member {m.rank}: needs one MIG GPU and a start")
    prof = profile_for(state.spec.gpus[positions[0]].model, member.mig_profile or "")
    if prof is None:
        raise PlacementConflict(f"member {m.rank}: GPU offers no {member.mig_profile}")
    return (m.gpus[0], prof, m.mig_start)
