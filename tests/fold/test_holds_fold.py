"""Holds in the jobs fold (services/domain/fold/holds.py): given a queued job, when its tenant
or the operator holds and releases it, then it stays queued, its demand leaves and comes back,
and requests that cannot apply are refused with the answer admission gives."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.services.domain.fold import jobs
from tests.fold.story import admitted, given, node, placed, submitted, when


def held(job="a", tenant="org/a", actor="tenant", reason="waiting for data"):
    return ev.JobHeld(job_id=job, tenant=tenant, actor=actor, reason=reason)


def released(job="a", tenant="org/a", actor="tenant"):
    return ev.JobReleased(job_id=job, tenant=tenant, actor=actor)


def answers(ledger):
    return [(r.request, r.job_id, r.reason) for r in ledger.intake.refusals.values()]


def test_the_jobs_fold_owns_hold_and_release():
    assert {ev.JobHeld, ev.JobReleased} <= set(jobs.FOLD.handlers)


def test_a_held_job_stays_queued_but_is_no_demand_until_released():
    # given a pending 8-GPU job of org/a
    ledger = given(node(), submitted("a"), admitted("a"))
    assert ledger.quota.pending_gpu_milli == {"org/a": 8000}
    # when its tenant holds it
    assert when(ledger, held()) is None
    # then it is still pending and queued, held by its tenant, and no demand
    job = ledger.jobs["a"]
    assert (job.state, job.hold.actor, job.hold.reason) == ("pending", "tenant", "waiting for data")
    assert ledger.pending == {"a"} and ledger.quota.pending_gpu_milli == {"org/a": 0}
    # when it is released, its demand is back and the hold is gone
    assert when(ledger, released()) is None
    assert job.hold is None and ledger.quota.pending_gpu_milli == {"org/a": 8000}


def test_a_job_held_before_admission_enters_the_queue_without_demand_and_a_cancel_keeps_it_zero():
    ledger = given(node(), submitted("a"), held())
    when(ledger, admitted("a"))
    assert ledger.pending == {"a"} and ledger.quota.pending_gpu_milli == {"org/a": 0}
    when(ledger, ev.JobCancelled(job_id="a", tenant="org/a"))
    assert ledger.jobs["a"].state == "cancelled" and ledger.quota.pending_gpu_milli == {"org/a": 0}


def test_another_tenants_job_gets_the_same_answer_as_an_id_nobody_has():
    ledger = given(node(), submitted("a"), admitted("a"))
    other = when(ledger, held(tenant="org/b"))
    nobody = when(ledger, held(job="ghost"))
    assert other.code == nobody.code == "UnknownJob"
    assert answers(ledger) == [
        ("JobHeld", "a", "UnknownJob"),
        ("JobHeld", "ghost", "UnknownJob"),
    ]
    assert ledger.jobs["a"].hold is None


@pytest.mark.parametrize(
    "story, request_, why",
    [
        ((placed("a"),), held(), "is running"),
        ((held(),), held(), "already held"),
        ((), released(), "is not held"),
        ((held(actor="operator"),), released(), "held by the operator"),
    ],
    ids=["running", "twice", "not-held", "operators-hold"],
)
def test_a_request_that_cannot_apply_is_refused_and_changes_nothing(story, request_, why):
    ledger = given(node(), submitted("a"), admitted("a"), *story)
    before = (ledger.jobs["a"].hold, dict(ledger.quota.pending_gpu_milli))
    refusal = when(ledger, request_)
    assert refusal is not None and refusal.code == "InvalidSpec" and why in refusal.message
    assert (ledger.jobs["a"].hold, dict(ledger.quota.pending_gpu_milli)) == before
    (answer,) = [a for a in ledger.intake.refusals.values()]
    assert answer.reason == "InvalidSpec"


def test_the_operator_releases_a_tenants_hold():
    ledger = given(node(), submitted("a"), admitted("a"), held())
    assert when(ledger, released(actor="operator")) is None
    assert ledger.jobs["a"].hold is None


def test_a_control_event_whose_actor_or_tenant_is_not_its_subjects_is_refused():
    from gpuledger.services.domain.fold.acceptance import subject_refusal

    as_operator = held(actor="operator")
    assert ev.subject_for(as_operator) == "gl.admin.ctl.org/a.a.JobHeld"
    assert subject_refusal("gl.admin.ctl.org/a.a.JobHeld", as_operator) is None
    # a tenant's credential may publish only on gl.ctl.<tenant>.>: claiming the operator there
    assert subject_refusal("gl.ctl.org/a.a.JobHeld", as_operator).code == "WrongSubject"
    assert subject_refusal("gl.ctl.org/b.a.JobHeld", held()).code == "WrongSubject"
