"""Submit limits (issues 43 and 44): a tenant's and a user's pending plus running jobs, and the
size of one array, are bounded; a submission over a bound is rejected whole by admission with
`SubmitLimit` and one line naming the bound, and never becomes pending. The counts are the
fold's (`Ledger.live_jobs`); the rule is one pure function for both scopes
(services/domain/policy/submit_limits.py)."""

import pytest

from gpuledger import events as ev
from gpuledger.events.specs import DEFAULT_ARRAY_SIZE
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.configfile import ConfigFileError, config_events
from gpuledger.services.domain.policy import submit_limits
from tests.services.given import cluster, fold, given, stamped, submitted

RESEARCH = {
    "name": "research",
    "guaranteed": 8,
    "limits": {"submit_jobs": 6, "array_size": 4},
    "users": {"default": {"submit_jobs": 2}, "overrides": {"alice": {"submit_jobs": 4}}},
}
FLEET = cluster({"name": "n1", "gpus": 8, "model": "H100-80GB"}, tenants=[RESEARCH])


def admit(ledger):
    """Admission decides and its decisions are folded; the decisions."""
    out = Admission().decide(ledger, now_ms=1000)
    fold(ledger, out)
    return out


def verdict(events, job_id):
    (e,) = [e for e in events if getattr(e, "job_id", None) == job_id]
    return e


def job(job_id, user=None, **extra):
    spec = dict(id=job_id, tenant="research", gpus=1, **extra)
    if user is not None:
        spec["user"] = user
    return submitted(**spec)


def test_a_users_submission_past_its_submit_jobs_is_rejected_and_never_pending():
    # given bob (default: 2 jobs pending or running) with two jobs admitted
    ledger = given(*FLEET, job("b1", "bob"), job("b2", "bob"))
    admit(ledger)
    assert ledger.live_jobs("research", "bob") == 2
    # when he submits a third
    fold(ledger, [job("b3", "bob")])
    out = admit(ledger)
    # then it is rejected with the bound named, and it is not pending
    e = verdict(out, "b3")
    assert isinstance(e, ev.JobRejected) and e.reason == "SubmitLimit"
    assert e.message == (
        "user bob of tenant research has 2 jobs pending or running and this submission adds 1;"
        " at most 2 at once (submit_jobs)"
    )
    assert e.details["limit"] == "submit_jobs" and e.details["jobs"] == 2
    assert ledger.jobs["b3"].state == "rejected" and "b3" not in ledger.pending
    assert ledger.live_jobs("research", "bob") == 2


def test_an_override_raises_one_users_bound_and_a_job_naming_no_user_has_only_the_tenants():
    # given alice (override: 4) and bob (default: 2), each with two jobs
    ledger = given(*FLEET, *(job(f"{u[0]}{i}", u) for u in ("alice", "bob") for i in (1, 2)))
    admit(ledger)
    # when alice and an unnamed user each submit one more
    fold(ledger, [job("a3", "alice"), job("x1")])
    out = admit(ledger)
    # then both are admitted (the tenant's 6 now full), and the next is over the tenant's bound
    assert {type(verdict(out, j)) for j in ("a3", "x1")} == {ev.JobAdmitted}
    assert ledger.live_jobs("research") == 6
    fold(ledger, [job("a4", "alice")])
    e = verdict(admit(ledger), "a4")
    assert e.reason == "SubmitLimit" and e.message.startswith("tenant research has 6 jobs")


def test_an_array_counts_its_tasks_and_is_judged_whole():
    # given bob with one job (his bound: 2)
    ledger = given(*FLEET, job("b1", "bob"))
    admit(ledger)
    # when he submits an array of 2 tasks
    fold(ledger, [job("sweep", "bob", array={"count": 2})])
    e = verdict(admit(ledger), "sweep")
    # then it is rejected whole (1 + 2 > 2), and no task exists
    assert e.reason == "SubmitLimit" and "this submission adds 2" in e.message
    assert ledger.tasks_of("sweep") == [] and ledger.live_jobs("research", "bob") == 1


def test_an_admitted_array_counts_each_task_until_it_ends():
    # given alice's array of 3 tasks admitted
    ledger = given(*FLEET, job("sweep", "alice", array={"count": 3}))
    assert isinstance(verdict(admit(ledger), "sweep"), ev.JobAdmitted)
    # then it counts 3 (one record, three tasks), placed or not
    assert ledger.live_jobs("research", "alice") == ledger.live_jobs("research") == 3
    member = ev.MemberPlacement(rank=0, node="n1", gpus=(0,))
    placed = stamped(
        ev.GangPlaced,
        "p",
        job_id="sweep@0",
        allocation_id="sweep@0#1",
        tenant="research",
        members=(member,),
    )
    fold(ledger, [placed])
    assert ledger.live_jobs("research", "alice") == 3
    # when the placed task completes, it no longer counts
    done = stamped(
        ev.GangCompleted,
        "c",
        job_id="sweep@0",
        allocation_id="sweep@0#1",
    )
    fold(ledger, [done])
    assert ledger.live_jobs("research", "alice") == 2


