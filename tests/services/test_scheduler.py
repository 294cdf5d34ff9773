"""Scheduler: given admitted jobs and a fleet, when it decides, then whole gangs are placed
atomically in queue order, or the job's pending reason is recorded once."""

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type, submitted

FLEET = cluster(
    {"name_prefix": "n", "count": 2, "gpus": 8, "model": "H100-80GB"},
    tenants=[{"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 8, "limit": 10}],
)


def admitted(*jobs):
    ledger = given(*FLEET, *jobs)
    return fold(ledger, Admission().decide(ledger, 0))


def test_gangs_are_placed_whole_and_never_share_a_gpu():
    ledger = admitted(
        submitted(id="g1", tenant="a", gpus=4, replicas=3),
        submitted(id="g2", tenant="a", gpus=2, replicas=2),
    )
    out = Scheduler().decide(ledger, 10)
    placed = of_type(out, ev.GangPlaced)
    assert [p.job_id for p in placed] == ["g1", "g2"]
    assert [len(p.members) for p in placed] == [3, 2]
    used = [(m.node, g) for p in placed for m in p.members for g in m.gpus]
    assert len(used) == len(set(used)) == 16
    assert ledger.fleet.free_gpus() == 16, "decide must not leave tentative allocations behind"


def test_a_gang_that_does_not_fit_binds_nothing_and_says_why_once():
    ledger = admitted(submitted(id="hold", tenant="b", gpus=4, replicas=1))
    fold(ledger, Scheduler().decide(ledger, 5))
    ledger = fold(ledger, [submitted(id="big", tenant="a", gpus=8, replicas=2, at_ms=6)])
    ledger = fold(ledger, Admission().decide(ledger, 7))
    out = Scheduler().decide(ledger, 10)
    (pending,) = out
    assert isinstance(pending, ev.PendingReasonChanged) and pending.reason == "GangIncomplete"
    assert "1 of 2" in pending.message
    fold(ledger, out)
    assert Scheduler().decide(ledger, 20) == [], "an unchanged reason is not emitted again"


def test_queue_order_is_priority_first_then_submit_time():
    ledger = admitted(
        submitted(id="low", tenant="a", gpus=8, replicas=2, at_ms=0),
        submitted(id="high", tenant="a", gpus=8, replicas=2, at_ms=5, **{"class": "interactive"}),
    )
    placed = of_type(Scheduler().decide(ledger, 10), ev.GangPlaced)
    assert [p.job_id for p in placed] == ["high"]


def test_a_tenant_limit_keeps_a_job_pending_with_exceeds_limit():
    ledger = admitted(submitted(id="j", tenant="b", gpus=8, replicas=2))
    (out,) = Scheduler().decide(ledger, 10)
    assert out.reason == "ExceedsLimit" and "10-GPU limit" in out.message


def test_placement_beyond_the_guarantee_is_marked_borrowing():
    ledger = admitted(
        submitted(id="j1", tenant="a", gpus=8), submitted(id="j2", tenant="a", gpus=4, at_ms=1)
    )
    placed = of_type(Scheduler().decide(ledger, 10), ev.GangPlaced)
    assert [(p.job_id, p.borrowing) for p in placed] == [("j1", False), ("j2", True)]


def test_when_every_member_completed_the_gang_completes_and_frees_its_gpus():
    ledger = admitted(submitted(id="j", tenant="a", gpus=8))
    fold(ledger, Scheduler().decide(ledger, 10))
    fold(
        ledger,
        [
            ev.MemberStarted(
                job_id="j",
                allocation_id="j#1",
                rank=0,
                node="n1",
                event_id="s",
                producer="node-agent/n1",
            )
        ],
    )
    assert ledger.fleet.free_gpus() == 8
    fold(
        ledger,
        [
            ev.MemberExited(
                job_id="j",
                allocation_id="j#1",
                rank=0,
                node="n1",
                outcome="completed",
                event_id="x",
                producer="node-agent/n1",
            )
        ],
    )
    (done,) = Scheduler().decide(ledger, 20)
    assert isinstance(done, ev.GangCompleted)
    fold(ledger, [done])
    assert ledger.jobs["j"].state == "completed" and ledger.fleet.free_gpus() == 16


def test_a_silent_node_is_declared_lost_and_its_gang_requeued_whole():
    ledger = admitted(submitted(id="j", tenant="a", gpus=8, replicas=2))
    n1 = ledger.nodes["n1"].info  # n1 promises heartbeats; n2 does not (never lost for silence)
    fold(
        ledger,
        [
            ev.NodeRegistered(
                node=n1,
                heartbeat_s=5,
                event_id="reg-hb",
                occurred_at_ms=0,
                producer="node-agent/n1",
            )
        ],
    )
    fold(ledger, Scheduler().decide(ledger, 10))
    assert ledger.jobs["j"].state == "running"
    (lost,) = Scheduler().decide(ledger, 31_000)
    assert isinstance(lost, ev.NodeLost) and lost.node == "n1"
    fold(ledger, [lost])
    out = Scheduler().decide(ledger, 31_000)
    assert [type(e).__name__ for e in out] == ["GangEvicted", "GangRequeued"]
    assert out[0].reason == "NodeLost"
    fold(ledger, out)
    assert ledger.jobs["j"].state == "pending" and ledger.fleet.free_gpus() == 8


def test_a_decision_from_a_deposed_leader_is_ignored():
    ledger = admitted(submitted(id="j", tenant="a", gpus=8))
    new_leader = Scheduler(leader_epoch=7)
    old_leader = Scheduler(leader_epoch=3)
    (placed,) = new_leader.decide(ledger, 10)
    fold(ledger, [placed])
    stale = ev.GangCompleted(
        job_id="j", allocation_id="j#1", producer="scheduler/1", leader_epoch=3, event_id="stale"
    )
    assert old_leader.leader_epoch < placed.leader_epoch
    fold(ledger, [stale])
    assert ledger.jobs["j"].state == "running" and ledger.intake.stale_decisions == 1
