"""The real node agent: the pure decider (effects and events) and the shell over real
processes of examples/train_tiny.py (no bus: the test folds the agent's output itself)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.events import MemberPlacement
from gpuledger.services.domain.inputs.configfile import node_infos
from gpuledger.services.node_agent.agent import RealAgent, allocation_id_of, executor_id
from gpuledger.services.node_agent.decider import (
    AgentDecider,
    AgentState,
    Checkpoint,
    Kill,
    Observed,
    Start,
)
from tests.fold.story import ADMISSION
from tests.services.given import cluster, stamped, submitted
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "examples" / "train_tiny.py")
DOC = {"cluster": {"nodes": [{"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4}]}}
N1 = node_infos(DOC)[0]


def e(cls, key: str, at: int = 0, **fields):
    return stamped(cls, key, at, **fields)  # produced by the role that produces `cls`


def admitted(job_id: str, at: int = 0) -> ev.JobAdmitted:
    return e(ev.JobAdmitted, job_id, at, job_id=job_id, tenant="t", **ADMISSION)


def placed(job_id: str, attempt: int = 1, at: int = 0, resume_step=None, nodes=("n1", "n2")):
    members = tuple(MemberPlacement(rank=r, node=n, gpus=(0, 1, 2, 3)) for r, n in enumerate(nodes))
    return e(
        ev.GangPlaced,
        f"{job_id}#{attempt}",
        at,
        job_id=job_id,
        allocation_id=f"{job_id}#{attempt}",
        tenant="t",
        members=members,
        resume_step=resume_step,
    )


def preempt(job_id: str, attempt: int = 1, at: int = 0, deadline: int = 5000):
    return e(
        ev.PreemptionRequested,
        f"p-{job_id}#{attempt}",
        at,
        job_id=job_id,
        allocation_id=f"{job_id}#{attempt}",
        beneficiary="other",
        reason="Priority",
        deadline_ms=deadline,
    )


def job(
    job_id: str = "j1",
    steps: int = 100000,
    step_time: float = 0.01,
    replicas: int = 2,
    args: tuple[str, ...] = (),
    **extra,
):
    return submitted(
        id=job_id,
        tenant="t",
        gpus=4,
        replicas=replicas,
        command=[
            sys.executable,
            TRAIN,
            "--steps",
            str(steps),
            "--step-time",
            str(step_time),
            *args,
        ],
        **extra,
    )


def fold(service, state, events):
    for event in events:
        state = service.evolve(state, state.last_seq + 1, event)
    return state


def base(service, *extra):
    state = service.initial_state()
    state.node = state.node or N1
    return fold(service, state, [*cluster(*DOC["cluster"]["nodes"]), *extra])


# ---------------------------------------------------------------------- pure decider


def test_starts_its_own_members_only_and_reports_them():
    core = AgentDecider("n1")
    state = base(core, job(), admitted("j1"), placed("j1"))
    effects = core.plan(state, 1000)
    assert effects == [Start("j1#1", "j1", 0, 2, job().job.command, (0, 1, 2, 3), None, False)]
    state.members[("j1#1", 0)] = Observed(started=True, running=True)
    out = core.decide(state, 1000)
    assert [type(x).__name__ for x in out] == ["MemberStarted"]
    assert (out[0].allocation_id, out[0].rank, out[0].node) == ("j1#1", 0, "n1")
    state = fold(core, state, out)
    assert core.plan(state, 2000) == [] and core.decide(state, 2000) == []


def test_a_silent_control_plane_never_stops_work():
    core = AgentDecider("n1", heartbeat_s=0)
    state = base(core, job(), admitted("j1"), placed("j1"))
    state.members[("j1#1", 0)] = Observed(started=True, running=True)
    state = fold(core, state, core.decide(state, 1000))
    for hours in (1, 10, 1000):
        assert core.plan(state, hours * 3_600_000) == []
    assert core.next_wakeup_ms(state, 5000) == 5000 + core.poll_ms  # it keeps polling


def test_preemption_signals_then_kills_at_the_deadline():
    core = AgentDecider("n1")
    state = base(core, job(), admitted("j1"), placed("j1"), preempt("j1", at=1000, deadline=6000))
    state.members[("j1#1", 0)] = Observed(started=True, running=True)
    assert core.plan(state, 1000) == [Checkpoint("j1#1", 0)]
    state.members[("j1#1", 0)].checkpoint_requested = True
    assert core.plan(state, 5999) == []
    assert core.plan(state, 6000) == [Kill("j1#1", 0)]


def test_ack_and_outcome_become_events_in_order():
    core = AgentDecider("n1")
    state = base(core, job(), admitted("j1"), placed("j1"), preempt("j1", at=1000))
    state.members[("j1#1", 0)] = Observed(
        started=True, ack_step=42, outcome="preempted", exit_code=75
    )
    out = core.decide(state, 1500)
    kinds = [type(x).__name__ for x in out]
    assert kinds == ["MemberStarted", "MemberCheckpointed", "MemberExited"]
    assert out[1].step == 42 and out[2].outcome == "preempted" and out[2].exit_code == 75
    state = fold(core, state, out)
    assert core.decide(state, 1600) == []


def test_members_never_started_exit_without_running():
    core = AgentDecider("n1")
    state = base(core, job(), admitted("j1"), placed("j1"), preempt("j1", at=10))
    assert core.plan(state, 20) == []
    out = core.decide(state, 20)
    assert [(type(x).__name__, x.outcome) for x in out] == [("MemberExited", "preempted")]
    state = base(
        core,
        submitted(id="nocmd", tenant="t", gpus=4),
        admitted("nocmd"),
        placed("nocmd", nodes=("n1",)),
    )
    assert [x.outcome for x in core.decide(state, 5)] == ["failed"]


def test_member_of_an_ended_allocation_is_stopped_after_the_grace():
    core = AgentDecider("n1")
    evicted = e(ev.GangEvicted, "j1#1", 2000, job_id="j1", allocation_id="j1#1", reason="NodeLost")
    state = base(core, job(), admitted("j1"), placed("j1"), evicted)
    state.members[("j1#1", 0)] = Observed(started=True, running=True)
    grace = state.ledger.config.grace_ms(None, "train")
    assert core.plan(state, 2001) == [Checkpoint("j1#1", 0)]
    state.members[("j1#1", 0)].checkpoint_requested = True
    assert core.plan(state, 2000 + grace) == [Kill("j1#1", 0)]
    assert not [x for x in core.decide(state, 2001) if isinstance(x, ev.MemberStarted)]


def test_registers_heartbeats_and_reregisters_on_health_change():
    core = AgentDecider("n1", heartbeat_s=5)
    state = AgentState(node=N1)
    out = core.decide(state, 1000)
    assert [type(x).__name__ for x in out] == ["NodeRegistered"] and out[0].heartbeat_s == 5
    assert out[0].simulated is False
    state = fold(core, state, out)
    assert core.decide(state, 5999) == [] and core.next_wakeup_ms(state, 1000) == 6000
    beat = core.decide(state, 6000)
    assert [type(x).__name__ for x in beat] == ["NodeHeartbeat"]
    state = fold(core, state, beat)
    sick = msgspec.structs.replace(N1.gpus[2], healthy=False)
    state.node = msgspec.structs.replace(N1, gpus=(*N1.gpus[:2], sick, N1.gpus[3]))
    again = core.decide(state, 7000)
    assert [type(x).__name__ for x in again] == ["NodeRegistered"]
    assert not again[0].node.gpus[2].healthy


def test_executor_ids_are_file_safe_and_reversible():
    for alloc in ("j1#1", "a+b@c=d,e~f#10", "x-y_z:1#3"):
        assert "#" not in executor_id(alloc) and allocation_id_of(executor_id(alloc)) == alloc


# ---------------------------------------------------------------------- shell, real processes


def step_of(agent, state, now_ms):
    """What the host does each time it decides: the effects hook, then the pure decide."""
    agent.effects(state, now_ms)
    return agent.decide(state, now_ms)


def run_until(agent, state, now, pred, timeout=8.0):
    """Decide and fold (as the host does) until `pred(all events so far)` holds."""
    seen: list[ev.Event] = []
    box = [state]

    def step() -> bool:
        out = step_of(agent, box[0], now())
        box[0] = fold(agent, box[0], out)
        seen.extend(out)
        return pred(seen)

    try:
        eventually(step, timeout, "the agent's events")
    except AssertionError as exc:
        raise AssertionError(f"not reached; events: {[type(x).__name__ for x in seen]}") from exc
    return box[0], seen


def clock():
    return time.time_ns() // 1_000_000


@pytest.fixture
def agents():
    made: list[RealAgent] = []
    yield made
    for a in made:
        for m in a.executor.members():
            if m.running:
                a.executor.kill(m.allocation_id, m.rank)


def real_agent(agents, tmp_path, **kw) -> RealAgent:
    agent = RealAgent("n1", tmp_path / "work", declared=N1, use_nvml=False, poll_ms=50, **kw)
    agents.append(agent)
    return agent


def kinds(events):
    return [type(x).__name__ for x in events]


def test_real_member_checkpoints_on_preemption_and_resumes_from_its_step(agents, tmp_path):
    agent = real_agent(agents, tmp_path)
    spec = job(replicas=1, args=("--save-every", "20"))
    state = base(agent, spec, admitted("j1"), placed("j1", nodes=("n1",)))
    # it makes progress: it saves step 20 on its own
    state, seen = run_until(
        agent, state, clock, lambda s: any(getattr(x, "step", 0) >= 20 for x in s)
    )
    state = fold(agent, state, [preempt("j1", at=clock(), deadline=clock() + 5000)])
    state, seen = run_until(agent, state, clock, lambda s: "MemberExited" in kinds(s))
    ck = [x for x in seen if isinstance(x, ev.MemberCheckpointed)][-1]
    exited = [x for x in seen if isinstance(x, ev.MemberExited)][0]
    assert exited.outcome == "preempted" and exited.exit_code == 75 and ck.step > 20
    # the scheduler's side: evict, requeue at the step, place again with resume
    state = fold(
        agent,
        state,
        [
            e(
                ev.GangEvicted,
                "j1#1",
                clock(),
                job_id="j1",
                allocation_id="j1#1",
                reason="Priority",
                checkpointed=True,
            ),
            e(
                ev.GangRequeued,
                "j1#1",
                clock(),
                job_id="j1",
                after_allocation_id="j1#1",
                resume_step=ck.step,
            ),
            placed("j1", attempt=2, at=clock(), resume_step=ck.step, nodes=("n1",)),
        ],
    )
    state, seen = run_until(agent, state, clock, lambda s: "MemberStarted" in kinds(s))
    log = tmp_path / "work" / "n1" / "logs" / f"{executor_id('j1#2')}-rank0.log"
    eventually(
        lambda: f"starting at step {ck.step}" in (log.read_text() if log.exists() else ""),
        5,
        f"the member's log to say it resumes at step {ck.step}",
    )
    assert ("j1#1", 0) not in state.members  # forgotten once its exit was folded


def test_deadline_kill_of_a_member_that_ignores_the_signal(agents, tmp_path):
    agent = real_agent(agents, tmp_path)
    spec = submitted(
        id="stubborn",
        tenant="t",
        gpus=4,
        command=[
            sys.executable,
            TRAIN,
            "--steps",
            "100000",
            "--step-time",
            "0.01",
            "--ignore-sigterm",
        ],
    )
    state = base(agent, spec, admitted("stubborn"), placed("stubborn", nodes=("n1",)))
    state, _ = run_until(agent, state, clock, lambda s: "MemberStarted" in kinds(s))
    now = clock()
    state = fold(agent, state, [preempt("stubborn", at=now, deadline=now + 300)])
    state, seen = run_until(agent, state, clock, lambda s: "MemberExited" in kinds(s))
    exited = [x for x in seen if isinstance(x, ev.MemberExited)][0]
    assert exited.outcome == "preempted" and exited.exit_code is None
    assert not [x for x in seen if isinstance(x, ev.MemberCheckpointed)]


def test_agent_restart_adopts_running_members_without_starting_twice(agents, tmp_path):
    first = real_agent(agents, tmp_path)
    history = [
        *cluster(*DOC["cluster"]["nodes"]),
        job(replicas=1),
        admitted("j1"),
        placed("j1", nodes=("n1",)),
    ]
    state = fold(first, first.initial_state(), history)
    state, seen = run_until(first, state, clock, lambda s: "MemberStarted" in kinds(s))
    history += seen
    pid = first.executor.members()[0].pid
    # a new agent process over the same work dir refolds the log
    second = real_agent(agents, tmp_path)
    state2 = fold(second, second.initial_state(), history)
    assert second.core.plan(state2, clock()) == []
    members = second.executor.members()
    assert len(members) == 1 and members[0].pid == pid and members[0].adopted
    out = step_of(second, state2, clock())
    assert not [x for x in out if isinstance(x, (ev.MemberStarted, ev.MemberExited))]
    # and it can still stop what it adopted
    now = clock()
    state2 = fold(second, state2, [preempt("j1", at=now, deadline=now + 5000)])
    state2, seen = run_until(second, state2, clock, lambda s: "MemberExited" in kinds(s))
    assert [x.outcome for x in seen if isinstance(x, ev.MemberExited)] == ["preempted"]


def test_cancel_stops_the_member_as_cancelled(agents, tmp_path):
    agent = real_agent(agents, tmp_path)
    state = base(agent, job(replicas=1), admitted("j1"), placed("j1", nodes=("n1",)))
    state, _ = run_until(agent, state, clock, lambda s: "MemberStarted" in kinds(s))
    state = fold(agent, state, [e(ev.JobCancelled, "j1", clock(), job_id="j1", tenant="t")])
    state, seen = run_until(agent, state, clock, lambda s: "MemberExited" in kinds(s))
    assert [x.outcome for x in seen if isinstance(x, ev.MemberExited)] == ["cancelled"]


def test_declared_gpus_when_nvml_is_unavailable(tmp_path):
    agent = RealAgent("n1", tmp_path, declared=N1, use_nvml=True, nvml=_NoNvml())
    assert agent.node == N1 and agent.sampler is None
    with pytest.raises(RuntimeError, match="not declared"):
        RealAgent("nX", tmp_path, declared=None, use_nvml=True, nvml=_NoNvml())


class _NoNvml:
    class NVMLError(Exception):
        pass

    def nvmlInit(self):  # noqa: N802
        raise self.NVMLError("NVML Shared Library Not Found")

    nvmlInitWithFlags = nvmlInit  # noqa: N815

    def nvmlShutdown(self):  # noqa: N802
        pass


# ---------------------------------------------------------------------- elastic gangs


def elastic_placed(job_id="el", members=3):
    ms = tuple(MemberPlacement(rank=r, node="n1", gpus=(r,)) for r in range(members))
    return e(
        ev.GangPlaced,
        f"{job_id}#1",
        0,
        job_id=job_id,
        allocation_id=f"{job_id}#1",
        tenant="t",
        members=ms,
    )


def elastic_job(job_id="el"):
    return submitted(
        id=job_id,
        tenant="t",
        gpus=1,
        replicas=3,
        min_members=2,
        command=[sys.executable, TRAIN, "--steps", "100000", "--step-time", "0.01"],
    )


def shrink(job_id="el", ranks=(2,), at=0, deadline=5000):
    return e(
        ev.PreemptionRequested,
        f"p-{job_id}",
        at,
        job_id=job_id,
        allocation_id=f"{job_id}#1",
        beneficiary="other",
        reason="Priority",
        deadline_ms=deadline,
        ranks=ranks,
    )


def resized(job_id="el", at=0):
    ms = tuple(MemberPlacement(rank=r, node="n1", gpus=(r,)) for r in range(2))
    return e(
        ev.GangResized,
        f"r-{job_id}",
        at,
        job_id=job_id,
        allocation_id=f"{job_id}#1",
        members=ms,
        from_members=3,
        to_members=2,
        reason="Priority",
        preempted_by="other",
        checkpointed=True,
    )


def shrinking_gang(core: AgentDecider) -> AgentState:
    """Given the 3-member elastic gang el#1 on n1, its members observed running with world
    size 3, asked at 1 s to give up rank 2."""
    state = base(core, elastic_job(), admitted("el"), elastic_placed(), shrink(at=1000))
    for r in range(3):
        state.members[("el#1", r)] = Observed(started=True, running=True, world_size=3)
    return state


def rank_two_exited() -> ev.MemberExited:
    """Rank 2 of el#1 exited preempted at 1.5 s."""
    return e(
        ev.MemberExited,
        "x2",
        1500,
        job_id="el",
        allocation_id="el#1",
        rank=2,
        node="n1",
        outcome="preempted",
    )


