"""Node labels and a member's node selector: placement takes only nodes carrying every
selected label (exact match), explains the others as "not in key=value", and nodes of
other partitions changing never disturb the answer."""

from gpuledger.services.placement import (
    Fleet,
    GangRequest,
    MemberAssignment,
    MemberRequest,
    NodeSpec,
    Placement,
    Unplaceable,
)
from gpuledger.services.placement.reasons import member_unplaceable

from .helpers import node


def labelled(name: str, gpus: int = 8, **labels: str) -> NodeSpec:
    spec = node(name, gpus=gpus)
    return NodeSpec(
        spec.name, spec.cpu_milli, spec.memory_mib, spec.gpus, labels=tuple(sorted(labels.items()))
    )


def job(name: str, gpus: int = 1, replicas: int = 1, **selector: str) -> GangRequest:
    member = MemberRequest(gpus=gpus, cpu_milli=1000, node_selector=tuple(sorted(selector.items())))
    return GangRequest(name, "t", member, replicas)


def test_a_selected_job_lands_only_on_nodes_with_the_label():
    # given 4 H100 nodes, two in partition a100 (sorting last by name) and two in h100
    fleet = Fleet(
        [
            labelled("a1", partition="h100"),
            labelled("a2", partition="h100"),
            labelled("z1", partition="a100"),
            labelled("z2", partition="a100"),
        ]
    )
    # when a 2-member gang selects partition=a100
    got = fleet.place(job("j", gpus=8, replicas=2, partition="a100"))
    # then both members go to the a100 partition's nodes
    assert isinstance(got, Placement)
    assert sorted(m.node for m in got.members) == ["z1", "z2"]
    # and without a selector the first-named nodes are just as good
    free = fleet.place(job("k", gpus=8, replicas=2))
    assert isinstance(free, Placement)


def test_a_selector_no_node_matches_is_unschedulable_with_the_count():
    fleet = Fleet([labelled(f"n{i:03d}", partition="h100") for i in range(120)])
    why = fleet.place(job("j", partition="a100"))
    assert isinstance(why, Unplaceable)
    assert why.reason == "Unschedulable"
    assert "0/120 nodes: 120 not in partition=a100" in why.message
    assert why.details["nodes"] == {"not in partition=a100": 120}
    assert why.details["node_selector"] == {"partition": "a100"}


def test_a_full_partition_is_a_resources_wait_naming_both_reasons():
    # given partition a with one node whose GPUs are all taken, partition b free
    fleet = Fleet([labelled("a1", partition="a"), labelled("b1", partition="b")])
    hog = job("hog", gpus=8, partition="a")
    fleet.allocate("hog", "t", fleet.place(hog), hog)
    # when a job selects partition a
    why = fleet.place(job("j", partition="a"))
    # then it waits for resources (preemption could help) though b has free GPUs
    assert why.reason == "Resources"
    assert "0/2 nodes: 1 insufficient free GPUs, 1 not in partition=a" in why.message
    assert "on nodes with partition=a" in why.message


def test_every_selected_label_must_match():
    fleet = Fleet(
        [
            labelled("n1", partition="a"),
            labelled("n2", partition="a", rack="r2"),
            labelled("n3", rack="r2"),
        ]
    )
    got = fleet.place(job("j", partition="a", rack="r2"))
    assert [m.node for m in got.members] == ["n2"]


def test_changes_outside_the_partition_keep_the_incremental_answer_equal_to_the_walk():
    # given a cached selector query, then allocations on nodes outside the partition
    fleet = Fleet([labelled(f"n{i}", gpus=2, partition="a" if i < 2 else "b") for i in range(6)])
    sel = job("probe", gpus=2, partition="a")
    assert isinstance(fleet.place(sel), Placement)
    for i in range(2, 6):
        g = job(f"x{i}", gpus=2)
        fleet.allocate(g.job_id, "t", Placement((MemberAssignment(0, f"n{i}", (0, 1)),)), g)
    for i in range(2):
        g = job(f"y{i}", gpus=2, partition="a")
        fleet.allocate(g.job_id, "t", fleet.place(g), g)
    # when the selector query is asked again
    why = fleet.place(sel)
    # then it equals the brute-force walk over every node
    nodes = [fleet.node_state(n) for n in fleet.node_names()]
    walk = member_unplaceable(nodes, sel.member, "", False, frozenset())
    assert (why.reason, why.message) == (walk.reason, walk.message)
    assert why.details["nodes"] == {"insufficient free GPUs": 2, "not in partition=a": 4}
    # and a node added to the partition is found at once
    fleet.add_node(labelled("n9", gpus=2, partition="a"))
    assert [m.node for m in fleet.place(sel).members] == ["n9"]


