"""Nomination expiry and the start timeout are policy: given a `nomination_ttl_s` /
`start_timeout_s` in the policy, when the scheduler decides, then it honours them (defaults
300 s and 120 s)."""

import msgspec

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, exited, fold, given, of_type, stamped, started, submitted


def preempted_for_a_ghost(policy):
    """`victim` runs on the only node, is preempted for `ghost` (a beneficiary that never
    comes) and exits at 10 s; `other` waits."""
    ledger = given(
        *cluster(
            {"name": "n1", "gpus": 4}, tenants=[{"name": "t", "guaranteed": 4}], policy=policy
        ),
        submitted(id="victim", tenant="t", gpus=4),
        submitted(id="other", tenant="t", gpus=4, at_ms=1),
    )
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, Scheduler().decide(ledger, 0))
    assert ledger.jobs["victim"].state == "running"
    fold(
        ledger,
        [
            started("victim"),
            stamped(
                ev.PreemptionRequested,
                "p",
                5_000,
                job_id="victim",
                allocation_id="victim#1",
                beneficiary="ghost",
                reason="Priority",
                deadline_ms=35_000,
            ),
            exited("victim", 10_000, "preempted"),
        ],
    )
    fold(ledger, Scheduler().decide(ledger, 10_000))  # evicted and requeued
    assert ledger.jobs["victim"].state == "pending"
    return ledger


def test_freed_capacity_stays_nominated_for_the_policy_ttl_then_anyone_may_use_it():
    ledger = preempted_for_a_ghost({"nomination_ttl_s": 60})
    assert ledger.nomination_expires_ms("ghost") == 70_000
    assert of_type(Scheduler().decide(ledger, 69_999), ev.GangPlaced) == []
    assert Scheduler().next_wakeup_ms(ledger, 10_000) == 70_000
    (placed,) = of_type(Scheduler().decide(ledger, 70_000), ev.GangPlaced)
    assert placed.job_id == "victim"


def test_the_nomination_ttl_defaults_to_five_minutes():
    ledger = preempted_for_a_ghost(None)
    assert ledger.nomination_expires_ms("ghost") == 10_000 + 300_000


def test_the_start_timeout_defaults_to_two_minutes_and_zero_turns_it_off():
    assert ev.Policy().start_timeout_s == 120 and ev.Policy().nomination_ttl_s == 300

    def real(policy):
        out = cluster(
            {"name": "n1", "gpus": 4}, tenants=[{"name": "t", "guaranteed": 4}], policy=policy
        )
        out = [
            msgspec.structs.replace(x, simulated=False) if isinstance(x, ev.NodeRegistered) else x
            for x in out
        ]
        ledger = given(*out, submitted(id="j", tenant="t", gpus=4))
        fold(ledger, Admission().decide(ledger, 0))
        fold(ledger, Scheduler().decide(ledger, 0))
        return ledger

    ledger = real(None)
    assert Scheduler().next_wakeup_ms(ledger, 0) == 120_000
    assert Scheduler().decide(ledger, 119_999) == []
    assert [x.reason for x in of_type(Scheduler().decide(ledger, 120_000), ev.GangEvicted)] == [
        "StartTimeout"
    ]
    ledger = real({"start_timeout_s": 0})
    assert Scheduler().next_wakeup_ms(ledger, 0) is None
    assert Scheduler().decide(ledger, 10_000_000) == []
