"""Hold and release through the simulator: given a scenario with `hold` / `release` timeline
entries, when it runs on the virtual clock, then a held job waits with `Held` while later
work runs, is no demand for fair share, and runs once released."""

import pytest

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.inputs.schema import InputError

DOC = {
    "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 8}, {"name": "web", "guaranteed": 0}],
    "timeline": [
        {"at": 0, "submit": {"id": "prep", "tenant": "ml", "gpus": 8, "duration": "10m"}},
        {"at": 0, "submit": {"id": "train", "tenant": "ml", "gpus": 8, "duration": "10m"}},
        {"at": "1m", "hold": "train", "reason": "dataset not landed"},
        {"at": "2m", "submit": {"id": "eval", "tenant": "ml", "gpus": 8, "duration": "5m"}},
        {"at": "12m", "release": "train", "by": "operator", "reason": "dataset landed"},
    ],
}


def placed_at_s(sim, job):
    return [
        e.occurred_at_ms // 1000
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced) and e.job_id == job
    ]


def test_a_held_job_waits_with_held_while_later_work_runs_and_runs_once_released():
    sim = simulate(from_document(DOC))
    # then eval, submitted after train, takes the node when prep ends at 10 m
    assert placed_at_s(sim, "eval") == [600]
    # and train, released at 12 m, runs when eval ends at 15 m
    assert placed_at_s(sim, "train") == [900]
    reasons = [
        (e.occurred_at_ms // 1000, e.reason, e.message)
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == "train"
    ]
    assert (60, "Held", "held by tenant: dataset not landed") in reasons
    assert reasons[-1][1] != "Held" and reasons[-1][0] == 720  # re-evaluated at the release
    assert sim.ledger.jobs["train"].state == "completed"


def test_a_held_job_is_no_demand_for_fair_share():
    sim = simulate(from_document(DOC), until_ms=90_000)
    assert sim.ledger.jobs["train"].hold is not None
    assert sim.ledger.quota.pending_gpu_milli.get("ml", 0) == 0


def test_a_hold_of_a_running_job_is_refused_and_it_keeps_running():
    doc = {**DOC, "timeline": [*DOC["timeline"][:2], {"at": "1m", "hold": "prep"}]}
    sim = simulate(from_document(doc))
    (refused,) = [e for _, _, e in sim.log if isinstance(e, ev.RequestRefused)]
    assert (refused.request, refused.job_id, refused.reason) == ("JobHeld", "prep", "InvalidSpec")
    assert "only a job not yet placed can be held" in refused.message
    assert placed_at_s(sim, "prep") == [0] and sim.ledger.jobs["prep"].state == "completed"


def test_a_timeline_entry_naming_no_submitted_job_is_a_one_line_problem():
    doc = {**DOC, "timeline": [{"at": 0, "hold": "trian"}]}
    with pytest.raises(InputError) as info:
        from_document(doc)
    assert any("timeline[0].hold: job 'trian' is not submitted" in p for p in info.value.problems)
