"""Scenario specifications through Fleet.place / allocate (the simulator will replay them)."""

import pytest

from gpuledger.services.placement import Fleet, GpuSpec, NodeSpec, Placement, Unplaceable

from .helpers import gang, node

POLICIES = ["bestfit", "packing", "fgd", "default"]


@pytest.mark.parametrize("policy", POLICIES)
def test_tp8_member_lands_inside_one_clique(policy):
    # n1 has 8 free GPUs split over two cliques of 4; n2 has one clique of 8.
    fleet = Fleet([node("n1", clique_size=4), node("n2", clique_size=8)])
    p = fleet.place(gang("tp8", gpus=8), policy)
    assert isinstance(p, Placement)
    (m,) = p.members
    assert m.node == "n2" and m.gpus == tuple(range(8))


def test_member_larger_than_any_clique_is_unschedulable():
    fleet = Fleet([node("n1", clique_size=4), node("n2", clique_size=4)])
    why = fleet.place(gang("tp6", gpus=6))
    assert why.reason == "Unschedulable"
    assert why.message == "no node can ever host this member; 0/2 nodes: 2 NVLink clique too small"


def fleet_place(fleet, g, policy="bestfit"):
    p = fleet.place(g, policy)
    assert isinstance(p, Placement), p
    return p


def test_topology_message_is_quantitative():
    # 8-GPU node with cliques of 8; 2 GPUs busy -> 6 free in the clique, 8 needed.
    f = Fleet([node("a"), node("b")])
    for n in ("a", "b"):
        g = gang(f"busy-{n}", gpus=2)
        p = f.place(g, "bestfit", exclude=[x for x in ("a", "b") if x != n])
        f.allocate(f"busy-{n}", "t", p, g)
    # a third node has 8 GPUs in two cliques of 4: free GPUs exist but not in one clique
    f.add_node(node("c", clique_size=4))
    why = f.place(gang("tp8", gpus=8))
    assert why.reason == "TopologyUnsatisfiable"
    assert why.message.startswith("needs 8 GPUs in one NVLink clique; largest free clique has 6")
    assert why.details["largest_free_clique"] == 6
    assert why.details["nodes"] == {"NVLink clique too small": 1, "insufficient free GPUs": 2}
    assert why.details["free_gpus"] == 20


def test_sixteen_gpu_gang_with_twelve_free_binds_nothing_and_says_why():
    f = Fleet([node("a", leaf="l1"), node("b", leaf="l1")])
    busy = gang("busy", gpus=4)
    f.allocate("busy", "t", fleet_place(f, busy), busy)
    assert f.free_gpus() == 12
    g = gang("big", replicas=16, gpus=1)
    why = f.place(g, "default")
    assert isinstance(why, Unplaceable)
    assert why.reason == "GangIncomplete"
    assert why.message.startswith("only 12 of 16 members fit (needs at least 16)")
    assert why.details["fitted_members"] == 12
    assert f.free_gpus() == 12  # nothing bound, nothing changed
    two_by_eight = gang("big2", replicas=2, gpus=8)
    why = f.place(two_by_eight)
    assert why.reason == "GangIncomplete" and why.details["fitted_members"] == 1
    # with min_members 12 the 12 free GPUs are enough: a partial gang within bounds
    p = f.place(gang("elastic", replicas=16, min_members=12, gpus=1))
    assert isinstance(p, Placement) and len(p.members) == 12


def test_mig_request_lands_on_a_free_slice_of_a_mig_gpu():
    f = Fleet([node("plain", gpus=2), node("mig", gpus=2, sharing="mig")])
    g = gang("m", mig_profile="3g.40gb", cpu_milli=1000)
    p = fleet_place(f, g, "default")
    (m,) = p.members
    assert (m.node, m.mig_profile) == ("mig", "3g.40gb") and m.mig_start in (0, 4)
    f.allocate("m1", "t", p, g)
    # the second 3g packs onto the same GPU's other half, leaving GPU 1 whole
    p2 = fleet_place(f, g, "default")
    assert p2.members[0].gpus == m.gpus and p2.members[0].mig_start != m.mig_start
    f.allocate("m2", "t", p2, g)
    p3 = fleet_place(f, g, "default")
    f.allocate("m3", "t", p3, g)
    f.allocate("m4", "t", fleet_place(f, g, "default"), g)
    why = f.place(g)
    assert why.reason == "MIGPlacementUnavailable"
    assert why.message.startswith("MIG 3g.40gb: no GPU with a free {0,4}:4 slot")
    assert why.details["nodes"]["MIG layout full"] == 1
    assert f.place(gang("x", mig_profile="3g.71gb")).reason == "Unschedulable"


