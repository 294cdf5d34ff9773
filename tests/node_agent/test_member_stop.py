"""One member-stop rule (services/domain/policy/member_stop.py) for both agents: the simulated agent
and the real agent's decider stop a member for the same reasons, with the same outcome, and
the real agent's kill deadline is the rule's deadline."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.policy.member_stop import (
    CANCELLED,
    PREEMPTED,
    grace_ms,
    member_stop,
)
from gpuledger.services.node_agent.decider import AgentDecider, Checkpoint, Kill, Observed
from gpuledger.services.node_agent.simulated import SimulatedAgent
from tests.node_agent.test_agent import N1, admitted, base, e, fold, job, placed, preempt


def cancelled(job_id: str = "j1", at: int = 0) -> ev.JobCancelled:
    return e(ev.JobCancelled, f"c-{job_id}", at, job_id=job_id, tenant="t")


def started(rank: int = 0, at: int = 0) -> ev.MemberStarted:
    return e(
        ev.MemberStarted,
        f"j1#1/{rank}",
        at,
        job_id="j1",
        allocation_id="j1#1",
        rank=rank,
        node="n1",
    )


GIVEN = (job(replicas=1), admitted("j1"), placed("j1", nodes=("n1",)))


def test_the_rule_in_order_of_precedence():
    ledger = fold(AgentDecider("n1"), base(AgentDecider("n1"), *GIVEN), []).ledger
    rec, j = ledger.allocations["j1#1"], ledger.jobs["j1"]
    assert member_stop(ledger, rec, j, 0) is None  # nothing asks it to stop: it runs on
    preempted = fold(
        AgentDecider("n1"), base(AgentDecider("n1"), *GIVEN), [preempt("j1", at=10, deadline=900)]
    ).ledger
    stop = member_stop(preempted, preempted.allocations["j1#1"], preempted.jobs["j1"], 0)
    save = preempted.jobs["j1"].spec.checkpoint.save_s * 1000
    assert (stop.kind, stop.outcome, stop.asked_ms, stop.save_ms, stop.deadline_ms) == (
        PREEMPTED,
        "preempted",
        10,
        save,
        900,
    )
    both = fold(
        AgentDecider("n1"),
        base(AgentDecider("n1"), *GIVEN),
        [preempt("j1", at=10, deadline=900), cancelled(at=20)],
    ).ledger
    stop = member_stop(both, both.allocations["j1#1"], both.jobs["j1"], 0, cancelled_ms=20)
    grace = grace_ms(both, both.jobs["j1"])
    assert (stop.kind, stop.outcome, stop.save_ms, stop.deadline_ms) == (
        CANCELLED,
        "cancelled",
        0,
        20 + grace,
    )  # a cancel wins over the preemption: nothing to save, the job's grace from the cancel


def test_a_cancelled_running_member_stops_by_the_same_rule_in_both_agents():
    # the simulated agent: nothing to save, so it exits `cancelled` at once
    sim = SimulatedAgent((N1,))
    sim_state = base(AgentDecider("n1"), *GIVEN, started(at=5), cancelled(at=50)).ledger
    out = [x for x in sim.decide(sim_state, 50) if isinstance(x, ev.MemberExited)]
    assert [(x.rank, x.outcome) for x in out] == [(0, "cancelled")]
    # the real agent: the checkpoint signal at once, SIGKILL at the rule's deadline
    core = AgentDecider("n1")
    state = base(core, *GIVEN, started(at=5))
    state.members[("j1#1", 0)] = Observed(started=True, running=True, job_id="j1")
    state = fold(core, state, [cancelled(at=50)])
    stop = member_stop(
        state.ledger,
        state.ledger.allocations["j1#1"],
        state.ledger.jobs["j1"],
        0,
        cancelled_ms=state.cancelled_ms["j1"],
    )
    assert stop.outcome == "cancelled"
    assert core.plan(state, 50) == [Checkpoint("j1#1", 0)]
    state.members[("j1#1", 0)].checkpoint_requested = True
    assert core.plan(state, stop.deadline_ms - 1) == []
    assert core.plan(state, stop.deadline_ms) == [Kill("j1#1", 0)]
