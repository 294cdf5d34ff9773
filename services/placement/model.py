"""Placement vocabulary: the cluster (nodes, GPUs) and what a gang asks for and gets.

All quantities are integers with their unit in the name (GPU milli, MiB, CPU milli).
Every type is a frozen msgspec Struct, so requests and answers can be hashed, compared and
sent as JSON unchanged. Constructors reject malformed shapes (ValueError); shapes that are
well formed but that no node could ever host are answered by `Fleet.place` with the reason
`Unschedulable`, never by an exception.
"""

from __future__ import annotations

from typing import Any

import msgspec

SHARING_MODES = ("exclusive", "mig", "mps", "timeslice")
"""How a GPU may be shared.

- ``exclusive``: whole GPUs only; never a fraction (no co-tenancy without an isolation mode).
- ``mig``: hardware partitions; only ``mig_profile`` members land here.
- ``mps``: milli shares, all co-resident shares from one tenant (one trust domain) at a time;
  a fully free mps GPU may also be taken whole.
- ``timeslice``: milli shares from any tenant, but only for gangs with ``allow_timeslice``;
  the same holds for taking such a GPU whole.
"""

GPU_MILLI = 1000
"""One whole GPU in milli units."""


class MigInstance(msgspec.Struct, frozen=True):
    """A pre-created MIG GPU instance: profile name and its first memory slice."""

    profile: str
    start: int


class GpuSpec(msgspec.Struct, frozen=True):
    """One GPU of a node. GPUs with the same ``clique`` string are NVLink peers.

    For ``sharing == "mig"`` with an empty ``mig_layout`` the GPU is dynamically
    partitionable: any valid instance may be carved out of free memory slices. A non-empty
    layout lists the pre-created instances; then only those (profile, start) slots exist.
    """

    index: int
    uuid: str
    model: str
    memory_mib: int
    clique: str
    sharing: str = "exclusive"
    mig_layout: tuple[MigInstance, ...] = ()

    def __post_init__(self) -> None:
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"GPU {self.uuid}: sharing must be one of {SHARING_MODES}")
        if self.mig_layout and self.sharing != "mig":
            raise ValueError(f"GPU {self.uuid}: mig_layout needs sharing='mig'")
        if self.index < 0 or self.memory_mib < 0:
            raise ValueError(f"GPU {self.uuid}: negative index or memory")


class NodeSpec(msgspec.Struct, frozen=True):
    """A host: CPU and memory capacity, its GPUs (unique indices), pool, labels, leaf switch."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuSpec, ...] = ()
    pool: str = "default"
    labels: tuple[tuple[str, str], ...] = ()
    leaf_switch: str = ""

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"node {self.name}: negative capacity")
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {self.name}: duplicate GPU index")


class MemberRequest(msgspec.Struct, frozen=True):
    """What one gang member needs. Exactly one GPU shape, or none (CPU-only):

    - ``gpus >= 1``: whole GPUs, all in one NVLink clique;
    - ``0 < gpu_milli < 1000``: a share of one GPU (``mps`` or ``timeslice`` GPU);
    - ``mig_profile``: one MIG instance, e.g. ``1g.10gb`` (names as in mig-profiles.md).

    ``gpu_models`` restricts GPU models (empty: any); ``min_gpu_memory_mib`` the GPU memory;
    ``node_selector`` restricts nodes to those carrying every (key, value) label pair (exact
    match, like a Kubernetes ``nodeSelector``; empty: any node).
    """

    gpus: int = 0
    gpu_milli: int = 0
    mig_profile: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: tuple[str, ...] = ()
    min_gpu_memory_mib: int = 0
    node_selector: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if list(self.node_selector) != sorted(dict(self.node_selector).items()):
            raise ValueError("node_selector must be sorted (key, value) pairs, one per key")
        if min(self.gpus, self.gpu_milli, self.cpu_milli, self.memory_mib) < 0:
            raise ValueError("negative request")
        if self.min_gpu_memory_mib < 0:
            raise ValueError("negative min_gpu_memory_mib")
        shapes = (self.gpus > 0) + (self.gpu_milli > 0) + (self.mig_profile is not None)
        if shapes > 1:
            raise ValueError("a member asks for whole GPUs, a gpu_milli share or a MIG profile")
        if self.gpu_milli >= GPU_MILLI:
            raise ValueError("gpu_milli must be below 1000; ask for whole GPUs instead")

    @property
    def kind(self) -> str:
        """``whole``, ``milli``, ``mig`` or ``cpu``."""
        if self.gpus:
            return "whole"
        if self.gpu_milli:
            return "milli"
        if self.mig_profile is not None:
            return "mig"
        return "cpu"

    @property
    def gpu_milli_total(self) -> int:
        """GPU milli this member takes (MIG counted by ``mig.milli_equivalent`` elsewhere)."""
        return self.gpus * GPU_MILLI + self.gpu_milli


class GangRequest(msgspec.Struct, frozen=True):
    """A job: ``replicas`` identical members, all-or-nothing for ``min_members``.

    Placement binds as many members as fit up to ``replicas``, and nothing unless at least
    ``min_members`` (default: ``replicas``) fit.
    """

    job_id: str
    tenant: str
    member: MemberRequest
    replicas: int = 1
    min_members: int | None = None
    allow_timeslice: bool = False
    prefer_same_leaf: bool = True

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("replicas must be at least 1")
        if self.min_members is not None and not 1 <= self.min_members <= self.replicas:
            raise ValueError("min_members must be within 1..replicas")

    @property
    def required_members(self) -> int:
        return self.replicas if self.min_members is None else self.min_members


class MemberAssignment(msgspec.Struct, frozen=True):
    """Where one member landed: node, GPU indices, and its milli share or MIG slot."""

    rank: int
    node: str
    gpus: tuple[int, ...] = ()
    gpu_milli: int | None = None
    mig_profile: str | None = None
    mig_start: int | None = None


class Placement(msgspec.Struct, frozen=True):
    """A whole gang's placement (members in rank order)."""

    members: tuple[MemberAssignment, ...]


class Unplaceable(msgspec.Struct, frozen=True):
    """Why a gang cannot be placed now: a CamelCase reason code, a quantitative message,
    and JSON-able details (always with ``nodes``: a histogram of per-node reasons)."""

    reason: str
    message: str
    details: dict[str, Any]
