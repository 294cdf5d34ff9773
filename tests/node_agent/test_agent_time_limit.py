"""The real agent at a time limit (issue 31): given a member running a real process, when the
scheduler's `TimeLimitReached` is folded, then the agent asks it to checkpoint (SIGTERM), the
process saves and exits, and the scheduler ends the job `timeout` with the saved step."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.node_agent.agent import executor_id
from gpuledger.services.scheduler.decider import Scheduler
from tests.node_agent.test_agent import (
    DOC,
    admitted,
    base,
    clock,
    e,
    fold,
    job,
    kinds,
    placed,
    real_agent,
    run_until,
)
from tests.services.given import cluster
from tests.waiting import eventually


@pytest.fixture
def agents():
    made = []
    yield made
    for a in made:  # stop what a failing test left running
        for m in a.executor.members():
            if m.running:
                a.executor.kill(m.allocation_id, m.rank)


def test_a_real_member_checkpoints_at_its_time_limit_and_the_job_ends_timeout(agents, tmp_path):
    agent = real_agent(agents, tmp_path)
    spec = job(replicas=1, time_limit="1h")
    state = base(agent, spec, admitted("j1"), placed("j1", nodes=("n1",)))
    state, seen = run_until(agent, state, clock, lambda s: "MemberStarted" in kinds(s))
    started = next(x for x in seen if isinstance(x, ev.MemberStarted))
    wait_for_log(tmp_path, "starting at step 0")  # its SIGTERM handler is installed
    now = clock()
    reached = e(
        ev.TimeLimitReached,
        "j1#1",
        now,
        job_id="j1",
        allocation_id="j1#1",
        time_limit_s=3600,
        started_ms=started.occurred_at_ms,
        deadline_ms=now + 10_000,
    )
    state = fold(agent, state, [reached])
    state, seen = run_until(agent, state, clock, lambda s: "MemberExited" in kinds(s))
    ck = [x for x in seen if isinstance(x, ev.MemberCheckpointed)][-1]
    (exited,) = [x for x in seen if isinstance(x, ev.MemberExited)]
    assert exited.outcome == "preempted" and exited.exit_code == 75  # saved, then exited
    assert exited.occurred_at_ms < now + 10_000  # before the kill deadline
    # the scheduler, folding the same facts, ends the job `timeout` with that step
    ledger = Ledger()
    log = [*cluster(*DOC["cluster"]["nodes"]), spec, admitted("j1"), placed("j1", nodes=("n1",))]
    log += [started, reached, ck, exited]
    for seq, event in enumerate(log, 1):
        ledger.apply(seq, event)
    out = Scheduler().decide(ledger, clock())
    (failed,) = [x for x in out if isinstance(x, ev.GangFailed)]
    assert failed.reason == "TimeLimit" and f"checkpointed at step {ck.step}" in failed.message
    for seq, event in enumerate(out, len(log) + 1):
        ledger.apply(seq, event)
    assert str(ledger.jobs["j1"].state) == "timeout"


def wait_for_log(tmp_path, text: str, timeout: float = 30.0) -> None:
    log = tmp_path / "work" / "n1" / "logs" / f"{executor_id('j1#1')}-rank0.log"
    eventually(lambda: text in (log.read_text() if log.exists() else ""), timeout, repr(text))
