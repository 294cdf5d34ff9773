"""Regression scenarios for preemption loops found by the random-workload property
(tests/properties/test_preemption_properties.py), minimised by hand into given/when/then
runs through the simulator."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate

NO_PROTECTION = {
    "preemption_scope": "cluster",
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
    "default_grace_s": 30,
}


def submit(at_s, job_id, tenant, cls, gpus, duration):
    return {
        "at": at_s,
        "submit": {
            "id": job_id,
            "tenant": tenant,
            "class": cls,
            "gpus": gpus,
            "duration": duration,
            "checkpoint": {"save": "5s"},
        },
    }


def test_priority_never_takes_a_borrowing_tenant_below_its_guarantee_so_it_cannot_reclaim_back():
    """Given two 4-GPU nodes, tenant a (guaranteed 4) running seven 1-GPU best-effort jobs
    (borrowing 3; one node holds four of them, the other three and c's job) and one more
    queued, when b's 4-GPU `train` job (priority 50 > 10, scope cluster) arrives, then it
    evicts nobody and waits: one node's worth of a's jobs is 4 GPUs, one more than a borrows.

    Before the fix it evicted four of a's jobs (a down to 3 of its 4 guaranteed), and in the
    same instant a's queued job, now within a's guarantee, reclaimed b's job: five evictions,
    b's job placed and evicted at once, and it finished later than by waiting."""
    timeline = [submit(0, "c-1", "c", "best-effort", 1, "2h")]
    timeline += [submit(0, f"a-{i}", "a", "best-effort", 1, "30m") for i in range(7)]
    timeline += [
        submit(30, "a-late", "a", "best-effort", 1, "30m"),
        submit(60, "b-train", "b", "train", 4, "10m"),
    ]
    sim = simulate(
        from_document(
            {
                "cluster": {"nodes": [{"name_prefix": "n", "count": 2, "gpus": 4}]},
                "tenants": [
                    {"name": "a", "guaranteed": 4},
                    {"name": "b", "guaranteed": 2},
                    {"name": "c", "guaranteed": 2},
                ],
                "priority_classes": [{"name": "best-effort", "value": 10, "preemptible": True}],
                "policy": NO_PROTECTION,
                "timeline": timeline,
            }
        )
    )
    log = [e for _, _, e in sim.log]
    assert [e for e in log if isinstance(e, (ev.PreemptionRequested, ev.GangEvicted))] == []
    (declined,) = [e for e in log if isinstance(e, ev.PreemptionDeclined) and e.job_id == "b-train"]
    assert declined.reason == "NoVictims" and "WithinGuarantee" in declined.message
    b_train = sim.ledger.jobs["b-train"]
    assert b_train.state == "completed" and b_train.placements[0][0] == 1_800_000  # a's jobs end
    assert all(j.state == "completed" for j in sim.ledger.jobs.values())
