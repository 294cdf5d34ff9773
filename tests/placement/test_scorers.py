"""Scorer definitions: the fragmentation measure, FGD's score, best-fit, default."""

import math

import pytest

from gpuledger.services.placement import Fleet, Fragmentation, Placement, TypicalTask
from gpuledger.services.placement.scorers import frag_delta_scores

from .helpers import gang, node


def test_fragmentation_matches_the_definition_by_hand():
    # one 4-GPU node; free milli 1000, 500, 200, 0; free CPU 10 cores
    tasks = (
        TypicalTask(0, 0, 0, weight=1),  # CPU-only: all idle GPU counts: 1700
        TypicalTask(4000, 1, 600, weight=2),  # fits GPU 0; GPUs below 600: 500+200 = 700
        TypicalTask(20_000, 1, 100, weight=1),  # not enough CPU: all idle: 1700
        TypicalTask(1000, 2, 1000, weight=1),  # needs 2 whole GPUs, 1 free: 1700
    )
    frag = Fragmentation(tasks)
    n = Fleet([node("n", gpus=4, sharing="mps", cpu=10_000)]).node_state("n")
    free = [1000, 500, 200, 0]
    assert frag.node_frag(n.frag_layout, 10_000, free) == 1700 + 2 * 700 + 1700 + 1700
    assert frag.total_weight == 5


def test_score_is_the_paper_sigmoid_on_integers():
    frag = Fragmentation((TypicalTask(0, 1, 500, weight=3),))
    for delta in (-9000, -1200, -37, 0, 1, 40, 999, 4000, 30000):
        scaled = delta * 3
        assert frag.score(scaled) == math.floor(100 / (1 + math.exp(-delta / 1000)))
        assert frag.score(scaled) == frag.score_exact(scaled)


def test_fgd_prefers_the_gpu_that_adds_least_fragmentation():
    # typical task: 500 milli shares. A 500 share on a half-used GPU fills it exactly;
    # on an empty GPU it leaves 500, still usable. A 300 share on the half-used GPU would
    # leave 200 (unusable for 500): fragmentation +200, so FGD puts it on the empty GPU.
    f = Fleet([node("n", gpus=2, sharing="mps")], typical_tasks=(TypicalTask(0, 1, 500, weight=1),))
    half = gang("h", gpu_milli=500)
    p = f.place(half, "fgd")
    f.allocate("h", "t", p, half)
    used = p.members[0].gpus[0]
    assert f.place(gang("x", gpu_milli=300), "fgd").members[0].gpus != (used,)
    assert f.place(gang("y", gpu_milli=500), "fgd").members[0].gpus == (used,)
    deltas = {
        opt[0]: d
        for d, _, opt in frag_delta_scores(
            f._frag,
            f.node_state("n"),
            gang("x", gpu_milli=300).member,
            [((0,), None), ((1,), None)],
        )
    }
    assert deltas[(used,)] < deltas[(1 - used,)]


def test_bestfit_takes_tightest_node_and_gpu():
    f = Fleet(
        [node("big", gpus=8, sharing="mps"), node("small", gpus=2, sharing="mps", cpu=16_000)]
    )
    g = gang("g", gpu_milli=400, cpu_milli=1000)
    assert f.place(g, "bestfit").members[0].node == "small"
    f.allocate(
        "a",
        "t",
        Placement((f.place(gang("a", gpu_milli=700), "bestfit").members[0],)),
        gang("a", gpu_milli=700),
    )
    # a 300 share now fits exactly on the 700-used GPU
    p = f.place(gang("b", gpu_milli=300), "bestfit")
    assert p.members[0].gpus == f.allocation("a").placement.members[0].gpus


def test_default_avoids_stranding_gpus_behind_exhausted_cpu():
    # Two identical nodes with 2 GPUs; the workload needs 8 cores per GPU. A CPU-only task
    # of 12 cores leaves 4 cores on one node (its GPUs are stranded). Default sends it to
    # the node whose GPUs are already busy; FGD is indifferent (ties by node order).
    typical = (TypicalTask(8000, 1, 1000, weight=1),)
    f = Fleet(
        [
            node("idle", gpus=2, sharing="mps", cpu=16_000),
            node("busy", gpus=2, sharing="mps", cpu=16_000),
        ],
        typical_tasks=typical,
        node_order=["idle", "busy"],
    )
    busy = gang("b", gpus=2)
    f.allocate("b", "t", f.place(busy, "bestfit", exclude=["idle"]), busy)
    cpu_task = gang("c", cpu_milli=12_000)
    assert f.place(cpu_task, "default").members[0].node == "busy"


