"""What the intake refuses from the folded state (services/domain/policy/requesters.py): a
per-user credential acts only as its user, on its user's jobs, and its answer about another
user's job is the answer about no job; a submission over a submit limit is refused before it
is stored. The live rules, with each principal's key: tests/integration/test_users_live.py."""

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.policy.requesters import refusal
from tests.services.given import cluster, fold, given, submitted

FLEET = cluster(
    {"name": "n1", "gpus": 8, "model": "H100-80GB"},
    tenants=[{"name": "research", "users": {"default": {"submit_jobs": 1}}}],
)


def state_with_bobs_job():
    ledger = given(*FLEET, submitted(id="b1", tenant="research", user="bob", gpus=1))
    fold(ledger, Admission().decide(ledger, 0))
    return ledger


def cancel(job_id: str) -> ev.JobCancelled:
    return ev.JobCancelled(event_id=f"c-{job_id}", job_id=job_id, tenant="research")


def test_a_user_acts_on_its_own_jobs_only_and_learns_nothing_of_others():
    ledger = state_with_bobs_job()
    # when bob cancels his job, then nothing refuses it
    assert refusal(ledger, cancel("b1"), "bob") is None
    # when alice cancels it, then she is told what she is told about a job nobody has
    theirs, nobody = refusal(ledger, cancel("b1"), "alice"), refusal(ledger, cancel("zz"), "alice")
    assert theirs.reason == nobody.reason == "UnknownJob"
    assert theirs.message.replace("b1", "X") == nobody.message.replace("zz", "X")
    # and the tenant's CI credential (no user) is not held to a user
    assert refusal(ledger, cancel("b1"), None) is None


def test_a_user_submits_as_itself_only():
    ledger = given(*FLEET)
    as_bob = submitted(id="j", tenant="research", user="bob", gpus=1)
    nobody = submitted(id="j", tenant="research", gpus=1)
    assert refusal(ledger, as_bob, "bob") is None
    assert refusal(ledger, as_bob, "alice").reason == "NotYourUser"
    assert refusal(ledger, nobody, "alice").message.endswith("this job names no user")
    assert refusal(ledger, as_bob, None) is None  # a CI credential vouches for any user


def test_a_submission_over_a_limit_is_refused_before_it_is_stored():
    ledger = state_with_bobs_job()  # bob's bound: 1 job
    again = submitted(id="b2", tenant="research", user="bob", gpus=1)
    refused = refusal(ledger, again, "bob")
    assert refused.reason == "SubmitLimit" and "(submit_jobs)" in refused.message
    # a tenant nobody configured is left to admission (UnknownTenant)
    assert refusal(ledger, submitted(id="x", tenant="nowhere", gpus=1), None) is None
