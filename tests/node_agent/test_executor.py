"""The executor with real subprocesses running examples/train_tiny.py (each test < 2 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from gpuledger.services.node_agent.executor import (
    CheckpointAcknowledged,
    Executor,
    MemberLaunch,
    MemberOutcome,
    MemberRecord,
    member_env,
    member_key,
    process_start_time,
)
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train_tiny.py"
LONG = ("--steps", "100000", "--step-time", "0.01")


def launch(
    tmp_path: Path,
    *args: str,
    alloc: str = "alloc-1",
    rank: int = 0,
    resume: bool = False,
    command: list[str] | str | None = None,
) -> MemberLaunch:
    return MemberLaunch(
        allocation_id=alloc,
        job_id="job-1",
        rank=rank,
        world_size=2,
        command=command if command is not None else [sys.executable, str(TRAIN), *args],
        visible_devices=("GPU-aaaa", "MIG-bbbb"),
        checkpoint_dir=tmp_path / "ckpt",
        resume=resume,
        log_dir=tmp_path / "logs",
        env={"PYTHONPATH": str(ROOT)},
    )


wait_until = eventually


def log_of(tmp_path: Path, alloc: str = "alloc-1", rank: int = 0) -> str:
    path = tmp_path / "logs" / f"{alloc}-rank{rank}.log"
    return path.read_text() if path.exists() else ""


@pytest.fixture
def state_dir(tmp_path):
    """The agent's state directory; kills whatever a test left running."""
    path = tmp_path / "state"
    yield path
    for record_file in path.glob("*.json"):
        record = msgspec.json.decode(record_file.read_bytes(), type=MemberRecord)
        if record.pid and process_start_time(record.pid) == record.proc_start:
            os.killpg(record.pid, signal.SIGKILL)


async def test_a_member_that_runs_to_the_end_is_completed(tmp_path, state_dir):
    ex = Executor(state_dir)
    member = ex.start(launch(tmp_path, "--steps", "5", "--step-time", "0.005"))
    assert member.running and member.pid
    outcome = await ex.wait("alloc-1", 0, timeout=5)
    assert outcome == MemberOutcome("alloc-1", 0, 0, None, "completed", None)
    assert "train_tiny: done at step 5" in log_of(tmp_path)
    assert ex.poll() == (outcome,)  # reported once
    assert ex.poll() == ()


async def test_the_member_environment_names_its_devices_rank_and_checkpoint(tmp_path, state_dir):
    names = [
        "CUDA_VISIBLE_DEVICES",
        "GPULEDGER_JOB_ID",
        "GPULEDGER_ALLOCATION_ID",
        "RANK",
        "WORLD_SIZE",
        "GPULEDGER_CHECKPOINT_DIR",
        "GPULEDGER_RESUME",
        "PYTHONPATH",
    ]
    code = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    ex = Executor(state_dir)
    ex.start(
        launch(tmp_path, alloc="env-1", rank=1, resume=True, command=[sys.executable, "-c", code])
    )
    assert (await ex.wait("env-1", 1, timeout=5)).outcome == "completed"
    env = json.loads(log_of(tmp_path, "env-1", 1))
    assert env == {
        "CUDA_VISIBLE_DEVICES": "GPU-aaaa,MIG-bbbb",
        "GPULEDGER_JOB_ID": "job-1",
        "GPULEDGER_ALLOCATION_ID": "env-1",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "GPULEDGER_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "GPULEDGER_RESUME": "1",
        "PYTHONPATH": str(ROOT),
    }


async def test_sigterm_leads_to_an_acknowledged_checkpoint_and_preempted(tmp_path, state_dir):
    # Given a running member
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, *LONG))
    wait_until(lambda: "starting at step 0" in log_of(tmp_path))
    # When the agent requests a checkpoint (SIGTERM; the member saves after its next step)
    assert ex.request_checkpoint("alloc-1", 0)
    outcome = await ex.wait("alloc-1", 0, timeout=5)
    # Then the job saved, acknowledged and exited 75: preempted with its step
    assert (outcome.outcome, outcome.exit_code, outcome.signal) == ("preempted", 75, None)
    assert outcome.checkpoint_step and outcome.checkpoint_step > 0
    assert ex.checkpoint_acknowledged("alloc-1", 0) == outcome.checkpoint_step
    # and poll reports the acknowledgement (-> MemberCheckpointed) before the exit
    events = ex.poll()
    assert [type(e) for e in events] == [CheckpointAcknowledged, MemberOutcome]
    assert events[0].step == outcome.checkpoint_step
    assert events[0].path == str(tmp_path / "ckpt" / "train_tiny-rank0.json")


