"""Free capacity of one node, and the per-member deltas that change it.

`NodeState` is the only mutable per-node record. Every change goes through `apply` /
`revert` with a `MemberDelta`, which checks capacity first and raises `PlacementConflict`
instead of corrupting state. Invariants kept: free CPU and memory never negative; per GPU
``0 <= free_milli <= 1000``; an ``mps`` GPU holding shares names exactly one tenant; MIG
slots always form a valid layout; ``version`` grows on every change (cache invalidation).
"""

from __future__ import annotations

import msgspec

from .errors import PlacementConflict
from .fragmentation import layout_of
from .mig import MigProfile, MigSlots
from .model import GPU_MILLI, NodeSpec


def node_rank(order: int, name: str) -> str:
    """A node's tie order (its place in the fleet's node order, then its name) as one string
    that sorts like (order, name): the order zero-padded to 13 digits (orders are below
    10**13), so that score keys and heap items compare flat."""
    return f"{order:013d}{name}"


class MemberDelta(msgspec.Struct, frozen=True):
    """Resources one member takes on one node.

    ``gpu_milli`` pairs (GPU index, milli) for whole GPUs (1000 each) or a share;
    ``mig`` is (GPU index, profile, start) for a MIG instance.
    """

    node: str
    tenant: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: tuple[tuple[int, int], ...] = ()
    mig: tuple[int, MigProfile, int] | None = None


