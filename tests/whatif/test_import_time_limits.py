"""Imported histories keep their time limits (issue 31): Slurm's `Timelimit` column and
Kubernetes' `activeDeadlineSeconds` become `time_limit_s`, and a replay stops a run at it
(a Slurm TIMEOUT replays as a run ending `timeout`)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.slurm import import_slurm, parse_timelimit
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("1-00:00:00", 86400),
        ("02:00:00", 7200),
        ("2-12", 2 * 86400 + 12 * 3600),
        ("1-02:30", 86400 + 2 * 3600 + 30 * 60),
        ("30:00", 1800),
        ("90", 5400),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
        ("00:00:00", None),
        ("soon", None),
    ],
)
def test_slurm_time_limits_in_every_spelling_sacct_prints(text, seconds):
    assert parse_timelimit(text) == seconds


def test_slurm_rows_keep_their_limits_and_a_timeout_replays_as_one(tmp_path):
    out = tmp_path / "slurm.jsonl"
    import_slurm(FIXTURES / "slurm" / "sacct.txt", out, sinfo=FIXTURES / "slurm" / "sinfo.txt")
    log = list(read_log(out))
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert jobs["1001"].time_limit_s == 86400  # 1-00:00:00
    assert jobs["1010_4"].time_limit_s == 3600  # a pending array task keeps its record's
    assert (jobs["1031"].time_limit_s, jobs["1031"].duration_s) == (7200, 7200)  # TIMEOUT
    # the replay: 1031 runs its 2 h and is stopped at its limit
    sim = replay(external_inputs(log))
    assert str(sim.ledger.jobs["1031"].state) == "timeout"
    assert sim.ledger.jobs["1031"].reason == "TimeLimit"
    assert str(sim.ledger.jobs["1001"].state) == "completed"  # 4 h of its 1 d


def test_kubernetes_active_deadline_seconds_is_the_time_limit(tmp_path):
    k8s = FIXTURES / "kubernetes"
    pods = json.loads((k8s / "pods.json").read_text())
    for pod in pods["items"]:
        if pod["metadata"]["name"] == "train-0-x8k2l":
            pod["spec"]["activeDeadlineSeconds"] = 7200
        if pod["metadata"]["name"] == "train-1-m3n4p":
            pod["spec"]["activeDeadlineSeconds"] = 3600
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    out = tmp_path / "k.jsonl"
    import_kubernetes(
        tmp_path / "pods.json",
        out,
        nodes=k8s / "nodes.json",
        events=k8s / "events.json",
        workloads=k8s / "workloads.json",
    )
    jobs = {e.job.job_id: e.job for _, _, e in read_log(out) if isinstance(e, ev.JobSubmitted)}
    assert jobs["train"].time_limit_s == 3600  # a gang of two pods: the shorter deadline
    assert jobs["llm"].time_limit_s is msgspec.UNSET