def test_a_selector_must_be_sorted_unique_pairs():
    import pytest

    with pytest.raises(ValueError, match="node_selector"):
        MemberRequest(node_selector=(("b", "1"), ("a", "1")))


def _walk_equal(fleet: Fleet, gang: GangRequest) -> Unplaceable | Placement:
    got = fleet.place(gang)
    nodes = [fleet.node_state(n) for n in fleet.node_names()]
    if isinstance(got, Unplaceable):
        walk = member_unplaceable(nodes, gang.member, "", False, frozenset())
        assert (got.reason, got.message) == (walk.reason, walk.message)
    return got


def test_the_label_index_follows_long_runs_of_changes_and_late_nodes():
    """A selector query reads only its label's change log: after more changes than the log
    keeps (it is cut), and for a label no node carried when the query was first asked, the
    answers still equal the walk over every node."""
    fleet = Fleet([labelled("a1", gpus=2, partition="a"), labelled("b1", gpus=2, partition="b")])
    sel_a = job("qa", gpus=2, partition="a")
    sel_c = job("qc", gpus=2, partition="c")
    assert isinstance(_walk_equal(fleet, sel_a), Placement)
    assert _walk_equal(fleet, sel_c).reason == "Unschedulable"
    hold = job("hold", gpus=2, partition="a")
    for i in range(1500):  # > the label log's 4 x 1 + 1024 entries: the log is cut
        g = job(f"x{i}", gpus=1)
        fleet.allocate(g.job_id, "t", Placement((MemberAssignment(0, "a1", (0,)),)), g)
        fleet.release(g.job_id)
    fleet.allocate("hold", "t", fleet.place(hold), hold)
    assert _walk_equal(fleet, sel_a).reason == "Resources"
    fleet.release("hold")
    assert [m.node for m in _walk_equal(fleet, sel_a).members] == ["a1"]
    # a node of partition c arrives; a gang fills it; the c query (cached while no node had
    # the label) sees both
    fleet.add_node(labelled("c1", gpus=2, partition="c"))
    assert [m.node for m in _walk_equal(fleet, sel_c).members] == ["c1"]
    fill = job("fill", gpus=2, partition="c")
    fleet.allocate("fill", "t", fleet.place(fill), fill)
    assert _walk_equal(fleet, sel_c).reason == "Resources"
    fleet.remove_node("c1")
    assert _walk_equal(fleet, sel_c).reason == "Unschedulable"


def test_selector_queries_decide_as_a_fresh_fleet_over_long_streams():
    """Selector queries read only their label's change log: over a long random stream (label
    logs truncated, nodes re-added, unschedulable, released) every sampled answer equals a
    fleet rebuilt from scratch before the query."""
    import random

    from .helpers import churned, gang, rebuilt

    def specs():
        out = []
        for i in range(10):
            spec = node(f"n{i}", gpus=4, cpu=32_000, clique_size=2)
            labels = (("partition", "a" if i < 5 else "b"),) + ((("rack", "r1"),) if i % 2 else ())
            out.append(
                NodeSpec(spec.name, spec.cpu_milli, spec.memory_mib, spec.gpus, labels=labels)
            )
        return out

    rnd = random.Random("selectors")
    nodes = specs()
    live = Fleet(nodes, node_order=[n.name for n in nodes])
    unschedulable: set[str] = set()
    selectors = [
        (),
        (("partition", "a"),),
        (("partition", "b"),),
        (("partition", "a"), ("rack", "r1")),
    ]
    for k in range(6000):
        if churned(live, nodes, unschedulable, rnd):
            continue
        g = gang(
            f"j{k}",
            replicas=rnd.choice([1, 1, 2]),
            gpus=rnd.choice([1, 2, 4]),
            cpu_milli=1000,
            node_selector=rnd.choice(selectors),
        )
        p = live.place(g, "default", explain=False)
        if k % 25 == 0 or k > 5900:
            assert rebuilt(live, nodes, unschedulable).place(g, "default", explain=False) == p, k
        if isinstance(p, Placement):
            live.allocate(g.job_id, g.tenant, p, g)
    assert live._llogs[("partition", "a")].base > 0  # the label log was truncated
