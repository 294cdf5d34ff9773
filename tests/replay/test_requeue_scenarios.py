"""Requeue through the simulator: given a running job with periodic checkpoints, when its
tenant or the operator requeues it, then it checkpoints, is evicted with reason `Requeue`
(nobody's beneficiary), waits in the queue again and resumes from its checkpoint; the
requeue counts as one, not against the eviction budget or aging."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.preemption.rules import evictions_last_hour

DOC = {
    "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 8}],
    "policy": {"eviction_budget_per_hour": 1},
    "timeline": [
        {
            "at": 0,
            "submit": {
                "id": "train",
                "tenant": "ml",
                "gpus": 8,
                "duration": "10m",
                "checkpoint": {"save": 5},
            },
        },
        {"at": "2m", "requeue": "train", "by": "operator", "reason": "bad node"},
    ],
}


def events_of(sim, cls, job="train"):
    return [e for _, _, e in sim.log if isinstance(e, cls) and e.job_id == job]


def test_a_requeued_job_checkpoints_leaves_and_runs_again_from_its_checkpoint():
    sim = simulate(from_document(DOC))
    (evicted,) = events_of(sim, ev.GangEvicted)
    assert (evicted.reason, evicted.checkpointed, evicted.lost_gpu_ms) == ("Requeue", True, 0)
    assert evicted.occurred_at_ms == 125_000  # asked at 2 m, saved in 5 s
    assert len(events_of(sim, ev.GangRequeued)) == 1
    placed = [e.occurred_at_ms for e in events_of(sim, ev.GangPlaced)]
    assert placed == [0, 125_000]
    job = sim.ledger.jobs["train"]
    assert job.state == "completed"
    # 2 m of work were saved: 8 m more after the second placement
    assert job.finished_ms == 125_000 + 480_000
    # counted as a requeue, not against the eviction budget
    assert [p.reason for p in job.preemptions] == ["Requeue"]
    assert evictions_last_hour(job, 130_000) == []


def test_a_requeue_of_a_job_that_is_not_running_is_refused_and_changes_nothing():
    doc = {
        **DOC,
        "timeline": [
            {"at": 0, "submit": {"id": "big", "tenant": "ml", "gpus": 8, "duration": "5m"}},
            {"at": 0, "submit": {"id": "train", "tenant": "ml", "gpus": 8, "duration": "1m"}},
            {"at": "1m", "requeue": "train"},
        ],
    }
    sim = simulate(from_document(doc))
    (refused,) = [e for _, _, e in sim.log if isinstance(e, ev.RequestRefused)]
    assert (refused.request, refused.reason) == ("JobRequeued", "InvalidSpec")
    assert "only a running job can be requeued" in refused.message
    assert not events_of(sim, ev.GangEvicted) and sim.ledger.jobs["train"].state == "completed"