async def test_periodic_acknowledgements_are_reported_while_running(tmp_path, state_dir):
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, "--steps", "100000", "--step-time", "0.002", "--save-every", "5"))
    seen: list[int] = []

    def two_acks_seen() -> bool:
        seen.extend(e.step for e in ex.poll() if isinstance(e, CheckpointAcknowledged))
        return len(seen) >= 2

    wait_until(two_acks_seen)
    assert seen == sorted(set(seen)) and all(s % 5 == 0 for s in seen)
    ex.kill("alloc-1", 0)
    outcome = await ex.wait("alloc-1", 0, timeout=5)
    assert (outcome.outcome, outcome.signal) == ("failed", signal.SIGKILL)  # nobody asked


async def test_a_job_that_ignores_sigterm_is_killed_at_the_deadline_and_loses_work(
    tmp_path, state_dir
):
    # Given a job that ignores SIGTERM
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, *LONG, "--ignore-sigterm"))
    wait_until(lambda: "starting at step 0" in log_of(tmp_path))
    # When the checkpoint is requested, the SIGTERM is discarded as it is sent (the process
    # ignores it), so it is still running, and the executor (driven by polls, no timer of its
    # own) kills nothing on its own
    assert ex.request_checkpoint("alloc-1", 0)
    assert ex.poll() == () and ex.members()[0].running
    # Then an explicit kill ends it: preempted, no checkpoint (all work lost)
    assert ex.kill("alloc-1", 0)
    outcome = await ex.wait("alloc-1", 0, timeout=5)
    assert outcome == MemberOutcome("alloc-1", 0, None, signal.SIGKILL, "preempted", None)
    assert ex.kill("alloc-1", 0) is False  # already gone


async def test_a_failing_command_is_failed(tmp_path, state_dir):
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, "--steps", "10", "--step-time", "0.001", "--fail-at-step", "3"))
    ex.start(launch(tmp_path, alloc="missing", command=["/nonexistent/trainer"]))
    ex.start(launch(tmp_path, alloc="shell", command="exit 3"))
    assert await ex.wait("alloc-1", 0, timeout=5) == MemberOutcome(
        "alloc-1", 0, 1, None, "failed", None
    )
    assert (await ex.wait("missing", 0, timeout=5)).exit_code == 127
    assert (await ex.wait("shell", 0, timeout=5)).exit_code == 3


async def test_starting_the_same_member_twice_starts_one_process(tmp_path, state_dir):
    ex = Executor(state_dir)
    first = ex.start(launch(tmp_path, *LONG))
    again = ex.start(launch(tmp_path, *LONG))
    assert again.pid == first.pid
    wait_until(lambda: "starting at step 0" in log_of(tmp_path))
    assert log_of(tmp_path).count("starting at step") == 1
    ex.kill("alloc-1", 0)
    await ex.wait("alloc-1", 0, timeout=5)
    # even after it ended, the same allocation/rank is not started again
    assert ex.start(launch(tmp_path, *LONG)).pid == first.pid
    assert not ex.members()[0].running


AGENT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from gpuledger.services.node_agent.executor import Executor, MemberLaunch
    tmp = Path(sys.argv[1])
    Executor(tmp / "state").start(MemberLaunch(
        allocation_id="alloc-1", job_id="job-1", rank=0, world_size=1,
        command=[sys.executable, sys.argv[2], "--steps", "100000", "--step-time", "0.01"],
        visible_devices=("GPU-aaaa",), checkpoint_dir=tmp / "ckpt", resume=False,
        log_dir=tmp / "logs", env={"PYTHONPATH": sys.argv[3]}))
