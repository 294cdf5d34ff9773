"""Properties of pure deciders over random scenarios (tenants with limits, gangs, MIG slices,
GPU shares, preemption, reservations, consolidation, MIG re-geometry of a fixed layout,
cancels, node loss), run in checking mode:

- every decide leaves the folded state unchanged (digest before == after);
- every decide equals its re-run without caches (checking mode raises `DecideDrift`);
- the state folded incrementally while the services decide equals a fresh fold of the same
  log at every step.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuledger.replay.checking import digest
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import Simulator, simulate, standard_services
from gpuledger.services.domain.fold.ledger import Ledger
from tests.properties.test_preemption_properties import CLASSES, SETTINGS

shape = st.one_of(
    st.builds(lambda g, r: {"gpus": g, "replicas": r}, st.integers(1, 4), st.integers(1, 3)),
    st.builds(lambda m: {"gpu": m}, st.sampled_from(["250m", "500m"])),
    st.builds(lambda p: {"mig": p}, st.sampled_from(["1g.10gb", "3g.40gb"])),
)
job = st.fixed_dictionaries(
    {
        "tenant": st.sampled_from(["a", "b", "c"]),
        "class": st.sampled_from(CLASSES),
        "shape": shape,
        "duration_s": st.integers(30, 3600),
        "at_s": st.integers(0, 3600),
    }
)
policy = st.fixed_dictionaries(
    {
        "preemption_scope": st.sampled_from(["tenant", "cluster"]),
        "min_runtime_s": st.sampled_from([0, 300]),
        "reservation_after_s": st.sampled_from([0, 600]),
        "placement_policy": st.sampled_from(["default", "bestfit", "fgd"]),
        "default_grace_s": st.sampled_from([30, 60]),
        "consolidation": st.booleans(),
        "mig_regeometry": st.booleans(),
    }
)
disruption = st.lists(
    st.one_of(
        st.tuples(st.just("cancel"), st.integers(0, 11), st.integers(0, 3600)),
        st.tuples(
            st.just("node_down"),
            st.sampled_from(["n1", "n2", "mig-1", "mps-1"]),
            st.integers(0, 3600),
        ),
    ),
    max_size=3,
)
limits = st.tuples(st.sampled_from([None, 4, 6]), st.sampled_from([None, 3]))


def document(jobs, pol, events_, lim) -> dict:
    doc = {
        "cluster": {
            "nodes": [
                {"name_prefix": "n", "count": 2, "gpus": 4},
                {"name": "mig-1", "gpus": 2, "model": "H100-80GB", "sharing": "mig"},
                {
                    "name": "mig-2",
                    "gpus": 1,
                    "model": "H100-80GB",
                    "sharing": "mig",
                    "mig_layout": ["1g.10gb"] * 7,
                },
                {
                    "name": "mps-1",
                    "gpus": 2,
                    "model": "L40S",
                    "gpu_memory": "48Gi",
                    "sharing": "mps",
                },
            ]
        },
        "tenants": [
            {"name": "a", "guaranteed": 4, **({"limit": lim[0]} if lim[0] else {})},
            {"name": "b", "guaranteed": 2, **({"limit": lim[1]} if lim[1] else {})},
            {"name": "c", "guaranteed": 2},
        ],
        "priority_classes": [{"name": "best-effort", "value": 10, "preemptible": True}],
        "policy": pol,
        "timeline": [
            {
                "at": j["at_s"],
                "submit": {
                    "id": f"j{i}",
                    "tenant": j["tenant"],
                    "class": j["class"],
                    "duration": j["duration_s"],
                    **j["shape"],
                    "checkpoint": {"interval": 300, "save": 5},
                },
            }
            for i, j in enumerate(jobs)
        ],
    }
    for kind, what, at in events_:
        if kind == "cancel" and what < len(jobs):
            doc["timeline"].append({"at": at, "cancel": f"j{what}", "tenant": jobs[what]["tenant"]})
        elif kind == "node_down":
            doc["timeline"].append({"at": at, "node_down": what})
    return doc


@SETTINGS
@given(st.lists(job, min_size=1, max_size=12), policy, disruption, limits)
def test_decide_is_pure_cache_free_and_the_fold_is_incremental(jobs, pol, events_, lim):
    live: list[str] = []
    holder: dict = {}

    def after_each(seq, subject, event):
        live.append(digest(holder["sim"].ledger))

    scenario = from_document(document(jobs, pol, events_, lim))
    # checking mode raises DecideDrift at the first decide that writes or whose
    # uncached re-run differs; the digests of the live state are taken after every event
    sim = Simulator(standard_services(scenario.nodes), check=True)
    holder["sim"] = sim
    sim.on_event = after_each
    for event in scenario.config:
        sim.publish(event)
    sim.schedule(scenario.inputs)
    sim.run()

    fresh = Ledger()
    for i, (seq, _, e) in enumerate(sim.log):
        fresh.apply(seq, e)
        assert digest(fresh) == live[i], f"the live fold differs from a fresh fold at seq {seq}"
    assert simulate(scenario).log == sim.log  # checking mode decides exactly as the plain run


# -- the fleet's score memo is transparent: cached == uncached == a fresh fold ------------------
#
# `Fleet`'s per-(scorer, shape) score heaps, its state-id table and the per-node memos are
# filled by queries, inside decide (docs/deciders.md, "Caches"). They may never change an
# answer: after any sequence of folded changes, every query answers the same with the caches
# warm, with them set aside, through the read-only view, and on a fleet folded afresh.

FLEET_POLICIES = ("default", "bestfit", "packing", "fgd")


def fleet_node(i: int):
    from gpuledger.services.placement import GpuSpec, NodeSpec

    sharing = ("exclusive", "exclusive", "mps", "mig")[i % 4]
    gpus = tuple(
        GpuSpec(g, f"n{i}-g{g}", "H100", 81_920, f"n{i}/c{g // 4}", sharing) for g in range(8)
    )
    return NodeSpec(f"n{i}", 128_000, 1_000_000, gpus, leaf_switch=f"leaf-{i // 3}")


def fleet_request(k: int, kind: int, size: int, replicas: int):
    from gpuledger.services.placement import GangRequest, MemberRequest

    if kind == 0:
        member = MemberRequest(gpus=size, cpu_milli=8_000 * size, memory_mib=32_768 * size)
    elif kind == 1:
        member = MemberRequest(
            gpu_milli=(250, 500, 750, 250)[size % 4], cpu_milli=2_000, memory_mib=8_192
        )
    elif kind == 2:
        member = MemberRequest(
            mig_profile=("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")[size % 4],
            cpu_milli=2_000,
            memory_mib=8_192,
        )
    else:
        member = MemberRequest(cpu_milli=4_000 * size, memory_mib=4_096)
    return GangRequest(f"q{k}", f"t{k % 3}", member, replicas)


fleet_op = st.one_of(
    st.tuples(
        st.just("place"),
        st.integers(0, 3),
        st.sampled_from([1, 2, 4, 8]),
        st.integers(1, 4),
        st.sampled_from(FLEET_POLICIES),
    ),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("schedulable"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("add"), st.integers(0, 7)),
)


def refold(ops):
    from gpuledger.services.placement import Fleet

    fleet = Fleet()
    for op in ops:
        match op:
            case ("add", spec):
                fleet.add_node(spec)
            case ("allocate", alloc_id, tenant, placement, request):
                fleet.allocate(alloc_id, tenant, placement, request)
            case ("release", alloc_id):
                fleet.release(alloc_id)
            case ("schedulable", name, flag):
                fleet.set_schedulable(name, flag)
    return fleet


def answers(fleet, queries, view: bool = False):
    from gpuledger.replay.readonly import forget, read_only

    target = read_only(fleet, "fleet") if view else fleet
    try:
        return [target.place(request, policy) for request, policy in queries]
    finally:
        forget()


@SETTINGS
@given(
    st.lists(fleet_op, min_size=1, max_size=40),
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.sampled_from([1, 2, 4, 8]),
            st.integers(1, 3),
            st.sampled_from(FLEET_POLICIES),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_the_fleet_memo_never_changes_an_answer(ops, probes):
    from gpuledger.services.placement import Fleet, Placement

    fleet = Fleet()
    folded: list = []
    for i in range(6):
        fleet.add_node(fleet_node(i))
        folded.append(("add", fleet_node(i)))
    queries = [
        (fleet_request(100 + j, kind, size, reps), policy)
        for j, (kind, size, reps, policy) in enumerate(probes)
    ]
    for k, op in enumerate(ops):
        match op:
            case ("place", kind, size, reps, policy):
                request = fleet_request(k, kind, size, reps)
                placed = fleet.place(request, policy)
                if isinstance(placed, Placement):
                    fleet.allocate(f"a{k}", request.tenant, placed, request)
                    folded.append(("allocate", f"a{k}", request.tenant, placed, request))
            case ("release", pick):
                ids = fleet.allocation_ids()
                if ids:
                    alloc_id = ids[pick % len(ids)]
                    fleet.release(alloc_id)
                    folded.append(("release", alloc_id))
            case ("schedulable", i, flag):
                fleet.set_schedulable(f"n{i}", flag)
                folded.append(("schedulable", f"n{i}", flag))
            case ("add", i):
                fleet.add_node(fleet_node(i))
                folded.append(("add", fleet_node(i)))
        cached = answers(fleet, queries)
        with fleet.caches_set_aside():
            uncached = answers(fleet, queries)
        assert cached == uncached, f"after op {k} {op}"
        assert answers(fleet, queries, view=True) == cached, f"through the view, after op {k} {op}"
    assert answers(refold(folded), queries) == answers(fleet, queries)


def test_the_fleet_memo_survives_the_change_log_being_cut():
    """Thousands of folded capacity changes cut the per-shape change logs (in the fold); a
    cache left behind a cut compares node versions on its next query and still answers as a
    fresh fleet does."""
    from gpuledger.services.placement import Placement

    fleet = refold([("add", fleet_node(i)) for i in range(6)])
    queries = [
        (fleet_request(900 + j, j % 4, (1, 2, 4, 8)[j % 4], 1), FLEET_POLICIES[j % 4])
        for j in range(8)
    ]
    answers(fleet, queries)  # warm every cache, then leave them behind
    bases = {sid: log.base for sid, log in fleet._slogs.items()}
    for k in range(3_000):
        request = fleet_request(k, k % 4, (1, 2, 4, 8)[k % 4], 1)
        placed = fleet.place(request, "default")
        if isinstance(placed, Placement):
            fleet.allocate(f"a{k}", request.tenant, placed, request)
        ids = fleet.allocation_ids()
        if len(ids) > 10:
            fleet.release(ids[k % len(ids)])
    assert any(log.base > bases.get(sid, 0) for sid, log in fleet._slogs.items()), (
        "no change log was cut"
    )
    cached = answers(fleet, queries)
    with fleet.caches_set_aside():
        assert answers(fleet, queries) == cached
