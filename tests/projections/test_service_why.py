"""`gpuledger why SERVICE`: replicas running/pending and the disruption budget, from the
projection of a simulated service scenario (examples/service-budget.yaml)."""

from __future__ import annotations

import json

from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from tests.projections.audit_cli import EXAMPLES, projected_log


def projected(tmp_path, until_ms):
    return projected_log(
        tmp_path, simulate(load(EXAMPLES / "service-budget.yaml"), until_ms=until_ms).log
    )


def test_why_a_service_shows_its_replicas_and_budget(tmp_path):
    run = projected(tmp_path, until_ms=40 * 60_000)  # urgent-1 runs on svc~0's GPUs
    r = run("why", "svc")
    assert r.exit_code == 0, r.output
    assert "Replicas:  3 running, 0 being preempted, 1 pending of 4 wanted" in r.output
    assert (
        "Budget:    min_available 3: at most 0 down at once by preemption; 0 more may be evicted now"
        in r.output
    )
    assert "svc~0: pending" in r.output
    doc = json.loads(run("why", "svc", "-o", "json").output)["service"]
    assert (doc["running"], doc["pending"], doc["min_available"]) == (3, 1, 3)
    r = run("why", "urgent-2")  # its preemption was declined by the budget
    assert "DisruptionBudget" in r.output
    r = run("jobs", "--no-headers")
    states = {line.split()[0]: line.split()[3] for line in r.output.splitlines()}
    assert (
        states["svc"] == "running" and states["svc~0"] == "pending" and states["svc~3"] == "running"
    )