""")


async def test_a_restarted_agent_adopts_a_running_member_and_does_not_start_it_twice(
    tmp_path, state_dir
):
    # Given an agent process that started a member and then died
    subprocess.run(
        [sys.executable, "-c", AGENT, str(tmp_path), str(TRAIN), str(ROOT)],
        cwd=ROOT,
        check=True,
        timeout=10,
    )
    wait_until(lambda: "starting at step 0" in log_of(tmp_path))
    # When a new agent adopts the state directory
    ex = Executor(state_dir)
    (adopted,) = ex.adopt()
    # Then the member is still running, adopted, and a start of it is a no-op
    assert adopted.running and adopted.adopted and adopted.allocation_id == "alloc-1"
    assert ex.start(launch(tmp_path, *LONG)).pid == adopted.pid
    assert log_of(tmp_path).count("starting at step") == 1
    # and the new agent can still checkpoint it and learns its real exit status
    assert ex.request_checkpoint("alloc-1", 0)
    outcome = await ex.wait("alloc-1", 0, timeout=5)
    assert (outcome.outcome, outcome.exit_code) == ("preempted", 75)
    assert outcome.checkpoint_step == ex.checkpoint_acknowledged("alloc-1", 0) > 0


async def test_a_member_that_ended_while_no_agent_watched_is_reported_on_adoption(
    tmp_path, state_dir
):
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, "--steps", "3", "--step-time", "0.001"))
    await ex.wait("alloc-1", 0, timeout=5)
    later = Executor(state_dir)
    assert later.adopt() == ()
    assert later.poll() == (MemberOutcome("alloc-1", 0, 0, None, "completed", None),)


def test_a_start_interrupted_before_the_process_existed_is_failed_not_restarted(
    tmp_path, state_dir
):
    # Given a record written just before an agent crash, with no process behind it
    state_dir.mkdir(parents=True)
    record = MemberRecord(
        "alloc-9",
        "job-9",
        0,
        1,
        str(tmp_path / "ckpt"),
        str(tmp_path / "logs" / "alloc-9-rank0.log"),
        str(state_dir / "alloc-9-rank0.exit"),
        started_at=1.0,
    )
    (state_dir / "alloc-9-rank0.json").write_bytes(msgspec.json.encode(record))
    # When a new agent adopts and is asked to start that member again
    ex = Executor(state_dir)
    assert ex.adopt() == ()
    member = ex.start(launch(tmp_path, alloc="alloc-9"))
    # Then nothing was started and the member is reported failed with an unknown exit
    assert member.pid is None and not member.running
    assert ex.poll() == (MemberOutcome("alloc-9", 0, None, None, "failed", None),)
    assert not (tmp_path / "logs" / "alloc-9-rank0.log").exists()


async def test_a_resumed_member_continues_from_its_checkpoint(tmp_path, state_dir):
    # Given a member preempted after acknowledging step k
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, *LONG))
    wait_until(lambda: "starting at step 0" in log_of(tmp_path))
    ex.request_checkpoint("alloc-1", 0)
    k = (await ex.wait("alloc-1", 0, timeout=5)).checkpoint_step
    assert k
    # When the job is placed again (new allocation) with resume=1
    ex.start(
        launch(
            tmp_path, "--steps", str(k + 3), "--step-time", "0.001", alloc="alloc-2", resume=True
        )
    )
    outcome = await ex.wait("alloc-2", 0, timeout=5)
    # Then it starts at step k and completes 3 steps later
    assert f"starting at step {k}" in log_of(tmp_path, "alloc-2")
    assert f"done at step {k + 3}" in log_of(tmp_path, "alloc-2")
    assert outcome.outcome == "completed"
    # and the first allocation's acknowledgement is not taken for the second's
    assert ex.checkpoint_acknowledged("alloc-2", 0) is None


async def test_forget_drops_ended_members_but_refuses_running_ones(tmp_path, state_dir):
    ex = Executor(state_dir)
    ex.start(launch(tmp_path, *LONG))
    with pytest.raises(RuntimeError, match="still running"):
        ex.forget("alloc-1", 0)
    ex.kill("alloc-1", 0)
    await ex.wait("alloc-1", 0, timeout=5)
    ex.forget("alloc-1", 0)
    assert ex.members() == () and list(state_dir.iterdir()) == []


@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
async def test_dropping_the_executor_leaves_members_running(tmp_path, state_dir):
    ex = Executor(state_dir)
    pid = ex.start(launch(tmp_path, *LONG)).pid
    del ex
    # it keeps running: it gets as far as saying so, after the executor is gone
    wait_until(lambda: "starting at step 0" in log_of(tmp_path))
    assert process_start_time(pid) is not None
    later = Executor(state_dir)
    assert [m.pid for m in later.adopt()] == [pid]


def test_member_keys_refuse_unsafe_ids():
    assert member_key("a-1_b.c:d", 2) == "a-1_b.c:d-rank2"
    for bad in ["", "../x", "a/b", ".hidden", "a b"]:
        with pytest.raises(ValueError):
            member_key(bad, 0)
    with pytest.raises(ValueError):
        member_key("a", -1)


def test_our_variables_win_over_the_launch_env_and_the_base_env(tmp_path):
    spec = launch(tmp_path)
    spec.env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
    spec.env["EXTRA"] = "yes"
    env = member_env(spec, {"CUDA_VISIBLE_DEVICES": "all", "HOME": "/root", "RANK": "9"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa,MIG-bbbb"
    assert (env["RANK"], env["HOME"], env["EXTRA"]) == ("0", "/root", "yes")


def test_a_member_sees_the_job_id_its_tenant_submitted(tmp_path):
    """Job ids are per tenant: a later tenant's job of a taken id runs under its tenant key,
    and its member still reads the id it submitted."""
    from gpuledger.events.ids import tenant_job_key

    key = tenant_job_key("team-b", "train-1")
    import dataclasses

    env = member_env(dataclasses.replace(launch(tmp_path), job_id=key), {})
    assert env["GPULEDGER_JOB_ID"] == "train-1"
