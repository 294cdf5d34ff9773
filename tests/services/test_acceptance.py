"""The one acceptance rule set (services/domain/fold/acceptance.py): what the ledger refuses, it
refuses whole, with a reason; services and the projector fold through it."""

from __future__ import annotations

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.services.domain.fold.acceptance import Refused, admit, subject_refusal
from gpuledger.services.domain.fold.ledger import Ledger
from tests.fold.story import admission


def gpu(i: int) -> ev.GpuInfo:
    return ev.GpuInfo(index=i, uuid=f"GPU-{i}", model="H100-80GB", memory_mib=81920, clique="c0")


def job(job_id: str) -> list[ev.Event]:
    spec = ev.JobSpec(job_id=job_id, tenant="org/a", resources=ev.Resources(gpus=8))
    return [
        ev.JobSubmitted(event_id=f"s-{job_id}", job=spec),
        admission(job_id, "org/a", producer="admission/0"),
    ]


def placed(job_id: str, **kw) -> ev.GangPlaced:
    member = ev.MemberPlacement(rank=0, node="n1", gpus=tuple(range(8)))
    kw.setdefault("producer", "scheduler/0")
    return ev.GangPlaced(
        job_id=job_id, allocation_id=f"{job_id}#1", tenant="org/a", members=(member,), **kw
    )


def folded(*evs: ev.Event) -> Ledger:
    ledger = Ledger()
    node = ev.NodeInfo(
        name="n1", cpu_milli=64000, memory_mib=512000, gpus=tuple(gpu(i) for i in range(8))
    )
    for seq, e in enumerate(
        [ev.NodeRegistered(node=node, heartbeat_s=5, producer="node-agent/n1"), *evs], 1
    ):
        ledger.apply(seq, e)
    return ledger


def test_a_placement_over_busy_gpus_is_refused_whole_and_changes_nothing():
    # given job a running on all 8 GPUs of n1, and job b pending
    ledger = folded(*job("a"), placed("a"), *job("b"))
    # when a GangPlaced puts b on the same GPUs (backfilling a's reservation, as a bad
    # scheduler might)
    bad = placed("b", backfill_for="a")
    with pytest.raises(Refused, match="PlacementConflict") as err:
        ledger.apply(9, bad)
    # then the ledger is exactly as before: b pending, a alone on the node, nothing booked
    assert err.value.refusal.code == "PlacementConflict"
    assert ledger.jobs["b"].state == "pending" and "b" in ledger.pending
    assert ledger.active == {"a#1"} and "b#1" not in ledger.allocations
    assert ledger.backfills == {} and ledger.tenant_gpu_milli == {"org/a": 8000}
    assert ledger.fleet.allocation_ids() == ("a#1",)
    # and `admit` (what the projector calls) reports the same refusal instead of raising
    refusal = admit(ledger, 9, bad)
    assert refusal is not None and refusal.code == "PlacementConflict"
    assert "b#1" in refusal.message and ledger.jobs["b"].state == "pending"


def test_facts_about_absent_or_settled_things_are_refused_with_a_reason():
    ledger = folded(*job("a"), placed("a"))
    assert admit(ledger, 9, placed("ghost")).code == "UnknownJob"
    assert admit(ledger, 10, placed("a")).code == "WrongState"  # running, not pending
    assert admit(ledger, 11, ev.JobCancelled(job_id="nope", tenant="org/a")).code == "UnknownJob"
    assert admit(ledger, 12, job("a")[0]).code == "DuplicateJob"
    assert "nope" not in ledger.jobs and ledger.jobs["a"].state == "running"


def test_a_decision_of_a_deposed_leader_is_refused():
    ledger = folded(*job("a"), *job("b"))
    assert admit(ledger, 9, placed("a", leader_epoch=2)) is None
    refusal = admit(ledger, 10, placed("b", leader_epoch=1))
    assert refusal is not None and refusal.code == "StaleLeaderEpoch"
    assert ledger.jobs["b"].state == "pending" and ledger.intake.stale_decisions == 1


def test_a_lost_node_that_heartbeats_again_is_back():
    ledger = folded(ev.NodeLost(node="n1", message="silent for 30s", producer="scheduler/0"))
    assert ledger.nodes["n1"].lost
    assert admit(ledger, 3, ev.NodeHeartbeat(node="n1", producer="node-agent/n1")) is None
    assert not ledger.nodes["n1"].lost


def test_an_event_must_travel_on_its_own_subject():
    # subjects are what NATS permissions confine: a tenant's CI may publish only on its own
    # gl.submit.<tenant>.> subjects, so a payload naming another tenant is refused
    spec = ev.JobSpec(job_id="x", tenant="org/b", resources=ev.Resources(gpus=1))
    sub = ev.JobSubmitted(job=spec)
    assert subject_refusal("gl.submit.org/b.x", sub) is None
    wrong = subject_refusal("gl.submit.org/a.x", sub)
    assert (
        wrong is not None and wrong.code == "WrongSubject" and "gl.submit.org/b.x" in wrong.message
    )
    ledger = Ledger()
    assert admit(ledger, 1, sub, "gl.submit.org/a.x").code == "WrongSubject"
    assert "x" not in ledger.jobs
    assert admit(ledger, 2, placed("a"), "gl.node.n1.GangPlaced").code == "WrongSubject"
    bad_id = ev.JobSubmitted(job=ev.JobSpec(job_id="a.b*c >d", tenant="org/b"))
    assert subject_refusal("gl.submit.org/b.x", bad_id).code == "InvalidId"


