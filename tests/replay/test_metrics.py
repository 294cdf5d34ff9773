"""One place for each fact: the run metrics of a log are the same whether `simulate --json`
reports them, `compare` reads them back from the written log, or the DuckDB projection's
`run_metrics` / `wait_by_class` views compute them; and the job lifecycle the projector's
mappers derive is the one the ledger folds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger import events as ev
from gpuledger.projections.store import Projector
from gpuledger.replay.compare import load as compare_load
from gpuledger.replay.logio import write_log
from gpuledger.replay.metrics import measure
from gpuledger.replay.report import report
from gpuledger.replay.scenario import from_document
from gpuledger.replay.scenario import load as load_scenario
from gpuledger.replay.simulator import simulate
from tests.fold.story import admission
from tests.services.given import produced

ROOT = Path(__file__).resolve().parents[2]

NODE_LOSS = {
    "name": "node-loss",
    "cluster": {
        "nodes": [
            {
                "name_prefix": "n",
                "count": 2,
                "gpus": 4,
                "model": "A100-80GB",
                "cpu": 64,
                "memory": "512Gi",
            }
        ]
    },
    "tenants": [{"name": "team-a", "guaranteed": 8}],
    "timeline": [
        {"at": 0, "submit": {"id": "job-1", "tenant": "team-a", "gpus": 4, "duration": "10s"}},
        {"at": 1, "node_down": "n2"},
        {"at": 2, "submit": {"id": "job-2", "tenant": "team-a", "gpus": 4, "duration": "10s"}},
    ],
}

SCENARIOS = {  # name: (scenario, stop at ms or None)
    "demo": (lambda: load_scenario(ROOT / "examples/demo.yaml"), None),
    "demo stopped while serve waits": (lambda: load_scenario(ROOT / "examples/demo.yaml"), 4_500),
    "backfill": (lambda: load_scenario(ROOT / "examples/backfill.yaml"), None),
    "inference-burst (MIG, shares)": (
        lambda: load_scenario(ROOT / "examples/inference-burst.yaml"),
        None,
    ),
    "thrashing-mixed": (
        lambda: load_scenario(ROOT / "replay/scenarios/thrashing-mixed.yaml"),
        None,
    ),
    "node loss": (lambda: from_document(NODE_LOSS), None),
}


def _run(name: str):
    scenario, until_ms = SCENARIOS[name]
    return simulate(scenario(), until_ms=until_ms)


def _three_ways(sim, tmp_path: Path):
    reported = report(sim.ledger, sim.log, sim.now_ms)["metrics"]
    log = tmp_path / "run.jsonl"
    write_log(log, sim.log)
    compared = compare_load(log).metrics
    with Projector(tmp_path / "p.duckdb") as pj:
        pj.run(sim.log)
        con = pj.store.con
        cols = [d[0] for d in con.execute("SELECT * FROM run_metrics").description]
        projected = dict(
            zip(cols, con.execute("SELECT * FROM run_metrics").fetchone(), strict=True)
        )
        waits = con.execute(
            "SELECT slo_class, never_placed, wait_s_p50, wait_s_p99 FROM wait_by_class ORDER BY 1"
        ).fetchall()
        slo = con.execute(
            "SELECT slo_class, time_to_place_p50_s, time_to_place_p99_s FROM slo WHERE placed > 0 "
            "ORDER BY 1"
        ).fetchall()
    return sim, reported, compared, projected, (waits, slo)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_simulate_report_compare_and_projection_agree(name, tmp_path):
    # given a scenario run; when its metrics are computed three ways
    sim, reported, compared, projected, (waits, slo) = _three_ways(_run(name), tmp_path)
    # then simulate's report and compare agree on every metric
    assert reported == compared
    m = reported
    # and the projection's views give the same numbers
    assert projected["events"] == m["events"] == len(sim.log)
    assert projected["gpu_allocation_pct"] == pytest.approx(m["gpu_allocation_pct"], rel=1e-12)
    assert projected["preemptions"] == m["preemptions"]
    assert projected["lost_gpu_hours"] == pytest.approx(m["lost_gpu_hours"], abs=1e-12)
    assert projected["gpu_hours"] == pytest.approx(m["gpu_hours"], rel=1e-12)
    for k in ("submitted", "completed", "failed", "rejected", "cancelled", "unfinished"):
        assert projected[k] == m["jobs"][k], k
    assert projected["jct_s_mean"] == pytest.approx(m["jct_s_mean"])
    if "stopped" in name:  # a class whose only job was never placed has no wait percentiles
        assert m["never_placed_by_class"]["latency-critical"] == 1
        assert m["wait_s_p50_by_class"]["latency-critical"] is None
    assert waits == [
        (c, m["never_placed_by_class"][c], m["wait_s_p50_by_class"][c], m["wait_s_p99_by_class"][c])
        for c in sorted(m["never_placed_by_class"])
    ]
    # and the audit `slo` view's time to place is the same wait
    assert slo == [
        (c, m["wait_s_p50_by_class"][c], m["wait_s_p99_by_class"][c])
        for c in sorted(m["wait_s_p50_by_class"])
        if m["wait_s_p50_by_class"][c] is not None
    ]


def test_allocation_counts_only_capacity_that_is_there(tmp_path):
    # given two 4-GPU nodes, one lost at 1s, and one 4-GPU job running at all times to 20s
    sim, reported, compared, projected, _ = _three_ways(_run("node loss"), tmp_path)
    # then allocation = 4000 x 20s / (8000 x 1s + 4000 x 19s), whichever way it is computed
    expected = 100 * (4000 * 20) / (8000 * 1 + 4000 * 19)
    assert reported["end_s"] == 20.0
    assert reported["gpu_allocation_pct"] == pytest.approx(expected)
    assert compared["gpu_allocation_pct"] == pytest.approx(expected)
    assert projected["gpu_allocation_pct"] == pytest.approx(expected)


def test_report_metrics_are_a_function_of_the_log_not_of_the_clock(tmp_path):
    # given the demo stopped by --until long after its last event
    sc = load_scenario(ROOT / "examples/demo.yaml")
    sim = simulate(sc, until_ms=600_000)
    # then the report's metrics are those of the log (the window ends at its last event)
    log = tmp_path / "run.jsonl"
    write_log(log, sim.log)
    assert report(sim.ledger, sim.log, sim.now_ms)["metrics"] == compare_load(log).metrics


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_projector_mappers_derive_the_ledgers_job_lifecycle(name, tmp_path):
    # given a scenario log folded by the ledger and projected by the mappers
    sim = _run(name)
    with Projector(tmp_path / "p.duckdb") as pj:
        pj.run(sim.log)
        con = pj.store.con
        rows = con.execute(
            "SELECT job_id, state, admitted_at_ms, first_placed_at_ms, finished_at_ms, attempts "
            "FROM jobs ORDER BY job_id"
        ).fetchall()
    # then every job has the same state, admission, first placement, end and attempts
    ledger = sim.ledger
    expected = []
    for job_id in sorted(ledger.jobs):
        j = ledger.jobs[job_id]
        expected.append(
            (
                job_id,
                j.state,
                j.admitted_ms,
                j.placements[0][0] if j.placements else None,
                j.finished_ms,
                len(j.placements),
            )
        )
    assert rows == expected


def test_capacity_follows_registration_loss_and_revival(tmp_path):
    # given a 4-GPU node registered at 0, registered again at 10 s, lost at 20 s and heard
    # from again at 30 s; a 2-GPU job runs from 0 to 15 s; the log ends at 40 s
    node = ev.NodeInfo(
        name="n1",
        cpu_milli=64000,
        memory_mib=65536,
        gpus=tuple(
            ev.GpuInfo(index=i, uuid=f"GPU-n1-{i}", model="H100-80GB", memory_mib=81920, clique="c")
            for i in range(4)
        ),
    )
    spec = ev.JobSpec(
        job_id="j1", tenant="t", priority_class="train", resources=ev.Resources(gpus=2)
    )
    log = [
        ev.NodeRegistered(event_id="r1", node=node, simulated=True),
        ev.JobSubmitted(event_id="s1", job=spec),
        admission("j1", "t", event_id="a1"),
        ev.GangPlaced(
            event_id="p1",
            job_id="j1",
            allocation_id="j1#1",
            tenant="t",
            members=(ev.MemberPlacement(rank=0, node="n1", gpus=(0, 1)),),
        ),
        ev.NodeRegistered(event_id="r2", occurred_at_ms=10_000, node=node, simulated=True),
        ev.GangCompleted(event_id="c1", occurred_at_ms=15_000, job_id="j1", allocation_id="j1#1"),
        ev.NodeLost(event_id="l1", occurred_at_ms=20_000, node="n1", message="silent"),
        ev.NodeHeartbeat(event_id="h1", occurred_at_ms=30_000, node="n1"),
        ev.NodeHeartbeat(event_id="h2", occurred_at_ms=40_000, node="n1"),
    ]
    entries = [(i, ev.subject_for(e), e) for i, e in enumerate(map(produced, log), 1)]
    # when measured and projected
    m = measure(entries).metrics
    with Projector(tmp_path / "p.duckdb") as pj:
        pj.run(entries)
        (projected,) = pj.store.con.execute("SELECT gpu_allocation_pct FROM run_metrics").fetchone()
    # then capacity counts the node once, and not while it is lost:
    # 2000 x 15 s / (4000 x (20 s + 10 s)) = 25 %
    assert m["gpu_allocation_pct"] == pytest.approx(25.0)
    assert projected == pytest.approx(25.0)
