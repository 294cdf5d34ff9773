"""Fair share down to users (the Fair Tree's second level): within a tenant, the queue puts
first the jobs of the user whose own decayed past usage over its `weight` is least, then of
the user who holds the least GPU capacity over its weight now (after priority and the
tenant's own standing), so one user's sweep cannot keep a colleague's single job waiting
behind all of it, and the heavier past user goes after the lighter one; a tenant whose jobs
all share one user (or name none) is ordered by submit time as before."""

import pytest

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.configfile import ConfigFileError, config_events
from gpuledger.services.domain.policy.queue import ordered_pending
from gpuledger.services.domain.policy.user_share import holdings, standing, weight
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import fold, given, stamped, submitted
from tests.services.test_pending import N8, fleet, scheduled

HOUR = 3_600_000


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


def past(half_life_s=3600, users=None):
    """Tenant a, one 8-GPU node: alice ran 6 GPUs and bob 2 from 0 to 1 h; then alice queues
    an 8-GPU job at 1 h + 1 ms and bob one at 1 h + 2 ms. Nobody holds anything then."""
    tenant = {"name": "a", "guaranteed": 8, **({"users": users} if users else {})}
    ledger = given(*fleet(N8, tenants=[tenant], usage_half_life_s=half_life_s))
    fold(
        ledger,
        [
            submitted(id="a-old", tenant="a", user="alice", gpus=6),
            submitted(id="b-old", tenant="a", user="bob", gpus=2),
        ],
    )
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, Scheduler().decide(ledger, 0))
    for job in ("a-old", "b-old"):
        (alloc,) = [a for a in ledger.active if ledger.allocations[a].job_id == job]
        fold(ledger, [stamped(ev.GangCompleted, job, at=HOUR, allocation_id=alloc, job_id=job)])
    fold(
        ledger,
        [
            submitted(id="a-new", tenant="a", user="alice", gpus=8, at_ms=HOUR + 1),
            submitted(id="b-new", tenant="a", user="bob", gpus=8, at_ms=HOUR + 2),
        ],
    )
    fold(ledger, Admission().decide(ledger, HOUR + 2))
    assert holdings(ledger) == {}
    return ledger


def test_the_heavier_past_user_goes_after_the_lighter_one():
    # given alice used 6 GPU-hours and bob 2 in the last hour, both at the default weight 1
    ledger = past()
    alice, bob = (ledger.user_usage_at("a", u, HOUR + 2) for u in ("alice", "bob"))
    # then their usage is decayed like their tenant's, one fold: it adds up to the tenant's
    assert alice == 3 * bob > 0
    assert abs(alice + bob - ledger.usage_at("a", HOUR + 2)) <= 2  # floors of one fold
    # and an hour later each counts half
    assert (
        ledger.user_usage_at("a", "alice", 2 * HOUR)
        == ledger.user_usage_at("a", "alice", HOUR) // 2
    )
    # when the queue is ordered: bob's job first although alice submitted first
    assert [j.job_id for j in ordered_pending(ledger, HOUR + 2)] == ["b-new", "a-new"]
    (placed,) = [e for e in Scheduler().decide(ledger, HOUR + 2) if isinstance(e, ev.GangPlaced)]
    assert placed.job_id == "b-new"


def test_a_weight_splits_the_tenants_share_unevenly():
    # given alice weighs 4 (her usage counts a quarter): 6/4 GPU-hours against bob's 2/1
    ledger = past(users={"overrides": {"alice": {"weight": 4}}})
    assert (weight(ledger, "a", "alice"), weight(ledger, "a", "bob")) == (4, 1)
    assert standing(ledger, "a", "alice", HOUR + 2) < standing(ledger, "a", "bob", HOUR + 2)
    # then alice's job goes first
    assert [j.job_id for j in ordered_pending(ledger, HOUR + 2)] == ["a-new", "b-new"]


def test_a_default_weight_applies_to_every_user_without_an_override():
    # given the tenant's users weigh 2 by default and bob 1: alice 6/2 against bob's 2/1
    ledger = past(users={"default": {"weight": 2}, "overrides": {"bob": {"weight": 1}}})
    assert weight(ledger, "a", "alice") == 2
    assert [j.job_id for j in ordered_pending(ledger, HOUR + 2)] == ["b-new", "a-new"]


def test_without_a_half_life_past_usage_is_not_counted():
    # given usage decay off: nobody has a standing, nobody holds anything
    ledger = past(half_life_s=0)
    assert standing(ledger, "a", "alice", HOUR + 2) == 0 == ledger.user_usage_at("a", "bob", HOUR)
    # then submit time decides
    assert [j.job_id for j in ordered_pending(ledger, HOUR + 2)] == ["a-new", "b-new"]


@pytest.mark.parametrize("bad", [0, -1, "x"])
def test_a_weight_below_one_is_a_configuration_error(bad):
    doc = {"tenants": [{"name": "a", "users": {"overrides": {"alice": {"weight": bad}}}}]}
    with pytest.raises(ConfigFileError, match=r"users\.overrides\.alice\.weight"):
        config_events(doc)
