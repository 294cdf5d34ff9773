"""Translation between the event contract's value types and the placement engine's model.

The placement engine (`services.placement`) has its own small model so it can be used
without events (benchmarks); this module is the only place the two meet.
"""

from __future__ import annotations

from typing import Protocol

from gpuledger.events import GpuInfo, JobSpec, MemberPlacement, NodeInfo
from gpuledger.services.placement import (
    GangRequest,
    GpuSpec,
    MemberAssignment,
    MemberRequest,
    MigInstance,
    NodeSpec,
    Placement,
)


class HasSpec(Protocol):
    """Anything carrying a job's spec (the ledger's JobRecord); keeps this module below the ledger."""

    spec: JobSpec


def node_spec(info: NodeInfo) -> NodeSpec:
    return NodeSpec(
        name=info.name,
        cpu_milli=info.cpu_milli,
        memory_mib=info.memory_mib,
        gpus=tuple(
            GpuSpec(
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                memory_mib=g.memory_mib,
                clique=g.clique,
                sharing=g.sharing,
                mig_layout=_layout(g),
            )
            for g in info.gpus
        ),
        pool=info.pool,
        labels=tuple(sorted(info.labels.items())),
        leaf_switch=info.leaf_switch,
    )


def _layout(g: GpuInfo) -> tuple[MigInstance, ...]:
    """A GPU's fixed MIG layout as placement instances (empty: partitioned on demand; a
    layout that does not parse is treated as on demand, admission never sees it)."""
    if not g.mig_layout or g.sharing != "mig":
        return ()
    out = []
    for entry in g.mig_layout:
        name, _, start = entry.partition("@")
        if not start.isdigit():
            return ()
        out.append(MigInstance(name, int(start)))
    return tuple(out)


def gang_request(job: HasSpec, allow_timeslice: bool = False) -> GangRequest:
    return gang_request_for(job.spec, allow_timeslice)


def gang_request_for(spec: JobSpec, allow_timeslice: bool = False) -> GangRequest:
    r = spec.resources
    return GangRequest(
        job_id=spec.job_id,
        tenant=spec.tenant,
        member=MemberRequest(
            gpus=r.gpus,
            gpu_milli=r.gpu_milli,
            mig_profile=r.mig_profile,
            cpu_milli=r.cpu_milli,
            memory_mib=r.memory_mib,
            gpu_models=r.gpu_models,
            min_gpu_memory_mib=r.min_gpu_memory_mib,
            node_selector=spec.selector(),
        ),
        replicas=spec.replicas,
        min_members=spec.min_members,
        allow_timeslice=allow_timeslice,
        prefer_same_leaf=spec.prefer_same_leaf,
    )


def to_members(placement: Placement) -> tuple[MemberPlacement, ...]:
    return tuple(
        MemberPlacement(
            rank=m.rank,
            node=m.node,
            gpus=tuple(m.gpus),
            gpu_milli=m.gpu_milli,
            mig_profile=m.mig_profile,
            mig_start=m.mig_start,
        )
        for m in placement.members
    )


def to_placement(members: tuple[MemberPlacement, ...]) -> Placement:
    return Placement(
        members=tuple(
            MemberAssignment(
                rank=m.rank,
                node=m.node,
                gpus=tuple(m.gpus),
                gpu_milli=m.gpu_milli,
                mig_profile=m.mig_profile,
                mig_start=m.mig_start,
            )
            for m in members
        )
    )
