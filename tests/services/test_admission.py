"""Admission: given a configuration and fleet, when a job is submitted, then it is admitted
with its resolved class or rejected with a reason code."""

import pytest

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from tests.services.given import cluster, fold, given, of_type, stamped, submitted, submitted_json

FLEET = cluster(
    {"name": "n1", "gpus": 8, "model": "H100-80GB"},
    tenants=[{"name": "org/a", "guaranteed": 4}],
)


def decide_one(*extra):
    (out,) = Admission().decide(given(*FLEET, *extra), now_ms=1000)
    return out


def test_a_valid_job_is_admitted_with_its_class_resolved():
    out = decide_one(submitted(id="j1", tenant="org/a", **{"class": "train"}, gpus=2))
    assert isinstance(out, ev.JobAdmitted)
    assert (out.job_id, out.priority, out.preemptible, out.slo_class) == ("j1", 50, True, "batch")
    assert out.input_seq == len(FLEET) + 1 and out.config_digest


@pytest.mark.parametrize(
    "job, reason",
    [
        (dict(id="j", tenant="nobody", gpus=1), "UnknownTenant"),
        (dict(id="j", tenant="org/a", gpus=1, **{"class": "gold"}), "UnknownPriorityClass"),
        (dict(job_id="j", tenant="org/a", resources=dict(gpus=1, gpu_milli=500)), "InvalidSpec"),
        (
            dict(job_id="j", tenant="org/a", resources=dict(gpus=1), replicas=2, min_members=3),
            "InvalidSpec",
        ),
        (dict(id="j", tenant="org/a", gpus=16), "TopologyUnsatisfiable"),
        (dict(id="j", tenant="org/a", gpus=1, models=["A100-40GB"]), "Unschedulable"),
        (dict(id="j", tenant="org/a", mig="3g.40gb"), "MIGProfileUnavailable"),
        (dict(id="j", tenant="org/a", gpus=8, replicas=2), "Unschedulable"),
        (dict(id="j", tenant="org/a", gpus=8, **{"class": "inference"}), "NonPreemptibleOverQuota"),
    ],
)
def test_an_impossible_or_malformed_job_is_rejected_with_its_reason(job, reason):
    out = decide_one(submitted_json(**job) if "job_id" in job else submitted(**job))
    assert isinstance(out, ev.JobRejected)
    assert out.reason == reason and out.message


def test_a_retried_submission_of_the_same_job_id_yields_one_job():
    ledger = given(
        *FLEET,
        submitted(id="j1", tenant="org/a", gpus=1),
        submitted(at_ms=9, id="j1", tenant="org/a", gpus=1),
    )
    assert len(ledger.jobs) == 1 and ledger.intake.refusals == {}
    assert [type(e) for e in Admission().decide(ledger, 0)] == [ev.JobAdmitted]


def test_a_second_submission_with_other_content_is_refused_and_the_first_job_stands():
    ledger = given(
        *FLEET,
        submitted(id="j1", tenant="org/a", gpus=1),
        submitted(id="j1", tenant="org/a", gpus=4),
    )
    second_seq = ledger.last_seq
    admitted, refused = Admission().decide(ledger, 1000)
    assert isinstance(admitted, ev.JobAdmitted) and admitted.job_id == "j1"
    assert isinstance(refused, ev.RequestRefused)
    assert (refused.job_id, refused.reason, refused.request, refused.request_seq) == (
        "j1",
        "JobIdConflict",
        "JobSubmitted",
        second_seq,
    )
    assert "resources.gpus: stored 1, new 4" in refused.message
    assert refused.details["existing_seq"] == second_seq - 1
    assert ledger.jobs["j1"].spec.resources.gpus == 1
    fold(ledger, [admitted, refused])
    assert Admission().decide(ledger, 2000) == []  # answered once


def dead_letter(
    seq: int,
    subject: str,
    reason: str = "UndecodableEvent: Object missing required field `tenant` - at `$.job`",
):
    return ev.DeadLettered(
        event_id=f"DeadLettered-{seq}",
        stream_seq=seq,
        subject=subject,
        reason=reason,
        payload_head='{"type":"JobSubmitted.v1","job":{"job_id":"train-45","gpu":8}}',
    )


def test_an_undecodable_submission_is_rejected_as_invalid_spec_under_its_subjects_tenant_and_job():
    ledger = given(*FLEET, dead_letter(40, "gl.submit.org/a.train-45"))
    (out,) = Admission().decide(ledger, 1000)
    assert isinstance(out, ev.JobRejected)
    assert (out.job_id, out.tenant, out.reason) == ("train-45", "org/a", "InvalidSpec")
    assert "seq 40" in out.message and "missing required field `tenant`" in out.message
    assert out.causation_id == "DeadLettered-40"
    fold(ledger, [out])
    assert (
        ledger.jobs["train-45"].state == "rejected"
        and ledger.jobs["train-45"].reason == "InvalidSpec"
    )
    assert Admission().decide(ledger, 2000) == []


def test_a_later_valid_submission_of_a_rejected_unreadable_job_id_is_refused():
    ledger = given(*FLEET, dead_letter(40, "gl.submit.org/a.train-45"))
    fold(ledger, Admission().decide(ledger, 1000))
    fold(ledger, [submitted(id="train-45", tenant="org/a", gpus=1)])
    (out,) = Admission().decide(ledger, 2000)
    assert isinstance(out, ev.RequestRefused) and out.reason == "JobIdConflict"
    assert "rejected (InvalidSpec)" in out.message
    assert ledger.jobs["train-45"].state == "rejected"


