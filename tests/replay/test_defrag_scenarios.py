"""Issue 16's defragmentation through the simulator: given the scenario files under examples/,
when they run on the virtual clock, then the consolidation pass migrates a small job so a
fragmented one fits, and MIG re-geometry re-partitions an idle GPU within its rate limit —
asserted on placements, events and reasons, as `simulate --json` and `why` show them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuledger import events as ev
from gpuledger.replay.report import report
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.inputs.schema import InputError as ConfigFileError
from tests.replay.simlog import logged

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(name: str, check: bool = False, **policy):
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    if policy:
        doc["policy"] = {**(doc.get("policy") or {}), **policy}
    sim = simulate(from_document(doc), check=check)
    rep = report(sim.ledger, sim.log, sim.now_ms)
    return sim, {j["id"]: j for j in rep["jobs"]}, rep["metrics"]


def nodes_of(placement) -> list[str]:
    return sorted({m["node"] for m in placement["members"]})


# ---------------------------------------------------------------- consolidation


def test_consolidation_migrates_one_small_job_and_the_fragmented_job_lands():
    # given two nodes with 2 + 2 free GPUs, when `wide` asks for 4 in one clique at 900 s
    sim, jobs, metrics = run("consolidation.yaml", check=True)
    # then one ConsolidationPlanned for wide, moving exactly one 2-GPU job off n1 to n2
    (planned,) = logged(sim, ev.ConsolidationPlanned)
    assert planned.job_id == "wide" and planned.target_nodes == ("n1",)
    assert [(m.job_id, m.from_nodes, m.to_nodes, m.gpu_milli) for m in planned.moves] == [
        ("p2", ("n1",), ("n2",), 2000)
    ]
    assert planned.free_gpu_milli == 4000 and planned.occurred_at_ms == 900_000
    assert "4 are free, but fragmented" in planned.message
    # and the move is a checkpoint-then-evict preemption with reason Consolidate
    (req,) = logged(sim, ev.PreemptionRequested)
    assert (req.job_id, req.beneficiary, req.reason) == ("p2", "wide", "Consolidate")
    assert req.details["migration"] == {"to_nodes": ["n2"], "for": "wide"}
    (evicted,) = logged(sim, ev.GangEvicted, job_id="p2")
    assert (evicted.reason, evicted.preempted_by, evicted.checkpointed, evicted.lost_gpu_ms) == (
        "Consolidate",
        "wide",
        True,
        0,
    )
    # then p2 is placed again on n2 at once (after its 20 s save), resuming from its checkpoint,
    # and wide lands on the 4 GPUs of n1 at the same instant
    assert [(p["at_s"], nodes_of(p)) for p in jobs["p2"]["placements"]] == [
        (0.0, ["n1"]),
        (920.0, ["n2"]),
    ]
    assert [(p["at_s"], nodes_of(p)) for p in jobs["wide"]["placements"]] == [(920.0, ["n1"])]
    (placed,) = logged(sim, ev.GangPlaced, job_id="p2", allocation_id="p2#2")
    assert placed.resume_step == 900
    # and the blocked job said why it waited
    reasons = [e.reason for e in logged(sim, ev.PendingReasonChanged, job_id="wide")]
    assert reasons == ["TopologyUnsatisfiable", "WaitingForConsolidation"]
    (waiting,) = logged(sim, ev.PendingReasonChanged, reason="WaitingForConsolidation")
    assert waiting.message.startswith("waiting for a consolidation: p2 migrating off n1 to n2")
    assert metrics["preemptions_by_reason"] == {"Consolidate": 1} and metrics["lost_gpu_hours"] == 0
    assert all(j["state"] == "completed" for j in jobs.values())


def test_consolidation_off_by_default_the_fragmented_job_waits_for_jobs_to_end():
    sim, jobs, metrics = run("consolidation.yaml", consolidation=False)
    assert logged(sim, ev.ConsolidationPlanned) == [] and metrics["preemptions"] == 0
    assert jobs["wide"]["placements"][0]["at_s"] == 10800.0
    (declined,) = logged(sim, ev.PreemptionDeclined, job_id="wide")
    assert declined.reason == "NoVictims" and "consolidation" not in declined.details


def test_consolidation_respects_the_minimum_runtime_of_the_movers():
    # given every small job started less than min_runtime_s ago, nothing may be moved yet
    sim, jobs, _ = run("consolidation.yaml", min_runtime_s=3600)
    (declined,) = logged(sim, ev.PreemptionDeclined, job_id="wide")
    assert declined.reason == "NoVictims"
    assert "no set of at most 2 movable allocations" in declined.details["consolidation"]
    # then the move happens when the protection lapses (3600 s), not before
    (planned,) = logged(sim, ev.ConsolidationPlanned)
    assert planned.occurred_at_ms == 3_600_000
    assert jobs["wide"]["placements"][0]["at_s"] == 3620.0


def test_consolidation_respects_the_lost_work_bound():
    # given the movers checkpoint every 30 min, 900 s into their run 15 min x 2 GPUs are at risk
    sim, jobs, _ = run("consolidation.yaml", max_lost_gpu_hours=0.1)
    assert logged(sim, ev.ConsolidationPlanned) == []
    (declined,) = logged(sim, ev.PreemptionDeclined, job_id="wide")
    assert "bound is 0.1" in declined.details["consolidation"]


def test_consolidation_never_moves_work_that_cannot_checkpoint_in_its_grace():
    doc = yaml.safe_load((EXAMPLES / "consolidation.yaml").read_text())
    for item in doc["timeline"]:
        if item["submit"]["id"].startswith("p"):
            item["submit"]["checkpoint"]["save"] = "2m"  # longer than the 30 s default grace
    sim = simulate(from_document(doc))
    assert logged(sim, ev.ConsolidationPlanned) == []
    assert logged(sim, ev.PreemptionRequested) == []


def test_consolidation_bad_config_is_one_line_with_a_suggestion():
    doc = yaml.safe_load((EXAMPLES / "consolidation.yaml").read_text())
    doc["policy"] = {"consolidation": True, "consolidation_max_move": 3}
    with pytest.raises(ConfigFileError) as info:
        from_document(doc)
    assert str(info.value).splitlines() == [
        "policy.consolidation_max_move: unknown key (did you mean 'consolidation_max_moves'?)"
    ]
    doc["policy"] = {"consolidation_max_moves": 0}
    with pytest.raises(ConfigFileError) as info:
        from_document(doc)
    assert "consolidation_max_moves: must be >= 1" in str(info.value)


# ---------------------------------------------------------------- MIG re-geometry


def test_mig_regeometry_repartitions_an_idle_gpu_and_the_job_places():
    sim, jobs, _ = run("mig-regeometry.yaml", check=True)
    req_a, req_b = logged(sim, ev.MigReconfigurationRequested)
    # big-a at 60 s: GPU 1 is idle, GPU 0 holds the three 1g replicas
    assert (req_a.job_id, req_a.node, req_a.gpu_index, req_a.occurred_at_ms) == (
        "big-a",
        "m1",
        1,
        60_000,
    )
    assert req_a.previous_layout == tuple(f"1g.10gb@{i}" for i in range(7))
    assert req_a.layout == ("1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "3g.40gb@4")
    done_a, done_b = logged(sim, ev.MigReconfigured)
    assert (done_a.node, done_a.gpu_index, done_a.layout, done_a.causation_id) == (
        "m1",
        1,
        req_a.layout,
        req_a.event_id,
    )
    placed = jobs["big-a"]["placements"][0]
    assert placed["at_s"] == 60.0
    assert [(m["node"], m["gpus"], m["mig_profile"]) for m in placed["members"]] == [
        ("m1", [1], "3g.40gb")
    ]
    # big-b: GPU 1's only 3g slot is taken, GPU 0 busy until 3600 s, and the node's one
    # re-geometry per hour was spent at 60 s: GPU 0 is re-partitioned at 3660 s
    assert (req_b.job_id, req_b.gpu_index, req_b.occurred_at_ms) == ("big-b", 0, 3_660_000)
    assert req_b.details["node_regeometries_in_window"] == 1
    assert jobs["big-b"]["placements"][0]["at_s"] == 3660.0
    assert sim.ledger.nodes["m1"].info.gpus[0].mig_layout == req_b.layout
    limited = [
        e
        for e in logged(sim, ev.PendingReasonChanged, job_id="big-b")
        if "regeometry_rate_limited" in e.details
    ]
    assert [(e.occurred_at_ms, e.details["regeometry_rate_limited"]) for e in limited] == [
        (3_600_000, ["m1"])
    ]
    assert limited[0].message.endswith(
        "an idle GPU on m1 could be re-partitioned, but the node's re-geometries are limited to "
        "1 per 3600s: next at t+1h1m"
    )
    first = logged(sim, ev.PendingReasonChanged, job_id="big-a")[0]
    assert first.reason == "MIGPlacementUnavailable" and "could be re-partitioned" in first.message


def test_mig_regeometry_rate_limit_is_per_node_and_window():
    sim, jobs, _ = run("mig-regeometry.yaml", mig_regeometry_window_s=7200)
    # a 2 h window: no second change before 7260 s, when big-a's 3g slot frees anyway
    (only,) = logged(sim, ev.MigReconfigurationRequested)
    assert only.job_id == "big-a"
    placed = jobs["big-b"]["placements"][0]
    assert (placed["at_s"], placed["members"][0]["gpus"]) == (7260.0, [1])
    sim, jobs, _ = run("mig-regeometry.yaml", mig_regeometry_per_window=2)
    _, req_b = logged(sim, ev.MigReconfigurationRequested)
    assert req_b.occurred_at_ms == 3_600_000  # as soon as GPU 0 is idle


def test_mig_regeometry_off_the_job_never_fits_a_fixed_layout():
    sim, jobs, _ = run("mig-regeometry.yaml", mig_regeometry=False)
    assert logged(sim, ev.MigReconfigurationRequested) == []
    assert jobs["big-a"]["state"] == "pending" and jobs["big-a"]["reason"] == "Unschedulable"


def test_a_bad_mig_layout_is_one_line():
    doc = yaml.safe_load((EXAMPLES / "mig-regeometry.yaml").read_text())
    doc["cluster"]["nodes"][0]["mig_layout"] = ["4g.40gb", "4g.40gb"]
    with pytest.raises(ConfigFileError) as info:
        from_document(doc)
    assert str(info.value).splitlines() == [
        "cluster.nodes[0].mig_layout: '4g.40gb': no room left on the GPU for it"
    ]


def test_existing_scenarios_replay_unchanged_with_the_feature_off():
    # the defrag keys are unset by default: the digest, and so every decision, is the same
    base = simulate(load(EXAMPLES / "inference-burst.yaml"))
    doc = yaml.safe_load((EXAMPLES / "inference-burst.yaml").read_text())
    doc["policy"] = {**(doc.get("policy") or {}), "consolidation": False, "mig_regeometry": False}
    off = simulate(from_document(doc))

    def strip(log):
        return [
            (type(e).__name__, e.event_id, getattr(e, "job_id", None))
            for _, _, e in log
            if not isinstance(e, ev.PolicyConfigured)
        ]

    assert strip(base.log) == strip(off.log)


@pytest.mark.parametrize("name", ["consolidation.yaml", "mig-regeometry.yaml"])
def test_the_recorded_decisions_verify(name):
    from gpuledger.replay.verify import verify

    sim = simulate(load(EXAMPLES / name))
    rep = verify(sim.log)
    assert rep.mismatches == [] and rep.checked > 10
    kinds = {type(e).__name__ for _, _, e in sim.log}
    assert kinds & {"ConsolidationPlanned", "MigReconfigurationRequested"}


def test_what_if_a_log_recorded_without_consolidation_replays_with_it():
    from gpuledger.replay.verify import verify
    from gpuledger.replay.whatif import external_inputs, replay, with_config

    off, _, _ = run("consolidation.yaml", consolidation=False)
    assert logged(off, ev.ConsolidationPlanned) == []
    doc = {
        "tenants": [{"name": "research", "guaranteed": 16}],
        "policy": {"consolidation": True, "consolidation_max_moves": 2},
    }
    sim = replay(with_config(external_inputs(off.log), doc))
    (planned,) = logged(sim, ev.ConsolidationPlanned)
    assert planned.job_id == "wide" and [m.job_id for m in planned.moves] == ["p2"]
    assert sim.ledger.jobs["wide"].placements[0][0] == 920_000  # instead of 10800 s
    assert verify(sim.log).ok


def test_what_if_mig_regeometry_replays_a_log_recorded_without_it():
    from gpuledger.replay.whatif import external_inputs, replay, with_config

    off, _, _ = run("mig-regeometry.yaml", mig_regeometry=False)
    doc = {"tenants": [{"name": "serving", "guaranteed": 2}], "policy": {"mig_regeometry": True}}
    sim = replay(with_config(external_inputs(off.log), doc))
    assert [e.job_id for e in logged(sim, ev.MigReconfigurationRequested)] == ["big-a", "big-b"]
    assert sim.ledger.jobs["big-a"].placements[0][0] == 60_000


def test_the_defrag_keys_at_their_defaults_leave_the_config_digest_alone():
    from msgspec.structs import replace

    from gpuledger.services.domain.fold.config import DIGEST_OPTIONAL, ConfigState

    def digest(**fields) -> str:
        state = ConfigState()
        state.apply(ev.PolicyConfigured(policy=ev.Policy(**fields)))
        return state.digest

    base = digest()
    assert digest(**DIGEST_OPTIONAL) == base == ConfigState().digest
    for name, default in DIGEST_OPTIONAL.items():
        other = (not default) if isinstance(default, bool) else default + 1
        assert digest(**{name: other}) != base, name
    assert replace(ev.Policy(), consolidation=True).consolidation is True