def test_precreated_mig_layout_offers_only_its_instances():
    from gpuledger.services.placement import MigInstance

    gpu = GpuSpec(
        0,
        "u0",
        "A100-80GB",
        81920,
        "c",
        "mig",
        (MigInstance("3g.40gb", 0), MigInstance("2g.20gb", 4), MigInstance("1g.10gb", 6)),
    )
    f = Fleet([NodeSpec("n", 8000, 8000, (gpu,))])
    p = fleet_place(f, gang("a", mig_profile="3g.40gb"))
    assert p.members[0].mig_start == 0
    f.allocate("a", "t", p, gang("a", mig_profile="3g.40gb"))
    assert f.place(gang("b", mig_profile="3g.40gb")).reason == "MIGPlacementUnavailable"
    assert f.place(gang("c", mig_profile="4g.40gb")).reason == "Unschedulable"
    assert fleet_place(f, gang("d", mig_profile="1g.10gb")).members[0].mig_start == 6


def test_two_tenants_fractional_jobs_never_share_an_mps_gpu():
    f = Fleet([node("n", gpus=2, sharing="mps")])
    a = gang("a", tenant="alice", gpu_milli=300)
    b = gang("b", tenant="bob", gpu_milli=300)
    pa = fleet_place(f, a, "packing")
    f.allocate("a", "alice", pa, a)
    pb = fleet_place(f, b, "packing")
    assert pb.members[0].gpus != pa.members[0].gpus
    f.allocate("b", "bob", pb, b)
    # alice can still pack next to her own share; carol finds both GPUs held
    assert (
        fleet_place(f, gang("a2", tenant="alice", gpu_milli=500), "packing").members[0].gpus
        == pa.members[0].gpus
    )
    why = f.place(gang("c", tenant="carol", gpu_milli=100))
    assert why.reason == "IsolationConflict"
    assert "mps GPUs busy with other tenants" in why.message
    # and the fleet refuses a hand-made double tenancy
    from gpuledger.services.placement import PlacementConflict

    bad = Placement((pa.members[0],))
    with pytest.raises(PlacementConflict):
        f.allocate("evil", "carol", bad, gang("evil", tenant="carol", gpu_milli=300))
    f.release("a")
    assert (
        fleet_place(f, gang("c", tenant="carol", gpu_milli=100)).members[0].gpus
        == pa.members[0].gpus
    )


def test_timeslice_gpus_only_for_gangs_that_allow_it():
    f = Fleet([node("ts", gpus=1, sharing="timeslice")])
    assert f.place(gang("x", gpu_milli=500)).reason == "IsolationConflict"
    assert "timeslice" in f.place(gang("x", gpu_milli=500)).message
    assert isinstance(f.place(gang("y", gpu_milli=500, allow_timeslice=True)), Placement)


def test_exclusive_gpus_take_no_fractions_and_models_are_respected():
    f = Fleet([node("e", gpus=2), node("a100", gpus=2, model="A100")])
    why = f.place(gang("x", gpu_milli=500))
    assert why.reason == "Unschedulable" and "no mps/timeslice GPU" in why.message
    p = fleet_place(f, gang("y", gpus=1, gpu_models=("A100",)))
    assert p.members[0].node == "a100"
    why = f.place(gang("z", gpus=1, gpu_models=("B200",)))
    assert why.reason == "Unschedulable" and why.details["nodes"] == {"wrong model": 2}
    assert f.place(gang("w", gpus=1, min_gpu_memory_mib=100_000)).reason == "Unschedulable"


def test_resources_message_counts_nodes_by_reason():
    f = Fleet([node(f"n{i}", gpus=2, cpu=8000) for i in range(3)] + [node("big", gpus=8)])
    g = gang("busy", gpus=8)
    f.allocate("busy", "t", fleet_place(f, g), g)
    why = f.place(gang("x", gpus=2, cpu_milli=16_000))
    assert why.reason == "Resources"
    assert why.message.endswith("0/4 nodes: 3 CPU capacity too small, 1 insufficient free GPUs")


def test_gang_members_prefer_one_leaf_switch():
    nodes = [node(f"a{i}", gpus=8, leaf="leafA") for i in range(2)]
    nodes += [node(f"b{i}", gpus=8, leaf="leafB") for i in range(2)]
    f = Fleet(nodes, node_order=["a0", "b0", "a1", "b1"])
    p = fleet_place(f, gang("g", replicas=2, gpus=8), "bestfit")
    assert [m.node for m in p.members] == ["a0", "a1"]
    f.set_schedulable("a1", False)
    p = fleet_place(f, gang("g", replicas=2, gpus=8), "bestfit")
    assert [m.node for m in p.members] == ["a0", "b0"]  # soft: falls back across leaves
