"""The explanation of a failed placement comes from counts the fleet keeps incrementally per
request shape (no walk over the nodes). These tests run the same random event streams
through `Fleet` and through a fleet that explains by walking every node (the brute-force
`reasons.member_unplaceable`, the definition) and require identical answers: reason,
message and details (the per-reason node histogram, free-clique figures)."""

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuledger.services.placement import (
    Fleet,
    GangRequest,
    GpuSpec,
    MemberAssignment,
    MemberRequest,
    NodeSpec,
    Placement,
    PlacementConflict,
    Unplaceable,
)
from gpuledger.services.placement.reasons import member_unplaceable

from .test_properties import MIG_NAMES, MODELS, gangs


class WalkingFleet(Fleet):
    """Explains a failure by walking every node (as the whole engine did before the counts)."""

    def _explain(self, cache, states, excluded):
        nodes = [states.get(n.name, n) for n in self._nodes.values()]
        return member_unplaceable(nodes, cache.member, cache.tenant, cache.allow_ts, excluded)


@st.composite
def node_specs(draw, i, gen=0):
    n_gpus = draw(st.integers(0, 8))
    clique = draw(st.sampled_from([1, 2, 4, 8]))
    sharing = draw(st.sampled_from(["exclusive", "mps", "timeslice", "mig"]))
    model = draw(st.sampled_from(MODELS))
    gpus = tuple(
        GpuSpec(
            g,
            f"n{i}-{gen}-{g}",
            model,
            draw(st.sampled_from([40_960, 81_920])),
            f"n{i}/c{g // clique}",
            sharing,
        )
        for g in range(n_gpus)
    )
    return NodeSpec(
        f"n{i}",
        draw(st.sampled_from([8_000, 32_000, 64_000])),
        draw(st.sampled_from([16_384, 262_144])),
        gpus,
        labels=draw(st.sampled_from(LABELS)),
        leaf_switch=f"leaf{i % 2}",
    )


LABELS = ((), (("partition", "a"),), (("partition", "b"),), (("partition", "a"), ("rack", "r1")))
SELECTORS = ((), (), (("partition", "a"),), (("partition", "a"), ("rack", "r1")), (("pool", "x"),))


@st.composite
def members(draw):
    return msgspec.structs.replace(
        draw(plain_members()), node_selector=draw(st.sampled_from(SELECTORS))
    )


