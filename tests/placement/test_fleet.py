"""Fleet bookkeeping: allocate / release, conflicts, read-outs, what-if queries."""

import msgspec
import pytest

from gpuledger.services.placement import (
    Fleet,
    MemberAssignment,
    Placement,
    PlacementConflict,
    UnknownAllocation,
    UnknownPolicy,
    Unplaceable,
)

from .helpers import gang, node


def bind(f, alloc_id, g, policy="bestfit", **kw):
    p = f.place(g, policy, **kw)
    assert isinstance(p, Placement), p
    f.allocate(alloc_id, g.tenant, p, g)
    return p


def snapshot(f):
    return [
        (n, s.free_cpu, s.free_mem, list(s.gpu_free), list(s.mps_tenant), list(s.mig))
        for n in f.node_names()
        for s in [f.node_state(n)]
    ]


def test_allocate_release_round_trip_and_readouts():
    f = Fleet([node("a", gpus=4), node("b", gpus=4, sharing="mps")])
    assert (f.capacity_gpus(), f.free_gpus()) == (8, 8)
    before = snapshot(f)
    bind(f, "w", gang("w", tenant="x", gpus=3, cpu_milli=1000, memory_mib=10))
    bind(f, "s", gang("s", tenant="y", gpu_milli=250))
    assert f.free_gpus() == 4
    assert f.tenant_gpu_milli() == {"x": 3000, "y": 250}
    assert f.allocation("s").gpu_milli == 250
    assert f.allocation_ids() == ("s", "w")
    f.release("w")
    f.release("s")
    assert snapshot(f) == before and f.tenant_gpu_milli() == {}
    with pytest.raises(UnknownAllocation):
        f.release("w")


def test_double_booking_raises_and_changes_nothing():
    f = Fleet([node("a", gpus=2)])
    g = gang("g", gpus=1)
    p = bind(f, "g1", g)
    before = snapshot(f)
    with pytest.raises(PlacementConflict):
        f.allocate("g2", "t", p, g)  # same GPU again
    two = gang("two", replicas=2, gpus=1)
    bad = Placement((MemberAssignment(0, "a", (1,)), MemberAssignment(1, "a", p.members[0].gpus)))
    with pytest.raises(PlacementConflict):
        f.allocate("two", "t", bad, two)  # member 0 fits, member 1 does not: nothing bound
    assert snapshot(f) == before
    with pytest.raises(PlacementConflict):
        f.allocate("g1", "t", Placement((MemberAssignment(0, "a", (1,)),)), g)  # id reused
    f.allocate("g1", "t", p, g)  # identical re-bind (redelivered event) is a no-op
    assert snapshot(f) == before


def test_allocation_rules_checked_on_bind():
    f = Fleet([node("a", gpus=8, clique_size=4), node("m", gpus=1, sharing="mig")])
    g = gang("g", gpus=2)
    with pytest.raises(PlacementConflict, match="cliques"):
        f.allocate("x", "t", Placement((MemberAssignment(0, "a", (3, 4)),)), g)
    with pytest.raises(PlacementConflict, match="exclusive"):
        f.allocate(
            "y", "t", Placement((MemberAssignment(0, "a", (0,), 500),)), gang("y", gpu_milli=500)
        )
    with pytest.raises(PlacementConflict):
        f.allocate(
            "z",
            "t",
            Placement((MemberAssignment(0, "m", (0,), None, "3g.40gb", 2),)),
            gang("z", mig_profile="3g.40gb"),
        )
    with pytest.raises(PlacementConflict, match="members placed"):
        f.allocate("w", "t", Placement(()), g)
    assert f.free_gpus() == 9


def test_place_does_not_mutate_and_is_deterministic():
    f = Fleet([node(f"n{i}", gpus=8, sharing="mps") for i in range(4)])
    bind(f, "a", gang("a", gpu_milli=300))
    before = snapshot(f)
    g = gang("g", replicas=3, gpus=2)
    results = {msgspec.json.encode(f.place(g, p)) for p in ["default"] * 3}
    assert len(results) == 1
    assert snapshot(f) == before


def test_assume_released_answers_what_if_without_changing_anything():
    f = Fleet([node("a", gpus=8)])
    bind(f, "v1", gang("v1", gpus=4))
    bind(f, "v2", gang("v2", gpus=4))
    big = gang("big", gpus=8)
    assert isinstance(f.place(big), Unplaceable)
    assert isinstance(f.place(big, assume_released=["v1"]), Unplaceable)
    p = f.place(big, assume_released=["v1", "v2"])
    assert isinstance(p, Placement) and p.members[0].gpus == tuple(range(8))
    assert f.allocation_ids() == ("v1", "v2") and f.free_gpus() == 0
    with pytest.raises(UnknownAllocation):
        f.place(big, assume_released=["nope", "v1"])
    assert f.free_gpus() == 0 and f.allocation_ids() == ("v1", "v2")


def test_exclude_unschedulable_remove_and_readd():
    f = Fleet([node("a", gpus=2), node("b", gpus=2)])
    assert bind(f, "x", gang("x", gpus=2), exclude=["a"]).members[0].node == "b"
    f.set_schedulable("a", False)
    why = f.place(gang("y", gpus=1))
    assert why.reason == "Resources" and why.details["nodes"]["unschedulable"] == 1
    f.set_schedulable("a", True)
    f.remove_node("b")
    assert f.capacity_gpus() == 2
    f.add_node(node("b", gpus=4))  # re-added bigger: its allocation x is still held
    assert f.free_gpus() == 4 and f.node_state("b").gpu_free == [0, 0, 1000, 1000]
    f.release("x")
    assert f.free_gpus() == 6
    bind(f, "z", gang("z", gpus=4))
    with pytest.raises(PlacementConflict):
        f.add_node(node("b", gpus=2))  # cannot hold allocation z any more
    assert len(f.node_spec("b").gpus) == 4  # old spec kept
    assert f.free_gpus() == 2


def test_unknown_policy_is_a_typed_error():
    with pytest.raises(UnknownPolicy):
        Fleet([node("a")]).place(gang("g", gpus=1), "nope")


def test_cpu_only_members_and_node_without_gpus():
    from gpuledger.services.placement import NodeSpec

    f = Fleet([NodeSpec("cpu", 4000, 1000), node("g", gpus=1, cpu=2000)])
    p = bind(f, "c", gang("c", cpu_milli=3000, memory_mib=500))
    assert p.members[0] == MemberAssignment(0, "cpu", ())
    why = f.place(gang("d", cpu_milli=3000))
    assert why.reason == "Resources" and "insufficient free CPU" in why.message