class NodeState:
    """Mutable free capacity of one node (GPUs addressed by position in ``spec.gpus``)."""

    __slots__ = (
        "spec",
        "name",
        "seq",
        "schedulable",
        "free_cpu",
        "free_mem",
        "gpu_free",
        "mps_tenant",
        "mps_users",
        "mig",
        "version",
        "pos_of_index",
        "cliques",
        "frag_layout",
        "eligible",
        "rank",
        "frag_memo",
        "shape_id",
        "state_key_memo",
        "labels",
    )

    __transparent_memos__ = ("eligible", "frag_memo", "state_key_memo")
    """Memos of pure functions of this record (keyed by spec or version): a read-only view
    (checking mode) lets a decide fill them (replay/readonly.py)."""

    def __init__(self, spec: NodeSpec, seq: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.seq = seq
        self.schedulable = True
        self.free_cpu = spec.cpu_milli
        self.free_mem = spec.memory_mib
        n = len(spec.gpus)
        self.gpu_free = [GPU_MILLI if g.sharing != "mig" else 0 for g in spec.gpus]
        self.mps_tenant: list[str | None] = [None] * n
        self.mps_users = [0] * n
        self.mig = [MigSlots() if g.sharing == "mig" else None for g in spec.gpus]
        self.version = 0
        self.pos_of_index = {g.index: i for i, g in enumerate(spec.gpus)}
        groups: dict[str, list[int]] = {}
        for i, g in enumerate(spec.gpus):
            groups.setdefault(g.clique, []).append(i)
        self.cliques: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
            (c, tuple(ps)) for c, ps in sorted(groups.items())
        )
        self.eligible: dict[tuple, tuple[int, ...] | str] = {}
        """Memo of `feasibility.eligible_gpus` per GPU-shape key: static for this spec."""
        self.rank: str = node_rank(0, spec.name)
        """Tie order of the fleet (`node_rank`, set by `Fleet`)."""
        self.frag_memo: tuple | None = None
        """(version, Fragmentation, F) of the current state (set by scorers)."""
        self.frag_layout = layout_of(
            self.cliques, [g.model for g in spec.gpus], [m is not None for m in self.mig]
        )
        self.shape_id: object = self.shape()
        """The node's `shape` (a `Fleet` replaces it by a small interned int)."""
        self.state_key_memo: tuple[int, int] | None = None
        """(version, id of `state_key` at that version), kept by `Fleet`."""
        self.labels: frozenset[tuple[str, str]] = frozenset(spec.labels)
        """The node's (key, value) label pairs: a member's `node_selector` must be a subset."""

    def selected(self, selector: tuple[tuple[str, str], ...]) -> bool:
        """Whether the node carries every label pair of ``selector`` (empty: every node)."""
        return not selector or self.labels.issuperset(selector)

    def shape(self) -> tuple:
        """Everything of the spec that placement depends on, without names and UUIDs: two
        nodes of one shape in one `state_key` have the same options and scores."""
        spec = self.spec
        return (
            spec.cpu_milli,
            spec.memory_mib,
            tuple((g.model, g.memory_mib, g.sharing, g.mig_layout) for g in spec.gpus),
            tuple(ps for _, ps in self.cliques),
        )

    def state_key(self) -> tuple:
        """(shape, free capacity) of the node now: feasibility and the built-in scorers are
        functions of it (``schedulable`` aside)."""
        return (
            self.shape_id,
            self.free_cpu,
            self.free_mem,
            tuple(self.gpu_free),
            tuple(self.mps_tenant),
            tuple(self.mig),
        )

    def copy(self) -> NodeState:
        """A private copy for a trial (copy-on-write overlays): same spec and static memos,
        own free capacity, own per-state memos (so a trial never touches this record)."""
        new = NodeState.__new__(NodeState)
        new.spec, new.name, new.seq, new.schedulable = (
            self.spec,
            self.name,
            self.seq,
            self.schedulable,
        )
        new.free_cpu, new.free_mem, new.version = self.free_cpu, self.free_mem, self.version
        new.pos_of_index, new.cliques, new.frag_layout = (
            self.pos_of_index,
            self.cliques,
            self.frag_layout,
        )
        new.eligible, new.rank, new.shape_id = self.eligible, self.rank, self.shape_id
        new.labels = self.labels
        new.gpu_free = list(self.gpu_free)
        new.mps_tenant = list(self.mps_tenant)
        new.mps_users = list(self.mps_users)
        new.mig = list(self.mig)  # MigSlots are immutable values
        new.frag_memo = None
        new.state_key_memo = None
        return new

    # -- read-outs -------------------------------------------------------------------------

    def free_whole(self, pos: int) -> bool:
        """A GPU is free as a whole when no share, instance or tenant sits on it."""
        return self.gpu_free[pos] == GPU_MILLI

    def free_gpu_count(self) -> int:
        n = 0
        for pos, g in enumerate(self.spec.gpus):
            if g.sharing == "mig":
                n += self.mig[pos].empty  # type: ignore[union-attr]  # a MIG GPU has its slots
            else:
                n += self.gpu_free[pos] == GPU_MILLI
        return n

    # -- mutation --------------------------------------------------------------------------

    def check(self, d: MemberDelta) -> None:
        """Raise PlacementConflict unless ``d`` fits the current free capacity."""
        if d.cpu_milli > self.free_cpu or d.memory_mib > self.free_mem:
            raise PlacementConflict(
                f"{self.name}: needs {d.cpu_milli} CPU milli / {d.memory_mib} MiB, "
                f"free {self.free_cpu} / {self.free_mem}"
            )
        seen: set[int] = set()
        for index, milli in d.gpu_milli:
            why = self._gpu_conflict(index, milli, d.tenant, seen)
            if why is not None:
                raise PlacementConflict(f"{self.name}: {why}")
        if d.mig is not None:
            why = self._mig_conflict(*d.mig)
            if why is not None:
                raise PlacementConflict(f"{self.name}: {why}")

    def _gpu_conflict(self, index: int, milli: int, tenant: str, seen: set[int]) -> str | None:
        """Why `milli` of GPU `index` cannot be taken by `tenant` now (a GPU of the member
        already `seen` included; it is added), or None."""
        pos = self.pos_of_index.get(index)
        if pos is None:
            return f"no GPU {index}"
        if pos in seen:
            return f"GPU {index} twice in one member"
        seen.add(pos)
        gpu = self.spec.gpus[pos]
        if gpu.sharing == "mig":
            return f"GPU {index} is MIG-partitioned"
        if not 0 < milli <= GPU_MILLI or milli > self.gpu_free[pos]:
            return f"GPU {index} has {self.gpu_free[pos]} milli free, needs {milli}"
        if milli < GPU_MILLI and gpu.sharing not in ("mps", "timeslice"):
            return f"GPU {index} is exclusive, no shares"
        owner = self.mps_tenant[pos]
        if gpu.sharing == "mps" and owner is not None and owner != tenant:
            return f"mps GPU {index} is held by tenant {owner}, not {tenant}"
        return None

    def _mig_conflict(self, index: int, profile: MigProfile, start: int) -> str | None:
        """Why MIG instance `profile`@`start` of GPU `index` cannot be taken now, or None."""
        pos = self.pos_of_index.get(index)
        slots = None if pos is None else self.mig[pos]
        if slots is None or not slots.fits(profile, start):
            return f"MIG {profile.name}@{start} on GPU {index}"
        layout = self.spec.gpus[pos].mig_layout  # type: ignore[index]  # set for MIG GPUs
        if layout and not any(i.profile == profile.name and i.start == start for i in layout):
            return f"GPU {index} has no {profile.name}@{start}"
        return None

    def apply(self, d: MemberDelta) -> None:
        """Take the resources of ``d`` (after `check`)."""
        self.check(d)
        self.free_cpu -= d.cpu_milli
        self.free_mem -= d.memory_mib
        for index, milli in d.gpu_milli:
            pos = self.pos_of_index[index]
            self.gpu_free[pos] -= milli
            if self.spec.gpus[pos].sharing == "mps":
                self.mps_tenant[pos] = d.tenant
                self.mps_users[pos] += 1
        if d.mig is not None:
            index, profile, start = d.mig
            pos = self.pos_of_index[index]
            self.mig[pos] = self.mig[pos].with_instance(profile, start)  # type: ignore[union-attr]  # a MIG GPU has its slots
        self.version += 1

    def revert(self, d: MemberDelta) -> None:
        """Give back the resources of ``d`` (which must have been applied here)."""
        cpu = self.free_cpu + d.cpu_milli
        mem = self.free_mem + d.memory_mib
        if cpu > self.spec.cpu_milli or mem > self.spec.memory_mib:
            raise PlacementConflict(f"{self.name}: release above capacity")
        for index, milli in d.gpu_milli:
            pos = self.pos_of_index.get(index)
            if pos is None or self.gpu_free[pos] + milli > GPU_MILLI:
                raise PlacementConflict(f"{self.name}: GPU {index} release above capacity")
        new_mig = None
        if d.mig is not None:
            index, profile, start = d.mig
            slots = self.mig[self.pos_of_index[index]] if index in self.pos_of_index else None
            if slots is None:
                raise PlacementConflict(f"{self.name}: GPU {index} is not a MIG GPU")
            new_mig = slots.without_instance(profile, start)
        self.free_cpu, self.free_mem = cpu, mem
        for index, milli in d.gpu_milli:
            pos = self.pos_of_index[index]
            self.gpu_free[pos] += milli
            if self.spec.gpus[pos].sharing == "mps":
                self.mps_users[pos] -= 1
                if self.mps_users[pos] == 0:
                    self.mps_tenant[pos] = None
        if d.mig is not None and new_mig is not None:
            self.mig[self.pos_of_index[d.mig[0]]] = new_mig
        self.version += 1