@st.composite
def plain_members(draw):
    kind = draw(st.sampled_from(["whole", "whole", "milli", "mig", "cpu"]))
    cpu = draw(st.sampled_from([0, 1000, 4000, 16_000, 48_000]))
    mem = draw(st.sampled_from([0, 1024, 65_536]))
    models = draw(st.sampled_from([(), ("H100",), ("A100-40GB",)]))
    gmem = draw(st.sampled_from([0, 0, 81_920]))
    if kind == "whole":
        return MemberRequest(
            gpus=draw(st.integers(1, 8)),
            cpu_milli=cpu,
            memory_mib=mem,
            gpu_models=models,
            min_gpu_memory_mib=gmem,
        )
    if kind == "milli":
        return MemberRequest(
            gpu_milli=draw(st.sampled_from([100, 250, 500, 999])),
            cpu_milli=cpu,
            memory_mib=mem,
            gpu_models=models,
        )
    if kind == "mig":
        return MemberRequest(mig_profile=draw(st.sampled_from(MIG_NAMES)), cpu_milli=cpu)
    return MemberRequest(cpu_milli=cpu, memory_mib=mem)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 7),
    data=st.data(),
    policy=st.sampled_from(["bestfit", "packing", "fgd", "default"]),
)
def test_incremental_explanations_equal_the_walk(n, data, policy):
    specs = [data.draw(node_specs(i)) for i in range(n)]
    fleet, walk = Fleet(specs), WalkingFleet(specs)
    names = [s.name for s in specs]
    for k in range(data.draw(st.integers(1, 40))):
        op = data.draw(st.integers(0, 9))
        if op == 0 and fleet.allocation_ids():
            aid = data.draw(st.sampled_from(fleet.allocation_ids()))
            fleet.release(aid)
            walk.release(aid)
            continue
        if op == 1:
            name, ok = data.draw(st.sampled_from(names)), data.draw(st.booleans())
            if name in fleet.node_names():
                fleet.set_schedulable(name, ok)
                walk.set_schedulable(name, ok)
            continue
        if op == 2:
            name = data.draw(st.sampled_from(names))
            if name in fleet.node_names():
                fleet.remove_node(name)
                walk.remove_node(name)
            else:
                spec = data.draw(node_specs(names.index(name), gen=k))
                try:
                    fleet.add_node(spec)
                except PlacementConflict:  # allocations recorded on it do not fit the new spec
                    with pytest.raises(PlacementConflict):
                        walk.add_node(spec)
                else:
                    walk.add_node(spec)
            continue
        g = data.draw(gangs(k, members()))
        exclude = data.draw(st.lists(st.sampled_from(names), max_size=2))
        released = data.draw(
            st.lists(st.sampled_from(fleet.allocation_ids()), max_size=2)
            if fleet.allocation_ids() and op == 3
            else st.just([])
        )
        got = fleet.place(g, policy, exclude=exclude, assume_released=released)
        want = walk.place(g, policy, exclude=exclude, assume_released=released)
        assert got == want
        if isinstance(got, Placement):
            for m in got.members:  # the node selector holds
                labels = set(fleet.node_spec(m.node).labels)
                assert labels.issuperset(g.member.node_selector)
            if not released and data.draw(st.booleans()):
                fleet.allocate(g.job_id, g.tenant, got, g)
                walk.allocate(g.job_id, g.tenant, got, g)
        else:
            assert isinstance(got, Unplaceable)
            event(f"unplaceable {got.reason}")
            assert sum(got.details["nodes"].values()) == len(fleet.node_names())
            # the trial view answers from the same counts
            view = fleet.trial()
            assert view.place(g, policy, exclude=exclude) == walk.trial().place(
                g, policy, exclude=exclude
            )


def test_explanation_counts_follow_a_large_fleet_without_walking():
    """500 nodes, a failing 8-GPU request after every node lost one GPU: the histogram says
    so, and after a release it moves one node from one reason to "fits"."""

    def gpus(i):
        return tuple(
            GpuSpec(g, f"n{i}-{g}", "H100", 81_920, f"n{i}/nv", "exclusive") for g in range(8)
        )

    specs = [
        NodeSpec(f"n{i:03d}", 64_000, 262_144, gpus(i), leaf_switch=f"l{i // 16}")
        for i in range(500)
    ]
    fleet = Fleet(specs)
    one = GangRequest("one", "a", MemberRequest(gpus=1, cpu_milli=1000))
    for i in range(500):
        g = GangRequest(f"x{i}", "a", MemberRequest(gpus=1, cpu_milli=1000))
        fleet.allocate(g.job_id, "a", Placement((MemberAssignment(0, f"n{i:03d}", (0,)),)), g)
    eight = GangRequest("eight", "a", MemberRequest(gpus=8, cpu_milli=1000))
    why = fleet.place(eight, "bestfit")
    assert why.reason == "TopologyUnsatisfiable"
    assert why.details["nodes"] == {"insufficient free GPUs": 500}
    assert why.details["largest_free_clique"] == 7 and why.details["free_gpus"] == 3500
    assert "0/500 nodes: 500 insufficient free GPUs" in why.message
    victim = "n000"
    fleet.release("x0")
    assert isinstance(fleet.place(eight, "bestfit"), Placement)
    why = fleet.place(eight, "bestfit", exclude=[victim])
    assert why.details["nodes"] == {"excluded": 1, "insufficient free GPUs": 499}
    assert isinstance(fleet.place(one, "bestfit"), Placement)
