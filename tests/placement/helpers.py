"""Small cluster builders for placement tests."""

from __future__ import annotations

from gpuledger.services.placement import GangRequest, GpuSpec, MemberRequest, NodeSpec


def node(
    name: str,
    gpus: int = 8,
    model: str = "H100",
    clique_size: int = 8,
    sharing: str = "exclusive",
    cpu: int = 128_000,
    mem: int = 1_048_576,
    leaf: str = "",
    gpu_memory: int = 81_920,
) -> NodeSpec:
    specs = tuple(
        GpuSpec(i, f"{name}-{i}", model, gpu_memory, f"{name}/c{i // clique_size}", sharing)
        for i in range(gpus)
    )
    return NodeSpec(name, cpu, mem, specs, leaf_switch=leaf)


def gang(
    job: str,
    tenant: str = "t",
    replicas: int = 1,
    min_members: int | None = None,
    allow_timeslice: bool = False,
    **member,
) -> GangRequest:
    return GangRequest(job, tenant, MemberRequest(**member), replicas, min_members, allow_timeslice)
