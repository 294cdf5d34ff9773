"""A pending job's class changed (`gpuledger update --class`, `JobPriorityChanged` with
`priority_class`) through the simulator: given two pending jobs of class train behind a
running one, when the operator moves the later one to class interactive, then it runs first
with the class's value (preempting the running one at its minimum runtime) (and its class is the new one everywhere: the fold, the projection);
a placed job, an unknown class, or a tenant moving its job above its class is refused and
nothing changes; a retried submission still matches the job as submitted."""

import duckdb
import pytest

from gpuledger import events as ev
from gpuledger.projections.store import rebuild
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.priorities import problem

NODE = {
    "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 8}],
}


def job(at, name, minutes=10, klass="train"):
    return {
        "at": at,
        "submit": {
            "id": name,
            "tenant": "ml",
            "gpus": 8,
            "duration": f"{minutes}m",
            "class": klass,
        },
    }


def placed_at_s(sim):
    return {
        e.job_id: e.occurred_at_ms // 1000 for _, _, e in sim.log if isinstance(e, ev.GangPlaced)
    }


def refusals(sim):
    return {e.job_id: e.message for _, _, e in sim.log if isinstance(e, ev.RequestRefused)}


def test_a_pending_job_moved_to_a_higher_class_runs_first_with_its_value(tmp_path):
    doc = {
        **NODE,
        "timeline": [
            job(0, "big"),
            job(10, "first"),
            job(20, "second"),
            {
                "at": 30,
                "update": "second",
                "class": "interactive",
                "by": "operator",
                "reason": "demo",
            },
        ],
    }
    sim = simulate(from_document(doc))
    at = placed_at_s(sim)
    # interactive (75) outranks big (train, 50): big is preempted at its minimum runtime
    (asked,) = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert (asked.job_id, asked.beneficiary) == ("big", "second")
    assert at["second"] == 305 and at["first"] > at["second"]
    rec = sim.ledger.jobs["second"]
    assert (rec.spec.priority_class, rec.priority, rec.class_priority) == ("interactive", 75, 75)
    assert rec.client_spec.priority_class == "train"  # as submitted: a retry still matches
    db = tmp_path / "p.duckdb"
    rebuild(sim.log, db)
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute(
            "SELECT priority_class, priority FROM jobs WHERE job_id = 'second'"
        ).fetchone()
    assert row == ("interactive", 75)


@pytest.mark.parametrize(
    "update, message",
    [
        (
            {"at": 30, "update": "big", "class": "interactive", "by": "operator"},
            "'big' is running: only a pending job's class can change "
            "(a placed job keeps the class it was placed under)",
        ),
        (
            {"at": 30, "update": "first", "class": "gold", "by": "operator"},
            "priority class 'gold' is not configured (known: build, inference, interactive, train)",
        ),
        (
            {"at": 30, "update": "first", "class": "interactive"},
            "raising 'first' above its class's 50 needs the operator",
        ),
    ],
    ids=["running", "unknown-class", "tenant-raises"],
)
def test_a_class_change_that_cannot_apply_is_refused_and_changes_nothing(update, message):
    doc = {**NODE, "timeline": [job(0, "big"), job(10, "first"), update]}
    sim = simulate(from_document(doc))
    assert refusals(sim)[update["update"]] == message
    rec = sim.ledger.jobs[update["update"]]
    assert (rec.spec.priority_class, rec.priority) == ("train", 50)


def test_a_tenant_may_move_its_job_down_a_class():
    doc = {
        **NODE,
        "timeline": [
            job(0, "big"),
            job(10, "first", klass="interactive"),
            {"at": 20, "update": "first", "class": "train"},
        ],
    }
    rec = simulate(from_document(doc)).ledger.jobs["first"]
    assert (rec.spec.priority_class, rec.priority, rec.class_priority) == ("train", 50, 50)


def test_exactly_one_of_priority_nice_and_class():
    doc = {**NODE, "timeline": [job(0, "big")]}
    rec = simulate(from_document(doc)).ledger.jobs["big"]
    both = ev.JobPriorityChanged(job_id="big", tenant="ml", nice=1, priority_class="train")
    assert problem(rec, both, {})[0] == "give exactly one of priority, nice and priority_class"
