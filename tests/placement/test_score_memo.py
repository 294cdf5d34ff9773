"""The engine's score memo (per node state, shared by nodes of one shape) and its version
scans (caches behind the change log) must decide exactly as a fleet rebuilt from scratch
before every query: long random streams over many identical nodes, with releases,
exclusions, unschedulable and re-added nodes, and enough changes to truncate the change
logs of both node shapes."""

import random

import pytest

from gpuledger.services.placement import Fleet, Placement

from .helpers import churned, gang, node, rebuilt

SHAPES = [
    dict(gpu_milli=300, cpu_milli=2000),
    dict(gpus=2, cpu_milli=8000),
    dict(gpu_milli=700, cpu_milli=6000, memory_mib=4096),
    dict(cpu_milli=5000),
    dict(gpus=1, cpu_milli=1000),
    dict(gpus=4, cpu_milli=3000),
    dict(gpu_milli=500),
]


def specs():
    # two shapes, many nodes each: names, UUIDs and clique names differ, the shape does not
    out = [
        node(f"a{i}", gpus=4, sharing="mps", cpu=16_000, clique_size=2, leaf=f"l{i % 2}")
        for i in range(6)
    ]
    out += [node(f"b{i}", gpus=8, cpu=64_000, leaf=f"l{i % 3}") for i in range(4)]
    return out


@pytest.mark.parametrize("policy", ["bestfit", "packing", "fgd", "default"])
def test_memoised_and_version_scanned_scores_decide_as_a_fresh_fleet(policy):
    rnd = random.Random(f"memo-{policy}")
    nodes = specs()
    live = Fleet(nodes, node_order=[n.name for n in nodes])
    unschedulable: set[str] = set()
    stale = 0
    shapes = SHAPES + [dict(gpu_milli=100 * k, cpu_milli=500 * k) for k in range(1, 9)]
    for k in range(6000):
        if churned(live, nodes, unschedulable, rnd):
            continue
        shape = rnd.choice(shapes)
        if k % 500 == 1:  # rare shapes: their caches fall behind the truncated change log
            shape = rnd.choice([dict(gpus=1, cpu_milli=1234), dict(gpu_milli=250, cpu_milli=777)])
        g = gang(f"j{k}", tenant=rnd.choice(["t", "u"]), replicas=rnd.choice([1, 1, 2]), **shape)
        exclude = {rnd.choice(nodes).name} if rnd.random() < 0.2 else set()
        stale += any(lg.base > 0 for lg in live._slogs.values()) and k % 500 == 1
        p = live.place(g, policy, exclude=exclude, explain=False)
        if (
            k % 25 == 0 or k % 500 == 1 or k > 5900
        ):  # rebuilding is slow: compare a sample, and the tail
            assert (
                rebuilt(live, nodes, unschedulable).place(g, policy, exclude=exclude, explain=False)
                == p
            ), k
        if isinstance(p, Placement):
            live.allocate(g.job_id, g.tenant, p, g)
    # the per-shape change logs were truncated: version scans ran
    assert all(lg.base > 0 for lg in live._slogs.values()) and stale