def test_an_unreadable_second_submission_of_an_existing_job_is_refused_and_the_job_stands():
    ledger = given(
        *FLEET, submitted(id="j1", tenant="org/a", gpus=1), dead_letter(99, "gl.submit.org/a.j1")
    )
    admitted, refused = Admission().decide(ledger, 1000)
    assert isinstance(admitted, ev.JobAdmitted)
    assert (refused.reason, refused.request_seq, refused.request) == (
        "InvalidSpec",
        99,
        "JobSubmitted",
    )


@pytest.mark.parametrize(
    "subject",
    ["gl.submit.org/a.a.b", "gl.submit.org/a", "gl.sched.j1.GangPlaced", "gl.submit.bad tenant.j"],
)
def test_a_dead_letter_whose_subject_names_no_valid_tenant_and_job_is_all_there_is(subject):
    ledger = given(*FLEET, dead_letter(40, subject))
    assert Admission().decide(ledger, 1000) == [] and ledger.intake.dead_letters == 1


def test_a_cancel_of_an_unknown_job_is_refused_and_creates_nothing():
    cancel = stamped(ev.JobCancelled, "no-such-job", at=500, job_id="no-such-job", tenant="org/a")
    ledger = given(*FLEET, cancel)
    (out,) = Admission().decide(ledger, 1000)
    assert isinstance(out, ev.RequestRefused)
    assert (out.job_id, out.reason, out.request, out.request_seq) == (
        "no-such-job",
        "UnknownJob",
        "JobCancelled",
        len(FLEET) + 1,
    )
    assert "no job 'no-such-job'" in out.message
    assert ledger.jobs == {}


def test_a_cancel_from_another_tenant_is_refused_and_the_job_runs_on():
    ledger = given(
        *FLEET,
        submitted(id="j1", tenant="org/a", gpus=1),
        stamped(ev.JobCancelled, "j1", job_id="j1", tenant="org/b"),
    )
    refused = of_type(Admission().decide(ledger, 1000), ev.RequestRefused)
    assert [(r.tenant, r.reason) for r in refused] == [("org/b", "UnknownJob")]
    assert ledger.jobs["j1"].state == "submitted" and not ledger.jobs["j1"].cancel_requested


def test_decisions_are_deterministic():
    ledger = given(*FLEET, submitted(id="j1", tenant="org/a", gpus=1))
    assert Admission().decide(ledger, 5) == Admission().decide(ledger, 5)


@pytest.mark.parametrize("job_id", ["a.b*c >d", "gl.>", "x" * 200])
def test_a_raw_submission_with_an_unroutable_job_id_is_rejected_publishably(job_id):
    """Issue 11 case 2: such an id arrives only raw (a client cannot build its subject); the
    refusal names it and can be published (gl.admission._invalid.JobRejected)."""
    raw = ev.JobSubmitted(
        event_id="sub-raw",
        job=ev.JobSpec(job_id=job_id, tenant="org/a", resources=ev.Resources(gpus=1)),
    )
    out = decide_one(raw)
    assert isinstance(out, ev.JobRejected)
    assert (out.job_id, out.reason) == (job_id, "InvalidSpec")
    assert "invalid job id" in out.message
    assert ev.subject_for(out) == "gl.admission._invalid.JobRejected"


def test_a_gang_larger_than_the_whole_fleet_is_unschedulable_with_the_numbers():
    """The README's job: 4 members x 8 GPUs on a cluster of 2 x 8 GPUs never fits."""
    fleet = cluster(
        {"name_prefix": "n", "count": 2, "gpus": 8, "model": "H100-80GB"},
        tenants=[{"name": "org/a", "guaranteed": 32}],
    )
    (out,) = Admission().decide(
        given(*fleet, submitted(id="big", tenant="org/a", gpus=8, replicas=4)), 0
    )
    assert isinstance(out, ev.JobRejected) and out.reason == "Unschedulable"
    assert "4 x 8 GPUs" in out.message and "at most 2" in out.message
    assert out.details["max_members"] == 2 and out.details["fleet_gpus"] == 16


def test_a_gang_whose_members_fit_the_fleet_at_once_is_admitted():
    fleet = cluster(
        {"name_prefix": "n", "count": 2, "gpus": 8, "model": "H100-80GB"},
        tenants=[{"name": "org/a", "guaranteed": 32}],
    )
    (out,) = Admission().decide(
        given(*fleet, submitted(id="g", tenant="org/a", gpus=4, replicas=4)), 0
    )
    assert isinstance(out, ev.JobAdmitted)


def test_a_mig_profile_no_gpu_of_the_fleet_offers_is_mig_profile_unavailable():
    """An H100 MIG fleet offers 3g.40gb but not the A100-40GB name 3g.20gb."""
    fleet = cluster(
        {"name": "m1", "gpus": 2, "model": "H100-80GB", "sharing": "mig"},
        tenants=[{"name": "org/a", "guaranteed": 2}],
    )
    ok = Admission().decide(given(*fleet, submitted(id="ok", tenant="org/a", mig="3g.40gb")), 0)
    bad = Admission().decide(given(*fleet, submitted(id="bad", tenant="org/a", mig="3g.20gb")), 0)
    assert isinstance(ok[0], ev.JobAdmitted)
    assert isinstance(bad[0], ev.JobRejected) and bad[0].reason == "MIGProfileUnavailable"
    assert "3g.40gb" in bad[0].details["offered"]
