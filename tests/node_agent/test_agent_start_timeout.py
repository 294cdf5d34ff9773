"""The scheduler aborts and requeues a gang whose member on a real node never starts."""

from __future__ import annotations

import msgspec

from gpuledger import events as ev
from gpuledger.services.scheduler.decider import Scheduler
from tests.node_agent.test_agent import DOC, admitted, e, job, placed
from tests.services.given import cluster, fold, given


def real_cluster():
    out = cluster(*DOC["cluster"]["nodes"], policy={"start_timeout_s": 10})
    return [
        x if not isinstance(x, ev.NodeRegistered) else msgspec.structs.replace(x, simulated=False)
        for x in out
    ]


def test_a_member_that_never_starts_aborts_and_requeues_its_whole_gang():
    sched = Scheduler()
    started = e(
        ev.MemberStarted, "j1#1/0", 500, job_id="j1", allocation_id="j1#1", rank=0, node="n1"
    )
    ledger = given(*real_cluster(), job(), admitted("j1"), placed("j1", at=0), started)
    assert sched.decide(ledger, 9_999) == []
    assert sched.next_wakeup_ms(ledger, 1000) == 10_000
    out = sched.decide(ledger, 10_000)
    assert [type(x).__name__ for x in out] == ["GangEvicted", "GangRequeued"]
    assert out[0].reason == "StartTimeout" and out[0].allocation_id == "j1#1"
    ledger = fold(ledger, out)
    assert ledger.jobs["j1"].state == "pending" and not ledger.active


def test_started_gangs_and_simulated_nodes_are_not_timed_out():
    sched = Scheduler()
    both = [
        e(ev.MemberStarted, f"j1#1/{r}", 500, job_id="j1", allocation_id="j1#1", rank=r, node=n)
        for r, n in enumerate(("n1", "n2"))
    ]
    ledger = given(*real_cluster(), job(), admitted("j1"), placed("j1"), *both)
    assert sched.decide(ledger, 100_000) == []
    ledger = given(*cluster(*DOC["cluster"]["nodes"]), job(), admitted("j1"), placed("j1"))
    assert [x for x in sched.decide(ledger, 100_000) if isinstance(x, ev.GangEvicted)] == []
