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
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.importers.slurm_sacct import parse_dependency, parse_timelimit
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
    assert jobs["1010"].time_limit_s == 3600  # the array (and its pending tasks) keep theirs
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


DEPENDENCIES = {
    "1030": "afterok:1001",
    "1032": "afterany:1010_*",
    "1031": "afternotok:1030(unfulfilled),singleton",
    "1002": "afterok:9999",
    "1005": "after:1001+10?afterok:1002",
}


@pytest.mark.parametrize(
    "text, deps, dropped",
    [
        ("afterok:12:13", [("12", "succeeded"), ("13", "succeeded")], []),
        ("afternotok:12,afterany:13_4", [("12", "failed"), ("13_4", "finished")], []),
        ("after:12+30(unfulfilled)", [("12", "started")], []),
        ("singleton,afterok:7", [("7", "succeeded")], ["singleton"]),
        ("afterok:1?afterok:2", [], ["afterok:1?afterok:2 (OR-list)"]),
        ("(null)", [], []),
    ],
)
def test_slurm_dependency_expressions(text, deps, dropped):
    assert parse_dependency(text) == (deps, dropped)


def test_slurm_dependencies_of_the_dump_are_kept_and_replayed(tmp_path):
    lines = (FIXTURES / "slurm" / "sacct.txt").read_text().splitlines()
    out_lines = [lines[0] + "|Dependency"]
    for line in lines[1:]:
        job = line.split("|", 1)[0]
        out_lines.append(line + "|" + DEPENDENCIES.get(job, "") if line.strip() else line)
    dump = tmp_path / "sacct.txt"
    dump.write_text("\n".join(out_lines) + "\n")
    out = tmp_path / "slurm.jsonl"
    result = import_slurm(dump, out, sinfo=FIXTURES / "slurm" / "sinfo.txt")
    log = list(read_log(out))
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}

    def deps(job_id):
        return [(d.job, d.on) for d in jobs[job_id].depends_on or ()]

    assert deps("1030") == [("1001", "succeeded")]
    # a dependency on an array job (`1010_*`) names the array
    assert deps("1032") == [("1010", "finished")]
    assert deps("1031") == [("1030", "failed")]  # `singleton` dropped
    assert deps("1002") == []  # 9999 is not in the dump
    assert deps("1005") == []  # an OR-list is not kept
    assert result.summary["dependencies_dropped"] == 3
    assert jobs["1001"].depends_on is msgspec.UNSET
    # the replay honours them: 1030 starts when 1001 has completed, not at its recorded start
    sim = replay(external_inputs(log))
    done = {e.job_id: e.occurred_at_ms for _, _, e in sim.log if isinstance(e, ev.GangCompleted)}
    placed = {e.job_id: e.occurred_at_ms for _, _, e in sim.log if isinstance(e, ev.GangPlaced)}
    assert placed["1030"] == done["1001"]


def test_a_what_if_overlay_keeps_the_recorded_time_limits_and_dependency_policy():
    from gpuledger.replay.overlay import apply_overlays

    sim_log = replay_example("time-limits.yaml")
    inputs, _ = apply_overlays(external_inputs(sim_log), ["policy.default_grace_s=10"])
    again = replay(inputs)
    cls = again.ledger.config.classes["train"]
    assert (cls.default_time_limit_s, cls.max_time_limit_s) == (7200, 86400)
    assert str(again.ledger.jobs["long-run"].state) == "timeout"
    (reached,) = [
        e for _, _, e in again.log if isinstance(e, ev.TimeLimitReached) and e.job_id == "long-run"
    ]
    assert reached.deadline_ms - reached.occurred_at_ms == 10_000  # the overlaid grace


def replay_example(name: str):
    from gpuledger.replay.scenario import load
    from gpuledger.replay.simulator import simulate

    return simulate(load(FIXTURES.parent.parent / "examples" / name)).log


def test_an_imported_id_holding_the_task_separator_is_skipped_with_its_reason():
    from gpuledger.replay.importers.common import ImportLog, ObservedJob

    log = ImportLog("import/test")
    job = ObservedJob(
        job_id="user@host-1", tenant="t", priority_class="normal",
        resources=ev.Resources(gpus=1), submit_ms=0,
    )  # fmt: skip
    assert log.add_job(job, "trace.csv:2") is False
    (reason,) = log.skips.counts
    assert "'@' is reserved for the tasks of array jobs" in reason
