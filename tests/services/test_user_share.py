"""Fair order down to users: within a tenant, the queue puts the jobs of the user who holds
the least GPU capacity now first (after priority and the tenant's own standing), so one
user's sweep cannot keep a colleague's single job waiting behind all of it; a tenant whose
jobs all share one user (or name none) is ordered by submit time as before."""

from gpuledger import events as ev
from gpuledger.services.domain.policy.queue import ordered_pending
from gpuledger.services.domain.policy.user_share import holdings
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import fold, stamped
from tests.services.test_pending import N8, fleet, scheduled


def sweep(user, n, prefix):
    return [
        {"id": f"{prefix}{i}", "tenant": "a", "gpus": 1, **({"user": user} if user else {})}
        for i in range(n)
    ]


def test_a_colleagues_single_job_goes_ahead_of_the_rest_of_a_sweep():
    # given alice's 10-job sweep on 8 GPUs (8 run, 2 wait), then bob's single job
    ledger, _ = scheduled(fleet(N8), sweep("alice", 10, "s"), sweep("bob", 1, "b"))
    assert holdings(ledger) == {("a", "alice"): [8, 8000]}
    # when the queue is ordered
    order = [j.job_id for j in ordered_pending(ledger, 1)]
    # then bob's job, submitted last, is first: alice holds 8 GPUs, bob none
    assert order == ["b0", "s8", "s9"]


def test_the_next_free_gpu_goes_to_the_colleague():
    # given the same queue, when one of alice's jobs ends and the scheduler runs
    ledger, _ = scheduled(fleet(N8), sweep("alice", 10, "s"), sweep("bob", 1, "b"))
    alloc = next(a for a in ledger.active if ledger.allocations[a].job_id == "s0")
    fold(ledger, [stamped(ev.GangCompleted, "s0-done", at=2, allocation_id=alloc, job_id="s0")])
    out = Scheduler().decide(ledger, 3)
    # then bob's job takes it
    assert [e.job_id for e in out if isinstance(e, ev.GangPlaced)] == ["b0"]


def test_one_user_or_none_keeps_submit_order():
    for user in ("alice", None):
        ledger, _ = scheduled(fleet(N8), sweep(user, 10, "s"), sweep(user, 1, "b"))
        assert [j.job_id for j in ordered_pending(ledger, 1)] == ["s8", "s9", "b0"]