def preempt(job_id: str, **kw) -> ev.PreemptionRequested:
    return ev.PreemptionRequested(
        job_id=job_id,
        allocation_id=f"{job_id}#1",
        beneficiary="b",
        reason="Priority",
        deadline_ms=60_000,
        **kw,
    )


def pending(job_id: str, **kw) -> ev.PendingReasonChanged:
    return ev.PendingReasonChanged(
        job_id=job_id, reason="Resources", message="8 GPUs busy", producer="scheduler/0", **kw
    )


def test_a_forged_decision_of_another_role_cannot_depose_the_real_leader():
    # given job a running and job b pending, placed by the scheduler's leader of epoch 1
    ledger = folded(*job("a"), placed("a", leader_epoch=1), *job("b"))
    # when a PreemptionRequested arrives on its own subject claiming to be the scheduler's,
    # with an epoch no real leader will ever reach
    forged = preempt("a", producer="scheduler/x", leader_epoch=2**62)
    refusal = admit(ledger, 9, forged, "gl.preempt.a.PreemptionRequested")
    # then it is refused, naming both roles, and changes nothing
    assert refusal is not None and refusal.code == "WrongProducer"
    assert "preemption" in refusal.message and "scheduler/x" in refusal.message
    assert ledger.jobs["a"].state == "running" and ledger.intake.leader_epochs == {"scheduler": 1}
    # and the real scheduler's next decision is still folded
    assert admit(ledger, 10, pending("b", leader_epoch=1)) is None
    assert ledger.intake.stale_decisions == 0 and ledger.jobs["b"].reason == "Resources"


def test_a_placement_by_a_node_agent_is_refused_and_raises_for_the_host():
    ledger = folded(*job("a"))
    bad = placed("a", producer="node-agent/n1")
    refusal = admit(ledger, 9, bad, "gl.sched.a.GangPlaced")
    assert refusal is not None and refusal.code == "WrongProducer"
    assert "scheduler" in refusal.message and "node-agent/n1" in refusal.message
    assert ledger.jobs["a"].state == "pending"
    # the services fold with `apply`: it raises, so the host dead-letters it with the reason
    with pytest.raises(Refused, match="WrongProducer"):
        ledger.apply(9, bad)


def test_decisions_and_node_facts_of_the_right_role_are_accepted():
    ledger = folded(*job("a"), *job("b"))
    assert admit(ledger, 9, placed("a", leader_epoch=3)) is None
    assert admit(ledger, 10, preempt("a", producer="preemption/1", leader_epoch=7)) is None
    assert ledger.jobs["a"].state == "preempting"
    # epochs are per role of the event type: preemption's 7 does not make scheduler's 3 stale
    assert ledger.intake.leader_epochs == {"scheduler": 3, "preemption": 7}
    assert admit(ledger, 11, pending("b", leader_epoch=3)) is None
    assert ledger.intake.stale_decisions == 0
    started = ev.MemberStarted(job_id="a", allocation_id="a#1", rank=0, node="n1")
    for seq, producer in enumerate(("node-agent/n1", "node-agent/sim"), 12):
        assert admit(ledger, seq, msgspec.structs.replace(started, producer=producer)) is None


def test_a_node_fact_must_come_from_a_node_agent_and_a_decision_must_name_its_producer():
    ledger = folded(*job("a"), placed("a"))
    started = ev.MemberStarted(job_id="a", allocation_id="a#1", rank=0, node="n1")
    for producer in ("scheduler/0", "", "node-agentx/n1", "cli"):
        refusal = admit(ledger, 9, msgspec.structs.replace(started, producer=producer))
        assert refusal is not None and refusal.code == "WrongProducer", producer
    anonymous = admit(ledger, 9, ev.NodeLost(node="n1", leader_epoch=2**62))
    assert anonymous is not None and anonymous.code == "WrongProducer"
    assert not ledger.nodes["n1"].lost and ledger.intake.leader_epochs == {}


def test_clients_and_configuration_name_any_producer():
    ledger = Ledger()
    spec = ev.JobSpec(job_id="x", tenant="org/a", resources=ev.Resources(gpus=1))
    assert (
        admit(ledger, 1, ev.JobSubmitted(job=spec, producer="my-ci"), "gl.submit.org/a.x") is None
    )
    assert admit(ledger, 2, ev.TenantConfigured(tenant="org/a", producer="")) is None
    assert (
        admit(ledger, 3, ev.JobCancelled(job_id="x", tenant="org/a", producer="anything")) is None
    )


def test_operator_inputs_of_scenarios_and_imports_replay_but_carry_no_epoch():
    # a scenario's `node_down` and an importer's node inventory are recorded as the facts
    # they stand for; they are no leader's decision, so they may not carry an epoch
    ledger = folded()
    node = ev.NodeInfo(name="n2", cpu_milli=1000, memory_mib=1000, gpus=(gpu(0),))
    assert admit(ledger, 2, ev.NodeRegistered(node=node, producer="import/alibaba-openb")) is None
    assert admit(ledger, 3, ev.NodeLost(node="n2", producer="scenario")) is None
    assert ledger.nodes["n2"].lost
    forged = admit(ledger, 4, ev.NodeLost(node="n1", producer="scenario", leader_epoch=2**62))
    assert forged is not None and forged.code == "WrongProducer" and "epoch" in forged.message
    assert not ledger.nodes["n1"].lost and ledger.intake.leader_epochs == {}
