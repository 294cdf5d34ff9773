"""Supervision of `gpuledger up`'s services: crashes are restarted with back-off and reported
once, children that cannot start fail fast with their own error, stale reads are named."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from structlog.testing import capture_logs

from gpuledger.services.runtime.processes import ServiceProcesses
from gpuledger.services.runtime.supervisor import (
    READY_CPU_S,
    Backoff,
    ProcessSupervisor,
    StartFailed,
    StatusBoard,
    cpu_seconds,
    exit_text,
    last_error_line,
    staleness,
    start_overdue,
    supervise_task,
)
from tests.waiting import eventually_async


async def test_a_crashing_in_process_service_is_restarted_and_each_crash_is_one_line():
    board = StatusBoard(None, "nats://x", "in-process")
    st = board.add("scheduler", "scheduler")
    stop = asyncio.Event()
    runs = []

    async def service() -> None:
        runs.append(time.monotonic())
        if len(runs) <= 2:
            raise RuntimeError(f"boom {len(runs)}")
        await stop.wait()

    with capture_logs() as logs:
        task = asyncio.create_task(supervise_task(st, service, stop, Backoff(0.05, 1.0)))
        await eventually_async(lambda: len(runs) >= 3, 10, "the third run")
        assert st.state == "running" and st.restarts == 2
        assert st.last_error == "RuntimeError: boom 2"
        stop.set()
        await asyncio.wait_for(task, 5)
    crashes = [entry for entry in logs if entry["event"] == "service.crashed"]
    assert [(c["service"], c["restart"], c["error"]) for c in crashes] == [
        ("scheduler", 1, "RuntimeError: boom 1"),
        ("scheduler", 2, "RuntimeError: boom 2"),
    ]
    assert [c["retry_in_s"] for c in crashes] == [0.05, 0.1]  # the back-off doubles
    assert runs[1] - runs[0] >= 0.05 and runs[2] - runs[1] >= 0.1  # and is waited out
    assert st.state == "stopped"


def test_backoff_doubles_up_to_its_cap_and_resets_after_a_stable_run():
    b = Backoff(1.0, 4.0, stable_s=60)
    assert [b.after_run(0.1) for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    assert b.after_run(61) == 1.0


def test_the_childs_own_error_line_is_found_in_its_output():
    assert last_error_line("info\nerror: cfg.yaml: no such file\n") == "cfg.yaml: no such file"
    record = json.dumps(
        {
            "event": "host.crashed",
            "level": "error",
            "exception": "Traceback...\nValueError: bad gpus",
        }
    )
    assert (
        last_error_line(f'{{"event": "x", "level": "info"}}\n{record}\n')
        == "host.crashed: ValueError: bad gpus"
    )
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nOverflowError: int too big\n'
    assert last_error_line(tb) == "OverflowError: int too big"
    assert last_error_line('{"event": "host.folded", "level": "info"}\n') is None
    assert exit_text(-9) == "killed by SIGKILL" and exit_text(2) == "exited with code 2"


def _status(stream: int, state: str, behind_since_ms: int | None, now: int) -> dict:
    return {
        "updated_at_ms": now,
        "up_pid": os.getpid(),
        "stream_last_seq": stream,
        "services": [
            {
                "name": "projector",
                "role": "projector",
                "state": state,
                "behind_since_ms": behind_since_ms,
                "detail": "db held by PID 7 for 8s" if state == "blocked" else None,
            }
        ],
    }


def test_a_read_behind_a_blocked_projector_says_it_is_stale():
    now = 1_000_000
    warning = staleness(_status(340, "blocked", now - 8000, now), 120, now=now)
    assert warning == (
        "projection is stale: at seq 120, the stream is at 340 (220 events behind "
        "for 8s; projector blocked: db held by PID 7 for 8s)"
    )


def test_a_current_read_or_a_projector_briefly_behind_is_not_called_stale():
    now = 1_000_000
    assert staleness(_status(340, "running", None, now), 340, now=now) is None
    assert staleness(_status(340, "running", now - 500, now), 338, now=now) is None
    assert staleness(_status(340, "blocked", now - 500, now), 338, now=now) is None
    assert staleness(_status(340, "running", now - 5000, now), 338, now=now) is not None
    assert staleness(_status(340, "restarting", now - 500, now), 338, now=now) is not None
    assert staleness(None, 5) is None
    old = _status(340, "blocked", now - 8000, now - 60_000)  # `up` gone: nothing to compare
    assert staleness(old, 120, now=now) is None


def test_a_child_starved_of_cpu_is_given_time_and_a_child_that_had_its_cpu_is_not():
    """Given the 30 s ready timeout: a child past it that has used less than READY_CPU_S of
    CPU (a host whose cores are all busy) is not overdue yet; one that had its CPU, one whose
    CPU time is unknown, or one past ten times the timeout (blocked, using none) is."""
    assert not start_overdue(29.0, 12.0, 30)
    assert not start_overdue(120.0, 0.6, 30)  # starved: 0.5 % of a core
    assert start_overdue(31.0, READY_CPU_S, 30)
    assert start_overdue(31.0, None, 30)
    assert start_overdue(301.0, 0.0, 30)


def test_the_cpu_time_of_a_process_is_read_and_a_gone_one_is_unknown():
    start = time.process_time()
    while time.process_time() - start < 0.2:
        pass
    used = cpu_seconds(os.getpid())
    assert used is not None and used >= 0.2
    assert cpu_seconds(2**22 + 7) is None  # beyond pid_max's default: no such process


def quota_supervised(nats_server, tmp_path):
    """Given the quota service as a supervised child process (not started yet): the status
    board and the supervisor."""
    board = StatusBoard(tmp_path / "status.json", nats_server.url, "processes")
    sup = ProcessSupervisor(
        ServiceProcesses(nats_server.access(), log_dir=tmp_path), board, tmp_path / "hb"
    )
    sup.add("quota")  # leader lease always on, TTL 10 s
    return board, sup


@pytest.mark.integration
async def test_a_child_with_a_bad_config_fails_fast_with_its_own_error(nats_server, tmp_path):
    board = StatusBoard(tmp_path / "status.json", nats_server.url, "processes")
    procs = ServiceProcesses(
        nats_server.access(), config=tmp_path / "missing.yaml", log_dir=tmp_path
    )
    sup = ProcessSupervisor(procs, board, tmp_path / "hb", ready_timeout_s=30)
    sup.add("admission")
    with pytest.raises(StartFailed) as info:
        await sup.start()
    sup.stop()
    # it failed on the child's exit (code 2), not by waiting out the 30 s ready timeout
    assert info.value.name == "admission" and info.value.code == 2
    assert info.value.error.startswith("exited with code 2: ")
    assert str(tmp_path / "missing.yaml") in info.value.error
    row = json.loads((tmp_path / "status.json").read_text())["services"][0]
    assert (row["state"], row["last_error"]) == ("failed", info.value.error)


@pytest.mark.integration
async def test_a_killed_child_is_restarted_once_and_reported(nats_server, bus, tmp_path):
    board, sup = quota_supervised(nats_server, tmp_path)
    await sup.start()
    try:
        first = sup.children["quota"].proc
        first.kill()
        first.wait(5)
        st = board.services["quota"]

        def restarted() -> bool:
            sup.poll()
            return st.restarts == 1 and st.state == "running"

        with capture_logs() as logs:
            await eventually_async(restarted, 20, "quota restarted", interval_s=0.1)
        assert (st.state, st.restarts, st.last_error) == ("running", 1, "killed by SIGKILL")
        assert st.pid == sup.children["quota"].proc.pid != first.pid
        assert [e["service"] for e in logs if e["event"] == "service.crashed"] == ["quota"]
    finally:
        sup.stop()


@pytest.mark.integration
async def test_a_child_stopped_with_sigterm_is_a_planned_restart_logged_at_info(
    nats_server, bus, tmp_path
):
    board, sup = quota_supervised(nats_server, tmp_path)
    await sup.start()
    try:
        first = sup.children["quota"].proc
        first.terminate()  # SIGTERM: the service stops cleanly, exit 0
        assert first.wait(15) == 0

        def restarted():
            sup.poll()
            st = board.services["quota"]
            return st if (st.restarts, st.state) == (1, "running") else None

        with capture_logs() as logs:
            st = await eventually_async(restarted, 20, "quota restarted", interval_s=0.1)
        assert (st.state, st.restarts, st.last_error) == ("running", 1, None)
        assert [(e["event"], e["log_level"], e["exit"]) for e in logs if "service" in e] == [
            ("service.restarting", "info", "exited with code 0")
        ]
    finally:
        sup.stop()


@pytest.mark.integration
async def test_a_killed_leader_restarted_by_its_supervisor_leads_again_before_its_ttl(
    nats_server, bus, tmp_path
):
    board = StatusBoard(tmp_path / "status.json", nats_server.url, "processes")
    sup = ProcessSupervisor(
        ServiceProcesses(nats_server.access(), log_dir=tmp_path), board, tmp_path / "hb"
    )
    # a TTL longer than a restart takes on a loaded host (back-off 1 s, then start-up): the
    # lease is still there to take back (with 10 s, a slow start found it expired)
    sup.add("quota", "--leader-lease", "120")
    await sup.start()
    try:
        st = board.services["quota"]

        def leading() -> bool:
            sup.poll()
            return st.state == "running" and st.lease == "leader"

        await eventually_async(leading, 15, "quota leading", interval_s=0.1)
        first = sup.children["quota"].proc
        first.kill()  # dies holding the lease: no release
        first.wait(5)
        st.lease = None
        await eventually_async(leading, 30, "quota leading again", interval_s=0.1)
        assert st.restarts == 1 and sup.children["quota"].proc.pid != first.pid
        # it took its own lease back at once (same holder id), not after waiting out the TTL
        log = (tmp_path / "quota.log").read_text()
        assert "lease.reclaimed" in log and "lease.taken_over" not in log
    finally:
        sup.stop()


def test_behind_since_is_when_the_stream_first_held_an_event_the_service_has_not_folded():
    board = StatusBoard(None, "nats://x", "in-process")
    st = board.add("projector", "projector")
    for at, seq in ((1000, 10), (2000, 20), (3000, 30), (4000, 30)):
        board.saw_stream(seq, at_ms=at)
    st.folded_seq = 30
    assert board.document()["services"][0]["behind_since_ms"] is None
    st.folded_seq = 15  # steady traffic: it misses what the stream held since t=2000
    row = board.document()["services"][0]
    assert (row["behind_since_ms"], row["lag"]) == (2000, 15)
