"""Small cluster builders for placement tests, and the random churn and from-scratch rebuild
the incremental-index tests compare against."""

from __future__ import annotations

import random

from gpuledger.services.placement import Fleet, GangRequest, GpuSpec, MemberRequest, NodeSpec


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


def rebuilt(live: Fleet, nodes, unschedulable: set[str]) -> Fleet:
    """A fresh fleet of `nodes` holding `live`'s allocations, `unschedulable` cordoned."""
    fresh = Fleet(nodes, node_order=[n.name for n in nodes])
    for a in live.allocation_ids():
        al = live.allocation(a)
        fresh.allocate(a, al.tenant, al.placement, al.request)
    for name in sorted(unschedulable):
        fresh.set_schedulable(name, False)
    return fresh


def churned(live: Fleet, nodes, unschedulable: set[str], rnd: random.Random) -> bool:
    """One roll of `rnd`: about a third of the time one random change of `live` (a node's
    schedulable flag flipped, a node re-registered with the same spec: a new state object,
    an allocation released) instead of a placement; whether it made one."""
    roll = rnd.random()
    if roll < 0.03:
        name = rnd.choice(nodes).name
        flag = name in unschedulable
        live.set_schedulable(name, flag)
        (unschedulable.discard if flag else unschedulable.add)(name)
        return True
    if roll < 0.05:
        live.add_node(rnd.choice(nodes))
        return True
    if live.allocation_ids() and roll < 0.35:
        live.release(rnd.choice(live.allocation_ids()))
        return True
    return False
