"""Job ids are per tenant: given tenant A holding job `j1`, when tenant B submits, cancels,
scales, asks about or depends on `j1`, then it gets exactly what it would get if A had no
such job, and A's job is untouched (pure: the fold and the deciders; the live checks with
each principal's credential are in tests/integration/test_insiders.py)."""

from __future__ import annotations

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.events import subject_for
from gpuledger.events.ids import job_name, tenant_job_key
from gpuledger.events.reasons import JobState
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.fold.job_status import job_status
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.tooling.stamp import stamp
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type, submitted, submitted_json

TENANTS = [{"name": "org/a", "guaranteed": 4}, {"name": "org/b", "guaranteed": 4}]
FLEET = cluster({"name": "n1", "gpus": 8, "model": "H100-80GB"}, tenants=TENANTS)
B_KEY = tenant_job_key("org/b", "j1")


def cancel(tenant: str, job: str, at: int = 50) -> ev.JobCancelled:
    return stamp(
        ev.JobCancelled,
        key=f"{tenant}:{job}",
        producer="cli",
        now_ms=at,
        correlation_id=job,
        job_id=job,
        tenant=tenant,
    )


def settle(ledger, now: int = 100):
    """Admission then the scheduler decide until nothing is left to decide."""
    for _ in range(4):
        out = Admission().decide(ledger, now) + Scheduler().decide(ledger, now)
        if not out:
            break
        fold(ledger, out)
    return ledger


def two_j1s(**b):
    return given(
        *FLEET,
        submitted(id="j1", tenant="org/a", gpus=1),
        submitted(id="j1", tenant="org/b", gpus=b.pop("gpus", 1), **b),
    )


def test_two_tenants_can_both_submit_and_run_the_same_job_id():
    ledger = settle(two_j1s(gpus=2))
    a, b = ledger.jobs["j1"], ledger.jobs[B_KEY]
    assert (a.tenant, a.state, b.tenant, b.state) == ("org/a", "running", "org/b", "running")
    assert ledger.intake.refusals == {} and ledger.job_key("org/b", "j1") == B_KEY
    assert b.client_spec.job_id == "j1" and b.client_spec.resources.gpus == 2
    assert ledger.allocations[b.allocation_id].job_id == B_KEY != a.allocation_id


def test_each_tenant_sees_its_own_job_under_the_id_it_submitted():
    ledger = settle(two_j1s(gpus=2))
    a, b = job_status(ledger, "org/a", "j1"), job_status(ledger, "org/b", "j1")
    assert (a.job_id, a.known, a.spec.resources.gpus) == ("j1", True, 1)
    assert (b.job_id, b.known, b.spec.resources.gpus) == ("j1", True, 2)
    assert B_KEY not in msgspec.json.encode(b).decode()  # the key is never shown to B
    assert not job_status(ledger, "org/b", B_KEY).known  # a key is no name
    assert not job_status(ledger, "org/c", "j1").known
    ledger.jobs[B_KEY].message = f"MIG re-geometry: {B_KEY} asks for 3g.40gb"
    assert job_status(ledger, "org/b", "j1").message == "MIG re-geometry: j1 asks for 3g.40gb"


def test_a_cancel_touches_only_the_cancelling_tenants_job():
    ledger = settle(two_j1s())
    fold(ledger, [cancel("org/b", "j1")])
    assert ledger.jobs[B_KEY].cancel_requested and B_KEY in {
        ledger.allocations[a].job_id for a in ledger.agents.cancelling
    }
    assert not ledger.jobs["j1"].cancel_requested and ledger.jobs["j1"].state == "running"


def test_a_retry_and_a_conflict_are_judged_against_the_tenants_own_job_only():
    ledger = given(
        *FLEET,
        submitted(id="j1", tenant="org/a", gpus=1),
        submitted(id="j1", tenant="org/b", gpus=2),
        submitted(at_ms=5, id="j1", tenant="org/b", gpus=2),  # B's retry
        submitted(id="j1", tenant="org/b", gpus=3),  # B's conflict, against B's own job
    )
    (refused,) = of_type(Admission().decide(ledger, 1000), ev.RequestRefused)
    assert (refused.tenant, refused.reason) == ("org/b", "JobIdConflict")
    assert "stored 2, new 3" in refused.message and "tenant" not in refused.message
    assert len(ledger.jobs) == 2


def refusal_of(ledger, request: ev.Event):
    fold(ledger, [request])
    (r,) = of_type(Admission().decide(ledger, 1000), ev.RequestRefused)
    return r.reason, r.message.replace(request.job_id, "ID")


@pytest.mark.parametrize("request_for", [cancel, lambda t, j: scale(t, j)])
def test_a_request_for_another_tenants_id_is_refused_as_for_an_id_nobody_has(request_for):
    ledger = settle(given(*FLEET, submitted(id="svc", tenant="org/a", gpus=1, kind="service")))
    other = refusal_of(ledger, request_for("org/b", "svc"))
    fold(ledger, of_type(Admission().decide(ledger, 1000), ev.RequestRefused))
    nobody = refusal_of(ledger, request_for("org/b", "nope"))
    assert other == nobody and other[0] == "UnknownJob"
    assert ledger.jobs["svc"].state == JobState.running


