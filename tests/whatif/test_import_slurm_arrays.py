"""Slurm arrays stay arrays (issue 31): given a synthetic sacct dump of one array (tasks
`2000_0` .. `2000_3` and the pending record `2000_[4-6%2]`, one task allocated another shape,
one cancelled before it started) and jobs depending on it, when imported, then the array is
an array job whose tasks keep their own run times, the odd task is a job of its own, the
observed baseline names the tasks as the replay does, and dependencies name the array."""

from __future__ import annotations

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay import observed as obs
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay
from tests.whatif.sacct_dump import ONE, T0_MS, import_dump
from tests.whatif.sacct_dump import at as _t

TWO = "billing=2,cpu=4,gres/gpu=2,mem=16G,node=1"


def row(job, raw, start, end, state, nodes="g1", req=ONE, alloc=ONE, dep="", submit=0):
    return (
        f"{job}|{raw}|hpo|u|physics|gpu|normal|1|{_t(submit)}|{_t(submit)}|"
        f"{'None' if start is None and end is not None else _t(start)}|{_t(end)}|00:00:00|"
        f"01:00:00|{state}|0:0|1|{nodes}|{req}|{alloc}|{dep}"
    )


ROWS = [
    row("2000_0", 2001, 60, 660, "COMPLETED"),
    row("2000_0.batch", "2001.batch", 60, 660, "COMPLETED"),
    row("2000_1", 2002, 60, 360, "COMPLETED"),
    row("2000_2", 2003, 60, 1260, "COMPLETED", alloc=TWO),  # allocated another shape
    row("2000_3", 2004, None, 120, "CANCELLED by 0", nodes="None assigned", alloc=""),
    row("2000_[4-6%2]", 2000, None, None, "PENDING", nodes="None assigned", alloc=""),
    row("2010", 2010, 2000, 2100, "COMPLETED", dep="afterok:2000", submit=30),
    row("2011", 2011, 400, 500, "COMPLETED", dep="afterany:2000_1", submit=30),
    row("2012", 2012, 1300, 1400, "COMPLETED", dep="afterok:2000_2", submit=30),
]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    summary, out = import_dump(tmp_path_factory.mktemp("arrays"), "Dependency", ROWS)
    log = list(read_log(out))
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    return summary, log, jobs, out


def test_an_array_is_one_array_job_and_a_task_of_another_shape_a_job_of_its_own(imported):
    summary, log, jobs, _ = imported
    assert sorted(jobs) == ["2000", "2000_2", "2000_3", "2000_4-6", "2010", "2011", "2012"]
    # the array's shape: its allocated tasks' (1 GPU); 2000_2 got 2 GPUs: a job of its own
    assert jobs["2000"].resources.gpus == 1 and jobs["2000_2"].resources.gpus == 2
    assert jobs["2000_2"].array is msgspec.UNSET and jobs["2000_2"].duration_s == 1200
    # tasks keep their own run times; the `%2` of the pending record is max_running
    assert jobs["2000"].array == ev.ArraySpec(
        count=2, max_running=2, first=0, durations_s=(600, 300)
    )
    # 2000_3 was cancelled before it started: it never ran, so it is a job of its own that
    # the replay cancels as it is submitted; the three pending tasks are array 2000_4-6
    assert jobs["2000_3"].array is msgspec.UNSET
    assert jobs["2000_4-6"].array == ev.ArraySpec(
        count=3, max_running=2, first=4, durations_s=(None, None, None)
    )
    cancels = [
        (e.job_id, e.occurred_at_ms - T0_MS) for _, _, e in log if isinstance(e, ev.JobCancelled)
    ]
    assert cancels == [("2000_3", 0)]  # cancelled while pending (End 120 s), at its submission
    # jobs count the tasks, as sacct lists them: 6 in arrays + 2000_2 + 3 jobs
    assert (summary["jobs"], summary["arrays"], summary["array_tasks"]) == (10, 2, 5)
    assert summary["array_tasks_split"] == 2 and summary["skipped_rows"] == 0