def test_an_array_larger_than_array_size_is_rejected_naming_the_bound():
    ledger = given(*FLEET, job("big", "alice", array={"count": 5}))
    e = verdict(admit(ledger), "big")
    assert e.reason == "SubmitLimit"
    assert e.message == (
        "array of 5 tasks: tenant research may submit arrays of at most 4 tasks (array_size)"
    )


def test_submissions_decided_together_count_in_the_order_they_were_submitted():
    # given bob submits `z1` then `a2` (ids sorting the other way) in one batch: bound 2
    ledger = given(*FLEET, job("z1", "bob"), job("a2", "bob"), job("m3", "bob"))
    out = admit(ledger)
    # then the first two submitted are admitted and the last is rejected
    assert [type(verdict(out, j)).__name__ for j in ("z1", "a2", "m3")] == [
        "JobAdmitted",
        "JobAdmitted",
        "JobRejected",
    ]


def test_a_tenant_without_limits_has_the_built_in_defaults():
    fleet = cluster({"name": "n1", "gpus": 8, "model": "H100-80GB"}, tenants=[{"name": "t"}])
    ledger = given(
        *fleet, submitted(id="huge", tenant="t", array={"count": DEFAULT_ARRAY_SIZE + 1})
    )
    e = verdict(admit(ledger), "huge")
    assert e.reason == "SubmitLimit" and "(array_size)" in e.message
    # and `null` lifts a bound
    tenant = {"name": "t", "limits": {"array_size": None}}
    fleet = cluster({"name": "n1", "gpus": 8, "model": "H100-80GB"}, tenants=[tenant])
    spec = ev.JobSpec(job_id="huge", tenant="t", array=ev.ArraySpec(count=DEFAULT_ARRAY_SIZE + 1))
    (config,) = [e for e in fleet if isinstance(e, ev.TenantConfigured)]
    assert submit_limits.problem(config, spec, {}) is None


@pytest.mark.parametrize(
    "tenant",
    [
        {"name": "t", "limits": {"submit_jobs": -1}},
        {"name": "t", "limits": {"array_sizes": 3}},
        {"name": "t", "users": {"default": {"submit_jobs": -2}}},
        {"name": "t", "users": {"overrides": {"bob": {"array_size": "many"}}}},
    ],
)
def test_a_bad_limit_is_a_configuration_error(tenant):
    with pytest.raises(ConfigFileError):
        config_events({"tenants": [tenant]})


def test_a_configuration_without_submit_limits_encodes_as_before():
    (e,) = config_events({"tenants": [{"name": "t", "users": {"default": {"gpus": 2}}}]})
    assert b"submit" not in ev.encode(e) and b"array_size" not in ev.encode(e)


def test_the_fold_counts_a_job_while_it_is_pending_held_placed_or_requeued_and_not_after():
    # given bob's job admitted, then held: still counted (Slurm counts held jobs too)
    ledger = given(*FLEET, job("b1", "bob"), job("b2", "bob"))
    admit(ledger)
    fold(ledger, [ev.JobHeld(event_id="h", job_id="b1", tenant="research")])
    assert ledger.live_jobs("research", "bob") == 2
    # when b1 is placed and evicted back to the queue, it counts once throughout
    member = ev.MemberPlacement(rank=0, node="n1", gpus=(0,))
    fold(ledger, [ev.JobReleased(event_id="r", job_id="b1", tenant="research")])
    fold(
        ledger,
        [
            stamped(
                ev.GangPlaced,
                "p",
                job_id="b1",
                allocation_id="b1#1",
                tenant="research",
                members=(member,),
            )
        ],
    )
    assert (ledger.live_jobs("research", "bob"), ledger.placed_jobs[("research", "bob")]) == (2, 1)
    evicted = stamped(ev.GangEvicted, "e", job_id="b1", allocation_id="b1#1", reason="NodeLost")
    fold(ledger, [evicted])
    assert ledger.jobs["b1"].state == "pending" and ledger.live_jobs("research", "bob") == 2
    # when b2 is cancelled, then it no longer counts
    fold(ledger, [ev.JobCancelled(event_id="c", job_id="b2", tenant="research")])
    assert ledger.live_jobs("research", "bob") == ledger.live_jobs("research") == 1
