"""`gpuledger why` for issue 29's `WouldCycle`: a job whose only victims would not raise the
standing says preemption was declined, why, and by how much (from the projection of a
simulated scenario)."""

from __future__ import annotations

from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from tests.projections.audit_cli import projected_log

QUIET = {
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
}


def submit(at, job_id, tenant, gpus):
    return {
        "at": at,
        "submit": {
            "id": job_id,
            "tenant": tenant,
            "class": "train",
            "gpus": gpus,
            "duration": 3600,
        },
    }


def test_why_a_reclaim_that_would_cost_the_borrower_what_it_gives_is_declined(tmp_path):
    """Given b (guaranteed 6) running two 4-GPU train jobs on the only 8-GPU node, when a
    (guaranteed 2) submits a 2-GPU train job, then `why` says preemption was declined
    `WouldCycle` with the standing before and after."""
    doc = {
        "cluster": {"nodes": [{"name_prefix": "n", "count": 1, "gpus": 8}]},
        "tenants": [{"name": "a", "guaranteed": 2}, {"name": "b", "guaranteed": 6}],
        "policy": QUIET,
        "timeline": [submit(0, "b1", "b", 4), submit(0, "b2", "b", 4), submit(60, "a1", "a", 2)],
    }
    run = projected_log(tmp_path, simulate(from_document(doc), until_ms=120_000).log)
    r = run("why", "a1")
    assert r.exit_code == 0, r.output
    assert "Preemption declined: WouldCycle: evicting b1 for a1 would not strictly raise" in (
        r.output
    )
    assert "guaranteed GPUs in use 6 -> 6 (tenant b 6 -> 4)" in r.output