def test_a_partial_preemption_signals_only_the_members_it_names():
    core = AgentDecider("n1")
    state = shrinking_gang(core)
    assert core.plan(state, 1000) == [Checkpoint("el#1", 2)]


def test_after_a_resize_the_staying_members_are_told_their_new_world_size():
    from gpuledger.services.node_agent.decider import Resize

    core = AgentDecider("n1")
    state = shrinking_gang(core)
    exited = rank_two_exited()
    state = fold(core, state, [exited, resized(at=1600)])
    state.members.pop(("el#1", 2))
    assert core.plan(state, 1700) == [Resize("el#1", "el", 0, 2), Resize("el#1", "el", 1, 2)]
    for r in range(2):
        state.members[("el#1", r)].world_size = 2
    assert core.plan(state, 1800) == []


def test_real_members_of_a_shrunk_gang_learn_their_world_size_and_run_on(agents, tmp_path):
    # given a real 3-member elastic gang (min 2) running on n1
    agent = real_agent(agents, tmp_path)
    state = base(agent, elastic_job(), admitted("el"), elastic_placed())
    state, _ = run_until(agent, state, clock, lambda s: kinds(s).count("MemberStarted") == 3)
    logs = tmp_path / "work" / "n1" / "logs"

    def log(r: int) -> str:
        path = logs / f"{executor_id('el#1')}-rank{r}.log"
        return path.read_text() if path.exists() else ""

    # (each member says so once its SIGTERM handler is installed)
    eventually(lambda: all("starting at step" in log(r) for r in range(3)), 30, "members up")
    # when rank 2 is asked to leave, then it alone checkpoints and exits
    state = fold(agent, state, [shrink(at=clock(), deadline=clock() + 5000)])
    state, seen = run_until(agent, state, clock, lambda s: "MemberExited" in kinds(s))
    (exited,) = [x for x in seen if isinstance(x, ev.MemberExited)]
    assert (exited.rank, exited.outcome, exited.exit_code) == (2, "preempted", 75)
    # when the gang is resized to 2, then ranks 0 and 1 read world size 2 and keep running
    state = fold(agent, state, [resized(at=clock())])
    others_exited: list[ev.MemberExited] = []

    def world_size_two() -> bool:
        nonlocal state
        out = step_of(agent, state, clock())
        state = fold(agent, state, out)
        others_exited.extend(x for x in out if isinstance(x, ev.MemberExited))
        return bool(others_exited) or all(f"rank {r} world size now 2" in log(r) for r in (0, 1))

    eventually(world_size_two, 30, "ranks 0 and 1 to read world size 2")
    assert others_exited == []
    ckdir = agent.checkpoint_root / "el"
    assert (ckdir / "rank0" / "gpuledger-world-size").read_text() == "2\n"
    assert {m.rank for m in agent.executor.members() if m.running} == {0, 1}


