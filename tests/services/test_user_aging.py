"""Aging among a tenant's users (services/domain/policy/user_aging.py): aging still lifts a
job that has waited, but inside a tenant it never carries one user's old sweep past a
colleague who stands ahead in the user order (has used and holds less), so the colleague's
single job runs on the next GPU that frees; across tenants and classes aging keeps its
place, and a tenant with one user (or none, every log before users) is ordered as before."""

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.policy.queue import effective_priority, ordered_pending
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type, stamped, submitted
from tests.services.test_pending import QUIET

MIN = 60_000
AGED = 40 * MIN  # past one aging step (policy.aging_after_wait_s: 30 min)
SCAVENGER = {"name": "scavenger", "value": 10, "preemptible": True}


def old_sweep(*jobs, tenants=({"name": "a", "guaranteed": 8},), gpus=8, before=(), user="alice"):
    """`before` (job dicts) placed at 0, then `user`'s (alice's) 100-task sweep of tenant a on one node of
    `gpus` GPUs (what is free runs, the rest waits); at 40 minutes, when the waiting tasks
    have aged one step, `jobs` are submitted."""
    ledger = given(
        *cluster(
            {"name": "n1", "gpus": gpus},
            tenants=list(tenants),
            classes=[SCAVENGER],
            policy={**QUIET, "aging_after_wait_s": 1800},
        )
    )
    sweep = {"id": "sweep", "tenant": "a", "gpus": 1, "array": {"count": 100}}
    if user is not None:
        sweep["user"] = user
    for wave, at in ((list(before), 0), ([sweep], 0), (list(jobs), AGED)):
        fold(ledger, [submitted(at_ms=at, **j) for j in wave])
        for _ in range(2):  # an array's tasks are admitted after the array
            fold(ledger, Admission().decide(ledger, at))
            fold(ledger, Scheduler().decide(ledger, at))
    return ledger


def queue(ledger):
    return [j.job_id for j in ordered_pending(ledger, AGED)]


def free_one(ledger, at=AGED + MIN):
    """One of the sweep's running tasks completes at `at`; what the scheduler then places."""
    alloc = min(a for a in ledger.active if ledger.allocations[a].job_id.startswith("sweep@"))
    job = ledger.allocations[alloc].job_id
    fold(ledger, [stamped(ev.GangCompleted, "done", at=at, allocation_id=alloc, job_id=job)])
    return [e.job_id for e in of_type(Scheduler().decide(ledger, at), ev.GangPlaced)]


def test_a_colleagues_fresh_job_runs_next_ahead_of_an_old_sweeps_aged_tasks():
    # given alice's sweep has waited 40 minutes (its tasks aged one step) when bob submits one job
    ledger = old_sweep({"id": "b1", "tenant": "a", "user": "bob", "gpus": 1})
    waiting = [ledger.jobs[j] for j in queue(ledger) if j.startswith("sweep@")]
    # 92 tasks wait: those the fold released as records (what could start at once), the
    # rest a count on the array (docs/job-semantics.md, "What the fold holds")
    assert len(waiting) + ledger.jobs["sweep"].window.unreleased == 92
    assert all(effective_priority(ledger, t, AGED) == 75 for t in waiting)
    assert effective_priority(ledger, ledger.jobs["b1"], AGED) == 50
    # then bob's job is first in the queue although it has not aged: alice holds 8 GPUs, bob none
    assert queue(ledger)[0] == "b1"
    # and when a GPU frees, bob's job takes it
    assert free_one(ledger) == ["b1"]


def test_the_same_job_under_the_sweeps_own_user_waits_behind_its_aged_tasks():
    # given the fresh job is alice's own, or no job names a user (a log before users)
    for user in ("alice", None):
        job = {"id": "b1", "tenant": "a", "gpus": 1, **({"user": user} if user else {})}
        ledger = old_sweep(job, user=user)
        # then aging orders the work as before: every aged task goes first
        first = queue(ledger)[0]
        assert first.startswith("sweep@") and queue(ledger)[-1] == "b1"
        assert free_one(ledger) == [first]


def test_across_tenants_the_tenants_aged_place_is_kept_and_shared_with_the_colleague():
    # given another tenant's fresh job of the same class, submitted with bob's
    tenants = ({"name": "a", "guaranteed": 4}, {"name": "b", "guaranteed": 4})
    other = {"id": "other", "tenant": "b", "gpus": 1}
    ledger = old_sweep(
        {"id": "b1", "tenant": "a", "user": "bob", "gpus": 1}, other, tenants=tenants
    )
    order = queue(ledger)
    # then bob's job first, then alice's aged tasks, and the other tenant's unaged job last
    assert order[0] == "b1" and order[-1] == "other"
    assert len(order) + ledger.jobs["sweep"].window.unreleased == 94


def test_a_colleagues_job_of_a_lower_class_is_not_lifted():
    # given bob's job is of a class below the sweep's own
    bob = {"id": "b1", "tenant": "a", "user": "bob", "gpus": 1, "priority_class": "scavenger"}
    ledger = old_sweep(bob)
    # then the class order stands: the sweep's tasks go first
    assert queue(ledger)[-1] == "b1"


def test_a_colleague_behind_in_the_user_order_is_not_lifted():
    # given bob holds 12 GPUs of 16 and alice's sweep the other 4 when bob submits again
    bob_big = {"id": "b-big", "tenant": "a", "user": "bob", "gpus": 12}
    tenants = ({"name": "a", "guaranteed": 16},)
    ledger = old_sweep(
        {"id": "b1", "tenant": "a", "user": "bob", "gpus": 1},
        tenants=tenants,
        gpus=16,
        before=[bob_big],
    )
    # then bob stands behind alice: her aged tasks keep going first
    assert queue(ledger)[-1] == "b1"
    assert queue(ledger)[0].startswith("sweep@")
