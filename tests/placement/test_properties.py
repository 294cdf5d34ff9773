"""Property tests: invariants of the fleet on random clusters and request streams."""

from collections import defaultdict

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuledger.services.placement import (
    Fleet,
    GangRequest,
    GpuSpec,
    MemberRequest,
    MigSlots,
    NodeSpec,
    Placement,
    Unplaceable,
    profile_for,
)

MODELS = ("H100", "A100-40GB")
MIG_NAMES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.5gb")


@st.composite
def node_specs(draw, i):
    n_gpus = draw(st.integers(0, 8))
    clique = draw(st.sampled_from([1, 2, 4, 8]))
    sharing = draw(st.sampled_from(["exclusive", "mps", "timeslice", "mig"]))
    model = draw(st.sampled_from(MODELS))
    gpus = tuple(
        GpuSpec(g, f"n{i}-{g}", model, 40_960, f"n{i}/c{g // clique}", sharing)
        for g in range(n_gpus)
    )
    return NodeSpec(
        f"n{i}",
        draw(st.sampled_from([8_000, 32_000, 64_000])),
        draw(st.sampled_from([16_384, 262_144])),
        gpus,
        leaf_switch=f"leaf{i % 2}",
    )


@st.composite
def clusters(draw):
    k = draw(st.integers(1, 5))
    return [draw(node_specs(i)) for i in range(k)]


@st.composite
def members(draw):
    kind = draw(st.sampled_from(["whole", "milli", "mig", "cpu"]))
    cpu = draw(st.sampled_from([0, 1000, 4000, 16_000]))
    mem = draw(st.sampled_from([0, 1024, 65_536]))
    if kind == "whole":
        return MemberRequest(gpus=draw(st.integers(1, 8)), cpu_milli=cpu, memory_mib=mem)
    if kind == "milli":
        return MemberRequest(
            gpu_milli=draw(st.sampled_from([100, 250, 500, 700, 999])),
            cpu_milli=cpu,
            memory_mib=mem,
        )
    if kind == "mig":
        return MemberRequest(mig_profile=draw(st.sampled_from(MIG_NAMES)), cpu_milli=cpu)
    return MemberRequest(cpu_milli=cpu, memory_mib=mem)


@st.composite
def gangs(draw, k, member=None):
    """Gang `j<k>` of 1 to 4 replicas of a drawn member (`member`: its strategy, default
    `members()`), for tenant a, b or c, maybe elastic."""
    replicas = draw(st.integers(1, 4))
    return GangRequest(
        f"j{k}",
        draw(st.sampled_from(["a", "b", "c"])),
        draw(member if member is not None else members()),
        replicas,
        draw(st.one_of(st.none(), st.integers(1, replicas))),
        draw(st.booleans()),
    )


def check_invariants(fleet: Fleet) -> None:
    """Rebuild usage from the allocations and compare with every rule and the index."""
    milli = defaultdict(int)
    users = defaultdict(list)
    mig = defaultdict(MigSlots)
    cpu = defaultdict(int)
    mem = defaultdict(int)
    for aid in fleet.allocation_ids():
        a = fleet.allocation(aid)
        req = a.request
        assert req.required_members <= len(a.placement.members) <= req.replicas
        for m, d in zip(a.placement.members, a.deltas, strict=True):
            spec = fleet.node_spec(m.node)
            by_index = {g.index: g for g in spec.gpus}
            assert len({by_index[i].clique for i in m.gpus}) <= 1, "member spans cliques"
            cpu[m.node] += d.cpu_milli
            mem[m.node] += d.memory_mib
            for idx, share in d.gpu_milli:
                g = by_index[idx]
                assert g.sharing != "mig"
                assert share == 1000 or g.sharing in ("mps", "timeslice")
                if g.sharing == "timeslice":
                    assert req.allow_timeslice
                milli[(m.node, idx)] += share
                users[(m.node, idx)].append(a.tenant)
            if d.mig is not None:
                idx, prof, start = d.mig
                g = by_index[idx]
                assert g.sharing == "mig" and profile_for(g.model, prof.name) == prof
                mig[(m.node, idx)] = mig[(m.node, idx)].with_instance(
                    prof, start
                )  # raises if invalid
    for name in fleet.node_names():
        state = fleet.node_state(name)
        spec = state.spec
        assert cpu[name] <= spec.cpu_milli and mem[name] <= spec.memory_mib
        assert state.free_cpu == spec.cpu_milli - cpu[name]
        assert state.free_mem == spec.memory_mib - mem[name]
        for pos, g in enumerate(spec.gpus):
            used = milli[(name, g.index)]
            assert 0 <= used <= 1000, "GPU over-booked"
            if g.sharing == "mig":
                assert state.mig[pos] == mig[(name, g.index)]
                continue
            assert state.gpu_free[pos] == 1000 - used
            tenants = set(users[(name, g.index)])
            if g.sharing == "mps":
                assert len(tenants) <= 1, "mps GPU shared by tenants"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=clusters(),
    data=st.data(),
    policy=st.sampled_from(["bestfit", "packing", "fgd", "default"]),
)
def test_random_streams_keep_every_invariant(cluster, data, policy):
    fleet = Fleet(cluster)
    for k in range(data.draw(st.integers(1, 25))):
        if fleet.allocation_ids() and data.draw(st.integers(0, 4)) == 0:
            fleet.release(data.draw(st.sampled_from(fleet.allocation_ids())))
            check_invariants(fleet)
            continue
        g = data.draw(gangs(k))
        before = [(n, fleet.node_state(n).version) for n in fleet.node_names()]
        free_before = fleet.free_gpu_milli()
        result = fleet.place(g, policy)
        assert fleet.free_gpu_milli() == free_before
        assert fleet.allocation_ids() == tuple(sorted(fleet.allocation_ids()))
        if isinstance(result, Placement):
            assert g.required_members <= len(result.members) <= g.replicas
            assert [m.rank for m in result.members] == list(range(len(result.members)))
            fleet.allocate(g.job_id, g.tenant, result, g)
            event(f"placed {g.member.kind}")
        else:
            event(f"unplaceable {result.reason}")
            assert isinstance(result, Unplaceable)
            assert result.reason in {
                "Resources",
                "TopologyUnsatisfiable",
                "MIGPlacementUnavailable",
                "IsolationConflict",
                "GangIncomplete",
                "Unschedulable",
            }
            assert result.message and sum(result.details["nodes"].values()) == len(before)
        check_invariants(fleet)


@settings(max_examples=40, deadline=None)
@given(
    profiles=st.lists(st.sampled_from(MIG_NAMES), min_size=1, max_size=30),
    releases=st.lists(st.integers(0, 29), max_size=10),
)
def test_mig_streams_keep_layouts_valid(profiles, releases):
    gpus = tuple(GpuSpec(g, f"m-{g}", "H100", 81_920, "m/c", "mig") for g in range(2))
    fleet = Fleet([NodeSpec("m", 64_000, 262_144, gpus)])
    placed = 0
    for k, name in enumerate(profiles):
        g = GangRequest(f"j{k}", "a", MemberRequest(mig_profile=name))
        result = fleet.place(g, "default")
        if isinstance(result, Placement):
            fleet.allocate(g.job_id, "a", result, g)
            placed += 1
        else:
            offered = profile_for("H100", name) is not None
            assert result.reason == ("MIGPlacementUnavailable" if offered else "Unschedulable")
        if k in releases and fleet.allocation_ids():
            fleet.release(fleet.allocation_ids()[0])
        check_invariants(fleet)
    assert placed >= 1 or all(profile_for("H100", n) is None for n in profiles)