def test_a_dependency_on_an_array_names_the_array_and_one_on_a_task_the_task(imported):
    _, _, jobs, _ = imported

    def deps(job_id):
        return [(d.job, d.on) for d in jobs[job_id].depends_on or ()]

    # afterok:2000 waits for every task: the arrays and the task imported on its own
    assert deps("2010") == [
        ("2000", "succeeded"),
        ("2000_2", "succeeded"),
        ("2000_3", "succeeded"),
        ("2000_4-6", "succeeded"),
    ]
    assert deps("2011") == [("2000@1", "finished")]
    assert deps("2012") == [("2000_2", "succeeded")]


def test_the_observed_baseline_keeps_each_task_under_the_replay_s_id(imported):
    _, log, _, out = imported
    _, items = obs.read(obs.sidecar(out))
    seen = {o.job: o for o in items}
    sim = replay(external_inputs(log))
    assert not any(isinstance(e, ev.JobRejected) for _, _, e in sim.log)
    replayed = {j for j, r in sim.ledger.jobs.items() if not r.spec.array}
    assert set(seen) == replayed  # the observed column and the replay count the same jobs
    t1 = seen["2000@1"]
    assert (t1.start_ms - T0_MS, t1.end_ms - T0_MS, t1.state) == (60_000, 360_000, "COMPLETED")
    assert (seen["2000_3"].state, seen["2000_4-6@5"].state) == ("CANCELLED", "PENDING")
    # in the replay each task runs its own recorded time
    placed = {e.job_id: e.occurred_at_ms for _, _, e in sim.log if isinstance(e, ev.GangPlaced)}
    done = {e.job_id: e.occurred_at_ms for _, _, e in sim.log if isinstance(e, ev.GangCompleted)}
    assert done["2000@0"] - placed["2000@0"] == 600_000
    assert done["2000@1"] - placed["2000@1"] == 300_000
    # 2011 waited for task 1 only, not for the whole array
    assert placed["2011"] == done["2000@1"]
    # `%2`: two tasks at a time: 3 never ran (cancelled with the submission), 4 and 5 at
    # once, 6 when 4 is stopped at its 1 h limit, as Slurm stops it (OverTimeLimit 0;
    # pending tasks have no run time of their own)
    assert "2000_3" not in placed
    at = {i: (placed[f"2000_4-6@{i}"] - T0_MS) // 1000 for i in range(4, 7)}
    assert at == {4: 0, 5: 0, 6: 3600}
    capped = [
        e.reason
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == "2000_4-6@6"
    ]
    assert capped[-1] == "ArrayTaskLimit"


def test_an_array_whose_durations_do_not_match_its_tasks_is_refused(imported):
    _, log, _, _ = imported
    bad = []
    for seq, subject, e in log:
        if isinstance(e, ev.JobSubmitted) and e.job.job_id == "2000":
            arr = msgspec.structs.replace(e.job.array, durations_s=(600,))
            e = msgspec.structs.replace(e, job=msgspec.structs.replace(e.job, array=arr))
        bad.append((seq, subject, e))
    sim = replay(external_inputs(bad))
    (rejected,) = [e for _, _, e in sim.log if isinstance(e, ev.JobRejected) and e.job_id == "2000"]
    assert rejected.reason == "InvalidSpec"
    assert "array.durations_s: one per task (2), got 1" in rejected.message


def test_a_task_with_impossible_times_is_skipped_alone_and_its_array_kept(tmp_path):
    rows = [
        row("3000_0", 3001, 60, 120, "COMPLETED"),
        row("3000_1", 3002, 600, 300, "COMPLETED"),  # ends before it starts
        row("3000_2", 3003, 60, 90, "COMPLETED"),
    ]
    summary, out = import_dump(tmp_path, "Dependency", rows)
    assert summary["skipped"]["end time before start time"]["first"] == [f"{tmp_path}/sacct.txt:3"]
    arrays = {
        e.job.job_id: e.job.array for _, _, e in read_log(out) if isinstance(e, ev.JobSubmitted)
    }
    assert arrays == {
        "3000": ev.ArraySpec(count=1, first=0, durations_s=(60,)),
        "3000_2-2": ev.ArraySpec(count=1, first=2, durations_s=(30,)),
    }