@pytest.mark.parametrize("policy", ["bestfit", "packing", "fgd", "default"])
def test_cached_scores_equal_fresh_scores(policy):
    # Same decisions from a long-lived fleet (incremental caches) and from a fleet
    # rebuilt from scratch before every query.
    specs = [node(f"n{i}", gpus=4, sharing="mps", cpu=32_000, clique_size=2) for i in range(5)]
    shapes = [
        dict(gpu_milli=300, cpu_milli=2000),
        dict(gpus=2, cpu_milli=8000),
        dict(gpu_milli=700, cpu_milli=6000),
        dict(cpu_milli=5000),
        dict(gpus=1),
    ]
    live = Fleet(specs)
    for k in range(30):
        g = gang(f"j{k}", **shapes[k % len(shapes)])
        fresh = Fleet(specs)
        for a in live.allocation_ids():
            al = live.allocation(a)
            fresh.allocate(a, al.tenant, al.placement, al.request)
        p = live.place(g, policy)
        assert fresh.place(g, policy) == p
        if isinstance(p, Placement):
            live.allocate(g.job_id, g.tenant, p, g)
        if k % 7 == 6:
            live.release(live.allocation_ids()[0])


def test_stranding_demand_is_per_gpu_model_and_node_type():
    tasks = (
        TypicalTask(12_000, 1, 1000, weight=3),  # any model
        TypicalTask(3_000, 1, 1000, ("P100",), weight=1),  # P100 only
        TypicalTask(40_000, 8, 1000, weight=2),  # 8 GPUs: not on 2-GPU nodes
        TypicalTask(200_000, 1, 1000, weight=5),  # more CPU than any node here
        TypicalTask(8_000, 0, 0, weight=4),  # CPU-only: no GPU demand
    )
    frag = Fragmentation(tasks)
    f = Fleet(
        [
            node("p100", gpus=2, model="P100", sharing="mps", cpu=16_000),
            node("t4", gpus=2, model="T4", sharing="mps", cpu=104_000),
            node("g2", gpus=8, model="G2", sharing="mps", cpu=96_000),
        ]
    )
    layout = {n: f.node_state(n).frag_layout for n in ("p100", "t4", "g2")}
    # P100 2 x, 16 cores: tasks 1 and 2; their ratio 39,000/4 = 9,750 per GPU, capped at the
    # node's own 8,000 per GPU
    assert frag.strand_profile(layout["p100"], 16_000) == (4, 8_000, 0)
    # T4, 104 cores: only task 1 (task 2 wants P100): 12,000 per GPU
    assert frag.strand_profile(layout["t4"], 104_000) == (3, 12_000, 0)
    # G2 x 8, 96 cores: tasks 1 and 3: (36,000 + 80,000) CPU / 19 GPUs asked
    assert frag.strand_profile(layout["g2"], 96_000) == (5, 116_000 * 1000 // 19_000, 0)
    assert frag.stranded(8_000, 2_000, 16_000) == 0  # an empty lean node strands nothing
    assert frag.stranded(8_000, 2_000, 4_000) == 1_500


def test_default_keeps_a_scarce_lean_model_for_the_tasks_that_need_it():
    # A 2-GPU P100 node with 16 cores (8 per GPU, leaner than the workload's 9.75) and an
    # 8-GPU G2 node. At a fleet-wide ratio the empty P100 node looked stranded, so a task
    # that may run anywhere went there first and a P100-only task found no room later.
    typical = (
        TypicalTask(12_000, 1, 1000, weight=3),
        TypicalTask(3_000, 1, 1000, ("P100",), weight=1),
    )
    f = Fleet(
        [
            node("p100", gpus=2, model="P100", sharing="mps", cpu=16_000),
            node("g2", gpus=8, model="G2", sharing="mps", cpu=96_000),
        ],
        typical_tasks=typical,
        node_order=["p100", "g2"],
    )
    anywhere = gang("a", gpus=1, cpu_milli=4_000)
    assert f.place(anywhere, "default").members[0].node == "g2"


def test_scarcity_weights_constrained_tasks_by_the_square_root_of_their_models_rarity():
    tasks = (
        TypicalTask(1000, 1, 1000, weight=10),  # anywhere: unchanged
        TypicalTask(1000, 1, 1000, ("T4",), weight=3),  # T4: 100 of 900 GPUs
        TypicalTask(1000, 1, 1000, ("T4", "P100"), weight=2),  # 400 of 900
        TypicalTask(1000, 1, 1000, ("A10",), weight=5),
    )  # absent: unchanged
    frag = Fragmentation(tasks)
    scarce = frag.scarcity_weighted({"G2": 500, "P100": 300, "T4": 100})
    assert [t.weight for t in scarce.tasks] == [10, 3 * 3, 2 * 1500 // 1000, 5]
    assert frag.scarcity_weighted({"G2": 800}) is frag  # no constrained task is in the fleet
    assert Fragmentation(tasks[:1]).scarcity_weighted({"G2": 1, "T4": 1}).tasks == tasks[:1]


def test_default_leaves_the_scarce_model_to_the_tasks_that_can_only_run_there():
    # One T4 node (2 GPUs) among three G2 nodes; as much work requires T4 as requires G2, so
    # FGD's fragmentation is even between a T4 and a G2 node (the tie goes to the T4, first in
    # node order). T4 is the scarce model (2 of 8 GPUs): default keeps it for T4 work.
    t4 = node("t4", gpus=2, model="T4", sharing="mps", cpu=32_000)
    g2 = [node(f"g{i}", gpus=2, model="G2", sharing="mps", cpu=32_000) for i in range(3)]
    typical = (
        TypicalTask(4_000, 1, 500, weight=2),
        TypicalTask(4_000, 1, 1000, ("T4",), weight=1),
        TypicalTask(4_000, 1, 1000, ("G2",), weight=1),
    )
    f = Fleet([t4, *g2], typical_tasks=typical, node_order=["t4", "g0", "g1", "g2"])
    assert [t.weight for t in f._ctx.frag_scarce.tasks] == [2, 2, 1]  # sqrt(8/2) = 2, sqrt(8/6) < 2
    anywhere = gang("a", gpu_milli=500, cpu_milli=4_000)
    assert f.place(anywhere, "default").members[0].node != "t4"
    assert f.place(anywhere, "fgd").members[0].node == "t4"
    f.remove_node("g0")
    f.remove_node("g1")
    f.remove_node("g2")
    assert f._ctx.frag_scarce.tasks == typical  # a fleet of T4 only: nothing is scarce


def test_memory_counts_in_defaults_measure_not_in_fgds():
    # one 2-GPU node with 10 cores and 40 GiB free; a 1-GPU task asking 4 cores, 64 GiB.
    # FGD's measure ignores memory: the task fits, nothing is fragmentation. With memory
    # counted the node cannot host it: all 2,000 idle milli count.
    task = (TypicalTask(4000, 1, 1000, weight=1, memory_mib=65_536),)
    n = Fleet([node("n", gpus=2, sharing="mps", cpu=10_000)]).node_state("n")
    free = [1000, 1000]
    assert Fragmentation(task).node_frag(n.frag_layout, 10_000, free, 40_960) == 0
    with_memory = Fragmentation(task, memory=True)
    assert with_memory.node_frag(n.frag_layout, 10_000, free, 40_960) == 2000
    assert with_memory.node_frag(n.frag_layout, 10_000, free, 65_536) == 0
    # no task asks memory: memory=True changes nothing
    assert not Fragmentation((TypicalTask(4000, 1, 1000),), memory=True).memory


def test_idle_breakdown_splits_usable_fragmented_and_stranded():
    tasks = (
        TypicalTask(8000, 1, 500, weight=1, memory_mib=32_768),
        TypicalTask(0, 0, 0, weight=5),  # CPU-only: no GPU demand, never makes a GPU usable
    )
    n = Fleet([node("n", gpus=4, sharing="mps", cpu=32_000)]).node_state("n")
    free = [1000, 300, 600, 0]
    frag = Fragmentation(tasks, memory=True)
    # enough CPU and memory: GPUs 0 and 2 usable (1600); GPU 1 below 500 milli: fragmented
    assert frag.idle_breakdown(n.frag_layout, 8000, 32_768, free) == (1600, 300, 0)
    # 6 cores left: GPUs 0 and 2 could serve the task but the node cannot feed it
    assert frag.idle_breakdown(n.frag_layout, 6000, 32_768, free) == (0, 300, 1600)
    # memory short: stranded as well; FGD's measure (memory ignored) calls them usable
    assert frag.idle_breakdown(n.frag_layout, 8000, 16_384, free) == (0, 300, 1600)
    assert Fragmentation(tasks).idle_breakdown(n.frag_layout, 8000, 16_384, free) == (
        1600,
        300,
        0,
    )


def test_fleet_idle_breakdown_sums_schedulable_nodes():
    typical = (TypicalTask(8000, 1, 1000, weight=1, memory_mib=65_536),)
    f = Fleet(
        [
            node("a", gpus=2, sharing="mps", cpu=16_000, mem=262_144),
            node("b", gpus=2, sharing="mps", cpu=16_000, mem=262_144),
            node("off", gpus=2, sharing="mps", cpu=16_000),
        ],
        typical_tasks=typical,
    )
    f.set_schedulable("off", False)
    hog = gang("hog", cpu_milli=1000, memory_mib=230_000)  # leaves 32,144 MiB on its node
    p = f.place(hog, "bestfit", exclude=["b"])
    f.allocate("hog", "t", p, hog)
    assert f.idle_breakdown() == (2000, 0, 2000)  # a's GPUs stranded by memory, b's usable


def test_stranding_profile_counts_memory_when_tasks_ask_it():
    tasks = (
        TypicalTask(8_000, 1, 1000, weight=3, memory_mib=40_960),
        TypicalTask(8_000, 1, 1000, weight=1, memory_mib=500_000),  # more than the node has
    )
    frag = Fragmentation(tasks, memory=True)
    layout = Fleet([node("n", gpus=2, sharing="mps")]).node_state("n").frag_layout
    # only the first task fits a 2-GPU node of 128 cores and 256 GiB: 8 cores and 40 GiB per GPU
    assert frag.strand_profile(layout, 128_000, 262_144) == (3, 8_000, 40_960)
    # 2 idle GPUs, CPU for both, memory for one: 1,000 milli stranded
    assert frag.stranded(8_000, 2_000, 64_000, 40_960, 40_960) == 1_000
    assert Fragmentation(tasks).strand_profile(layout, 128_000, 262_144) == (4, 8_000, 0)


def test_default_avoids_stranding_gpus_behind_exhausted_memory():
    # Two identical 2-GPU nodes with CPU to spare; the workload needs 64 GiB per GPU. A
    # CPU-only task of 200 GiB on the idle node would strand its GPUs (56 GiB left): default
    # sends it to the node whose GPUs are busy; FGD (memory ignored) takes the first node.
    typical = (TypicalTask(4000, 1, 1000, weight=1, memory_mib=65_536),)
    f = Fleet(
        [
            node("idle", gpus=2, sharing="mps", cpu=64_000, mem=262_144),
            node("busy", gpus=2, sharing="mps", cpu=64_000, mem=262_144),
        ],
        typical_tasks=typical,
        node_order=["idle", "busy"],
    )
    busy = gang("b", gpus=2)
    f.allocate("b", "t", f.place(busy, "bestfit", exclude=["idle"]), busy)
    big = gang("c", cpu_milli=4000, memory_mib=204_800)
    assert f.place(big, "default").members[0].node == "busy"
    assert f.place(big, "fgd").members[0].node == "idle"


def test_host_bound_when_typical_tasks_ask_the_fleets_cpu_per_gpu():
    # 2 tasks: 12 cores per GPU and a CPU-only one of 8 cores: 20 cores per GPU asked
    tasks = (TypicalTask(12_000, 1, 1000, weight=1), TypicalTask(8_000, 0, 0, weight=1))
    frag = Fragmentation(tasks)
    assert frag.host_bound(cpu_total=20_000, memory_total=10**6, gpu_milli_total=1000)
    assert not frag.host_bound(cpu_total=20_001, memory_total=10**6, gpu_milli_total=1000)
    # memory counts only in the memory-aware measure
    heavy = (TypicalTask(1000, 1, 1000, weight=1, memory_mib=100_000),)
    assert Fragmentation(heavy, memory=True).host_bound(10**6, 100_000, 1000)
    assert not Fragmentation(heavy).host_bound(10**6, 100_000, 1000)
    assert not Fragmentation((TypicalTask(8_000, 0, 0),)).host_bound(1, 1, 1000)  # no GPU task


def test_fleet_rechecks_host_bound_when_its_capacity_changes():
    tasks = (TypicalTask(12_000, 1, 1000, weight=1),)
    lean = node("lean", gpus=2, sharing="mps", cpu=16_000)  # 8 cores per GPU
    rich = node("rich", gpus=2, sharing="mps", cpu=64_000)
    f = Fleet([lean], typical_tasks=tasks)
    assert f._ctx.host_bound
    f.add_node(rich)  # 80 cores for 4 GPUs: 20 per GPU
    assert not f._ctx.host_bound
    f.remove_node("rich")
    assert f._ctx.host_bound


def test_the_cpu_scarce_openb_slice_is_host_bound_and_the_default_one_is_not():
    from pathlib import Path

    from gpuledger.replay.openb.trace import load_nodes, load_tasks
    from gpuledger.replay.openb.workload import typical_tasks

    openb = Path(__file__).resolve().parents[1] / "fixtures" / "openb"
    specs = [n.spec() for n in load_nodes(openb / "openb_node_list_gpu_node.csv")]
    bound = {
        name: Fleet(specs, typical_tasks=typical_tasks(load_tasks(openb / name)))._ctx.host_bound
        for name in ("openb_pod_list_cpu300.csv", "openb_pod_list_default.csv")
    }
    assert bound == {"openb_pod_list_cpu300.csv": True, "openb_pod_list_default.csv": False}