def test_a_rank_grown_back_before_its_old_exit_was_forgotten_starts_afresh():
    from gpuledger.services.node_agent.decider import Forget, Resize

    core = AgentDecider("n1")
    state = shrinking_gang(core)
    exited = rank_two_exited()
    # rank 2 exited (observed), the gang shrank to 2 and grew back to 3 before a Forget
    state.members[("el#1", 2)] = Observed(started=True, outcome="preempted", world_size=3)
    grown = e(
        ev.GangResized,
        "g-el",
        2000,
        job_id="el",
        allocation_id="el#1",
        members=tuple(MemberPlacement(rank=r, node="n1", gpus=(r,)) for r in range(3)),
        from_members=2,
        to_members=3,
        reason="Grow",
    )
    state = fold(core, state, [exited, resized(at=1600), grown])
    # then the old observation is forgotten, never reported again
    assert [x for x in core.decide(state, 2100) if getattr(x, "rank", None) == 2] == []
    assert core.plan(state, 2100) == [Forget("el#1", 2)]
    del state.members[("el#1", 2)]
    # and the new rank 2 starts with world size 3, the others are told 3
    effects = core.plan(state, 2200)
    (start,) = [x for x in effects if isinstance(x, Start)]
    assert (start.rank, start.world_size, start.incarnation) == (2, 3, 2000)
    assert [x for x in effects if isinstance(x, Resize)] == []  # ranks 0, 1 were told 3
