"""Imported Slurm history keeps arrays, time limits and dependencies: given the fixture dump
`tests/fixtures/slurm/sacct-dependencies.txt` (a job, an array `3002_[0-3%2]` waiting for it,
a training run that hit its `Timelimit`, and pending jobs with `afternotok` / `afterany` on
the array), when it is imported and replayed, then the array is one array job with its
`%2`, every `Timelimit` is a `time_limit_s`, every `Dependency` a `depends_on`, and the
replay honours all three (at most 2 tasks at once, `timeout`, starts after dependencies)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("deps") / "slurm.jsonl"
    summary = import_slurm(
        FIXTURES / "sacct-dependencies.txt", out, sinfo=FIXTURES / "sinfo.txt"
    ).summary
    log = list(read_log(out))
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    return summary, log, jobs


def deps(job):
    return [(d.job, d.on) for d in job.depends_on or ()]


def test_arrays_time_limits_and_dependencies_are_kept(imported):
    summary, _, jobs = imported
    assert sorted(jobs) == ["3001", "3002", "3005", "3006", "3007"]
    assert jobs["3002"].array == ev.ArraySpec(
        count=4, max_running=2, first=0, durations_s=(1200, 600, None, None)
    )
    limits = {j: jobs[j].time_limit_s for j in sorted(jobs)}
    assert limits == {"3001": 3600, "3002": 1800, "3005": 7200, "3006": 1200, "3007": 600}
    assert jobs["3001"].depends_on is msgspec.UNSET
    assert deps(jobs["3002"]) == [("3001", "succeeded")]
    assert deps(jobs["3005"]) == [("3001", "succeeded")]
    assert deps(jobs["3006"]) == [("3005", "failed")]
    assert deps(jobs["3007"]) == [("3002", "finished")]  # `3002_*` names the array
    assert (summary["arrays"], summary["array_tasks"], summary["dependencies_dropped"]) == (1, 4, 0)


def test_the_replay_honours_them(imported):
    _, log, _ = imported
    sim = replay(external_inputs(log))
    placed = {}
    for _, _, e in sim.log:
        if isinstance(e, ev.GangPlaced):
            placed.setdefault(e.job_id, e.occurred_at_ms)
    ended = {
        e.job_id: e.occurred_at_ms
        for _, _, e in sim.log
        if isinstance(e, (ev.GangCompleted, ev.GangFailed))
    }
    states = {j: str(r.state) for j, r in sim.ledger.jobs.items()}
    # the array and the training start when prep has succeeded, not before
    tasks = sorted(placed[j] for j in placed if j.startswith("3002@"))
    assert len(tasks) == 4 and tasks[0] == ended["3001"] and placed["3005"] == ended["3001"]
    # at most 2 tasks at once (`%2`)
    running = []
    for _, _, e in sim.log:
        if isinstance(e, ev.GangPlaced) and e.job_id.startswith("3002@"):
            running.append(e.job_id)
            assert len(running) <= 2
        elif isinstance(e, (ev.GangCompleted, ev.GangFailed)) and e.job_id in running:
            running.remove(e.job_id)
    # the training reaches its recorded limit again: timeout; afternotok then runs
    assert states["3005"] == "timeout"
    assert placed["3006"] >= ended["3005"]
    # afterany on the array: after its last task
    last_task = max(ended[j] for j in ended if j.startswith("3002@"))
    assert placed["3007"] >= last_task
    # the tasks that ran keep their run times; the pending ones had none and run to their
    # 30-minute limit, so the array ends failed (a task timed out), as the docs say
    assert [states[f"3002@{i}"] for i in range(4)] == [
        "completed",
        "completed",
        "timeout",
        "timeout",
    ]
    assert states["3002"] == "failed"
