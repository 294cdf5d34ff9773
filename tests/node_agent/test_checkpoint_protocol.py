"""The job-side checkpoint helper and the pure exit-code table."""

import json
import signal

import pytest

from gpuledger.services.node_agent import checkpoint
from gpuledger.services.node_agent.outcome import classify_exit


@pytest.fixture
def job_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULEDGER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("GPULEDGER_ALLOCATION_ID", "alloc-7")
    monkeypatch.setenv("GPULEDGER_JOB_ID", "job-7")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("GPULEDGER_RESUME", "1")
    return tmp_path / "ckpt"


def test_acknowledge_writes_a_complete_marker_for_this_rank(job_env):
    marker = checkpoint.acknowledge(120, "/ckpt/step-120.pt")
    assert marker == job_env / "gpuledger-ack-rank3.json"
    data = json.loads(marker.read_text())
    assert (data["step"], data["path"], data["rank"]) == (120, "/ckpt/step-120.pt", 3)
    assert (data["allocation_id"], data["job_id"]) == ("alloc-7", "job-7")
    assert sorted(p.name for p in job_env.iterdir()) == ["gpuledger-ack-rank3.json"]


def test_latest_returns_the_last_acknowledgement(job_env):
    assert checkpoint.latest() is None
    checkpoint.acknowledge(10)
    checkpoint.acknowledge(20)
    assert checkpoint.latest()["step"] == 20


def test_resuming_and_checkpoint_dir_come_from_the_environment(job_env, monkeypatch):
    assert checkpoint.resuming() and checkpoint.checkpoint_dir() == job_env
    monkeypatch.setenv("GPULEDGER_RESUME", "0")
    assert not checkpoint.resuming()
    monkeypatch.delenv("GPULEDGER_CHECKPOINT_DIR")
    with pytest.raises(RuntimeError, match="GPULEDGER_CHECKPOINT_DIR"):
        checkpoint.checkpoint_dir()


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_acknowledge_refuses_steps_that_are_not_non_negative_ints(job_env, bad):
    with pytest.raises(ValueError):
        checkpoint.acknowledge(bad)


def test_a_torn_or_foreign_marker_reads_as_none(tmp_path):
    (tmp_path / "m.json").write_text('{"step": ')
    assert checkpoint.read_marker(tmp_path / "m.json") is None
    (tmp_path / "m.json").write_text('{"step": "x"}')
    assert checkpoint.read_marker(tmp_path / "m.json") is None
    assert checkpoint.read_marker(tmp_path / "missing.json") is None


def test_install_sigterm_handler_calls_back(monkeypatch):
    calls = []
    previous = signal.getsignal(signal.SIGTERM)
    try:
        checkpoint.install_sigterm_handler(lambda: calls.append("term"))
        signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert calls == ["term"]


@pytest.mark.parametrize(
    ("exit_code", "signalled", "requested", "acked", "outcome"),
    [
        (0, None, False, False, "completed"),
        (0, None, True, True, "preempted"),
        (0, None, True, False, "completed"),
        (75, None, True, False, "preempted"),
        (75, None, True, True, "preempted"),
        (75, None, False, False, "failed"),
        (None, 9, True, False, "preempted"),
        (None, 15, True, False, "preempted"),
        (143, None, True, False, "preempted"),
        (None, 9, False, False, "failed"),
        (137, None, False, False, "failed"),
        (1, None, False, False, "failed"),
        (1, None, True, False, "failed"),
        (1, None, True, True, "preempted"),
        (None, None, True, False, "preempted"),
        (None, None, False, False, "failed"),
    ],
)
def test_exit_classification_table(exit_code, signalled, requested, acked, outcome):
    assert classify_exit(exit_code, signalled, requested, acked) == outcome
