"""Priority changes through the simulator: given jobs of one class, when the operator raises
one above the class, then preemption re-evaluates at once and evicts a lower one for it; when
a tenant nices one of its own pending jobs, then its other job runs first; a tenant raising
above its class is refused and nothing changes."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate

NODE = {
    "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 8}],
}


def job(at, name, minutes=10):
    return {"at": at, "submit": {"id": name, "tenant": "ml", "gpus": 8, "duration": f"{minutes}m"}}


def placed_at_s(sim):
    return {
        e.job_id: e.occurred_at_ms // 1000 for _, _, e in sim.log if isinstance(e, ev.GangPlaced)
    }


def test_the_operator_raising_a_pending_job_preempts_a_lower_one_at_once():
    doc = {
        **NODE,
        "timeline": [
            job(0, "low", 60),
            job(60, "urgent"),
            {"at": 420, "update": "urgent", "priority": 60, "by": "operator"},
        ],
    }
    sim = simulate(from_document(doc))
    (asked,) = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert (asked.job_id, asked.beneficiary, asked.reason) == ("low", "urgent", "Priority")
    assert asked.occurred_at_ms == 420_000  # at the change (past low's minimum runtime)
    assert placed_at_s(sim)["urgent"] > 420
    assert sim.ledger.jobs["urgent"].priority == 60
    assert sim.ledger.jobs["urgent"].class_priority == 50


def test_a_tenant_nicing_its_own_pending_job_lets_its_other_job_run_first():
    doc = {
        **NODE,
        "timeline": [
            job(0, "big"),
            job(10, "first"),
            job(20, "second"),
            {"at": 30, "update": "first", "nice": 10, "reason": "second is more urgent"},
        ],
    }
    sim = simulate(from_document(doc))
    at = placed_at_s(sim)
    assert at["second"] == 600 and at["first"] == 1200
    assert sim.ledger.jobs["first"].priority == 40


def test_a_tenant_raising_above_its_class_is_refused_and_nothing_changes():
    doc = {
        **NODE,
        "timeline": [job(0, "big"), job(10, "mine"), {"at": 30, "update": "mine", "priority": 90}],
    }
    sim = simulate(from_document(doc))
    (refused,) = [e for _, _, e in sim.log if isinstance(e, ev.RequestRefused)]
    assert (refused.request, refused.reason) == ("JobPriorityChanged", "InvalidSpec")
    assert refused.message == "raising 'mine' above its class's 50 needs the operator"
    assert sim.ledger.jobs["mine"].priority == 50 and not any(
        isinstance(e, ev.PreemptionRequested) for _, _, e in sim.log
    )


def test_top_runs_a_tenants_later_job_before_its_earlier_ones():
    doc = {
        **NODE,
        "timeline": [
            job(0, "big"),
            job(10, "first"),
            job(20, "second"),
            job(30, "urgent"),
            {"at": 40, "top": "urgent", "reason": "demo"},
            {"at": 50, "top": "big"},
        ],
    }
    sim = simulate(from_document(doc))
    at = placed_at_s(sim)
    assert (at["urgent"], at["first"], at["second"]) == (600, 1200, 1800)
    (refused,) = [e for _, _, e in sim.log if isinstance(e, ev.RequestRefused)]
    assert (refused.request, refused.job_id, refused.reason) == (
        "JobMovedToTop",
        "big",
        "InvalidSpec",
    )
    assert sim.ledger.jobs["urgent"].priority == 50  # its priority is unchanged
