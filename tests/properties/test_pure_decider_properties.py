"""Properties of pure deciders over random scenarios (tenants with limits, gangs, MIG slices,
GPU shares, preemption, reservations, cancels, node loss), run in checking mode:

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
from gpuledger.services.domain.ledger import Ledger
from tests.properties.test_preemption_properties import CLASSES, SETTINGS

shape = st.one_of(
    st.builds(lambda g, r: {"gpus": g, "replicas": r}, st.integers(1, 4), st.integers(1, 3)),
    st.builds(lambda m: {"gpu": m}, st.sampled_from(["250m", "500m"])),
    st.builds(lambda p: {"mig": p}, st.sampled_from(["1g.10gb", "3g.40gb"])),
)
job = st.fixed_dictionaries({
    "tenant": st.sampled_from(["a", "b", "c"]),
    "class": st.sampled_from(CLASSES),
    "shape": shape,
    "duration_s": st.integers(30, 3600),
    "at_s": st.integers(0, 3600),
})
policy = st.fixed_dictionaries({
    "preemption_scope": st.sampled_from(["tenant", "cluster"]),
    "min_runtime_s": st.sampled_from([0, 300]),
    "reservation_after_s": st.sampled_from([0, 600]),
    "placement_policy": st.sampled_from(["default", "bestfit", "fgd"]),
    "default_grace_s": st.sampled_from([30, 60]),
})
disruption = st.lists(
    st.one_of(
        st.tuples(st.just("cancel"), st.integers(0, 11), st.integers(0, 3600)),
        st.tuples(st.just("node_down"), st.sampled_from(["n1", "n2", "mig-1", "mps-1"]),
                  st.integers(0, 3600)),
    ),
    max_size=3,
)
limits = st.tuples(st.sampled_from([None, 4, 6]), st.sampled_from([None, 3]))


def document(jobs, pol, events_, lim) -> dict:
    doc = {
        "cluster": {"nodes": [
            {"name_prefix": "n", "count": 2, "gpus": 4},
            {"name": "mig-1", "gpus": 2, "model": "H100-80GB", "sharing": "mig"},
            {"name": "mps-1", "gpus": 2, "model": "L40S", "gpu_memory": "48Gi", "sharing": "mps"},
        ]},
        "tenants": [
            {"name": "a", "guaranteed": 4, **({"limit": lim[0]} if lim[0] else {})},
            {"name": "b", "guaranteed": 2, **({"limit": lim[1]} if lim[1] else {})},
            {"name": "c", "guaranteed": 2},
        ],
        "priority_classes": [{"name": "best-effort", "value": 10, "preemptible": True}],
        "policy": pol,
        "timeline": [
            {"at": j["at_s"], "submit": {"id": f"j{i}", "tenant": j["tenant"], "class": j["class"],
                                         "duration": j["duration_s"], **j["shape"],
                                         "checkpoint": {"interval": 300, "save": 5}}}
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