def scale(tenant: str, job: str) -> ev.ServiceScaled:
    return stamp(
        ev.ServiceScaled,
        key=f"{tenant}:{job}@1",
        producer="cli",
        now_ms=60,
        correlation_id=job,
        job_id=job,
        tenant=tenant,
        replicas=3,
    )


def test_depends_on_resolves_within_the_submitting_tenant():
    ledger = given(
        *FLEET,
        submitted(id="build", tenant="org/a", gpus=16),  # rejected: finished at once
        submitted(id="build", tenant="org/b", gpus=1),
        submitted_json(
            job_id="train",
            tenant="org/b",
            resources={"gpus": 1},
            depends_on=[{"job": "build", "on": "finished"}],
        ),
        submitted_json(
            job_id="lone",
            tenant="org/b",
            resources={"gpus": 1},
            depends_on=[{"job": "a-only", "on": "finished"}],
        ),
        submitted(id="a-only", tenant="org/a", gpus=1),
    )
    settle(ledger)
    assert ledger.jobs["build"].state == JobState.rejected
    assert ledger.jobs["lone"].reason == "UnknownDependency"  # A's job is no dependency of B's
    assert ledger.jobs["train"].state == JobState.pending
    (waits,) = ledger.jobs["train"].details["waiting_for"]
    assert (waits["job"], waits["state"]) == ("build", "running")  # B's own, not A's
    # while B's own `build` runs, `train` is no demand, although A's `build` has finished
    assert deps.unmet(ledger, ledger.jobs["train"].spec)
    assert deps.queued_since_ms(ledger, ledger.jobs["train"]) is None


def test_an_unreadable_submission_of_one_tenant_takes_no_id_of_another():
    dead = ev.DeadLettered(
        event_id="DeadLettered-9",
        stream_seq=9,
        subject="gl.submit.org/a.j1",
        reason="UndecodableEvent: bad",
        payload_head="{",
    )
    ledger = given(*FLEET, dead, submitted(id="j1", tenant="org/b", gpus=1))
    out = Admission().decide(ledger, 1000)
    assert [(type(e).__name__, e.tenant) for e in out] == [
        ("JobAdmitted", "org/b"),
        ("JobRejected", "org/a"),
    ]
    fold(ledger, out)
    assert job_status(ledger, "org/a", "j1").state == "rejected"
    assert job_status(ledger, "org/b", "j1").state == "pending"


def test_array_tasks_of_the_same_id_are_named_by_each_tenant_as_its_own():
    arr = {"count": 2}
    ledger = settle(
        given(
            *FLEET,
            submitted_json(job_id="sweep", tenant="org/a", resources={"gpus": 1}, array=arr),
            submitted_json(job_id="sweep", tenant="org/b", resources={"gpus": 1}, array=arr),
        )
    )
    key = ledger.job_key("org/b", "sweep@1")
    assert key is not None and job_name(key) == "sweep@1" and key != "sweep@1"
    assert ledger.jobs[key].tenant == "org/b"
    assert job_status(ledger, "org/b", "sweep@1").known
    assert ledger.job_key("org/b", "sweep@7") is None


def test_a_log_written_while_ids_were_global_folds_as_it_did():
    """Given a log in which admission refused tenant B's submission of A's id
    (`JobIdConflict`, as it did while job ids were global), when it is folded now, then B has
    no such job (nothing to admit or run) and the projection has no row for it."""
    from gpuledger.projections.mappers import Projection

    ledger = two_j1s()
    b_seq = ledger.jobs[B_KEY].submit_seq
    old_answer = stamp(
        ev.RequestRefused,
        key=f"j1@{b_seq}",
        producer="admission/0",
        now_ms=10,
        correlation_id="j1",
        job_id="j1",
        tenant="org/b",
        request="JobSubmitted",
        request_seq=b_seq,
        reason="JobIdConflict",
        message="job id 'j1' is already taken by another tenant's submission",
    )
    fold(ledger, [old_answer])
    assert B_KEY not in ledger.jobs and ledger.submitted == {"j1"}
    assert not job_status(ledger, "org/b", "j1").known
    assert [e.job_id for e in Admission().decide(ledger, 100)] == ["j1"]  # A's only

    projection = Projection()
    log = [*FLEET, submitted(id="j1", tenant="org/a"), submitted(id="j1", tenant="org/b")]
    for seq, e in enumerate([*log, old_answer], 1):
        projection.apply(seq, subject_for(e), e)
    assert set(projection.jobs) == {"j1"}


def test_the_projection_keeps_one_row_per_tenants_job_and_a_cancel_moves_its_own():
    from gpuledger.projections.mappers import Projection

    projection = Projection()
    log = [
        *FLEET,
        submitted(id="j1", tenant="org/a", gpus=1),
        submitted(id="j1", tenant="org/b", gpus=2),
        cancel("org/b", "j1"),
    ]
    for seq, e in enumerate(log, 1):
        projection.apply(seq, subject_for(e), e)
    rows = {k: (r.tenant, r.member_gpus, r.state) for k, r in projection.jobs.items()}
    assert rows == {"j1": ("org/a", 1, "submitted"), B_KEY: ("org/b", 2, "cancelled")}
