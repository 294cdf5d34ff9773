"""Array jobs (issue 31) through the simulator: given `array: {count, max_running}` (or
Slurm's `A-B%N`), when the scheduler places tasks, then each task is a job `<array>@<i>` of
its own, at most `max_running` run at once (`ArrayTaskLimit`), the array is one line with its
tasks counted, and cancelling the array stops every task."""

from pathlib import Path

import pytest

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec
from tests.replay.simlog import logged, projected

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_example_runs_tasks_in_waves_of_max_running():
    sim = simulate(load(EXAMPLES / "arrays.yaml"), check=True)
    jobs = sim.ledger.jobs
    placed = {e.job_id: e.occurred_at_ms // 1000 for e in logged(sim, ev.GangPlaced)}
    assert {t: placed[f"sweep@{t}"] for t in range(10)} == {
        0: 0, 1: 0, 2: 0, 3: 600, 4: 600, 5: 600, 6: 1200, 7: 1200, 8: 1200, 9: 1800,
    }  # fmt: skip
    assert {t: placed[f"grid@{t}"] for t in range(1, 5)} == {1: 0, 2: 0, 3: 900, 4: 900}
    assert "grid@0" not in jobs  # `1-4%2`: tasks 1 .. 4
    # each task is a job with its own state; the array ends when its last task has
    assert all(str(jobs[f"sweep@{t}"].state) == "completed" for t in range(10))
    sweep = jobs["sweep"]
    assert (str(sweep.state), sweep.finished_ms) == ("completed", 2_400_000)
    assert sweep.message == "10 tasks: 0 running, 0 pending, 10 completed"
    (capped, *_) = logged(sim, ev.PendingReasonChanged, job_id="sweep@3")
    assert capped.reason == "ArrayTaskLimit"


def scenario(*timeline):
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "timeline": list(timeline),
    }
    return simulate(from_document(doc), check=True)


def test_cancelling_the_array_stops_running_tasks_and_drops_pending_ones():
    sim = scenario(
        {"at": 0, "submit": {"id": "a", "tenant": "ml", "gpus": 2, "duration": "1h",
                             "array": {"count": 6, "max_running": 2}}},
        {"at": "10m", "cancel": "a", "tenant": "ml"},
    )  # fmt: skip
    jobs = sim.ledger.jobs
    assert {str(jobs[f"a@{t}"].state) for t in range(6)} == {"cancelled"}
    evicted = sorted(e.job_id for e in logged(sim, ev.GangEvicted, reason="Cancelled"))
    assert evicted == ["a@0", "a@1"]  # the two running; the other four never ran
    assert (str(jobs["a"].state), jobs["a"].finished_ms) == ("cancelled", 600_000)


def test_a_failed_task_fails_the_array_and_a_task_may_be_cancelled_alone():
    sim = scenario(
        {"at": 0, "submit": {"id": "a", "tenant": "ml", "gpus": 1, "duration": "1h",
                             "time_limit": "30m", "array": "0-2"}},
        {"at": 0, "submit": {"id": "b", "tenant": "ml", "gpus": 1, "duration": "10m",
                             "array": {"count": 2}}},
        {"at": "1m", "cancel": "b@1", "tenant": "ml"},
    )  # fmt: skip
    jobs = sim.ledger.jobs
    assert {str(jobs[f"a@{t}"].state) for t in range(3)} == {"timeout"}  # limits hold per task
    assert str(jobs["a"].state) == "failed"
    assert (str(jobs["b@0"].state), str(jobs["b@1"].state)) == ("completed", "cancelled")
    assert str(jobs["b"].state) == "cancelled"


def test_array_spellings_and_one_line_errors():
    spec = job_spec({"id": "s", "tenant": "t", "array": "0-99%8"})
    assert (spec.array.count, spec.array.max_running, spec.array.first) == (100, 8, 0)
    spec = job_spec({"id": "s", "tenant": "t", "array": {"count": 10, "first": 1}})
    assert (spec.array.count, spec.array.max_running, spec.array.first) == (10, None, 1)
    for bad, needle in (
        ("1,3,5", "array"),
        ("9-2", "the range ends before it starts"),
        ({"count": 0}, "array.count"),
        ({"count": 5, "max_running": 0}, "array.max_running"),
    ):
        with pytest.raises(JobFileError) as info:
            job_spec({"id": "s", "tenant": "t", "array": bad})
        assert len(info.value.problems) == 1 and needle in info.value.problems[0], bad


def test_user_ids_may_not_hold_the_task_separator():
    sim = scenario({"at": 0, "submit": {"id": "x", "tenant": "ml", "gpus": 1, "duration": "1m"}})
    from gpuledger.events import InvalidId, validate_job_id

    with pytest.raises(InvalidId) as info:
        validate_job_id("sweep@3")
    assert "'@' is reserved for the tasks of array jobs" in str(info.value)
    assert str(sim.ledger.jobs["x"].state) == "completed"


def test_jobs_shows_an_array_as_one_line_with_its_tasks_counted(tmp_path):
    from gpuledger.projections.queries import job_state_text, jobs_rows

    sim = simulate(load(EXAMPLES / "arrays.yaml"), until_ms=700_000)
    with projected(sim, tmp_path / "p.duckdb") as con:
        rows = {r["job_id"]: r for r in jobs_rows(con)}
        all_rows = {r["job_id"] for r in jobs_rows(con, tasks=True)}
        states = dict(con.execute("SELECT job_id, state FROM jobs").fetchall())
    assert sorted(rows) == ["grid", "sweep"]
    assert job_state_text(rows["sweep"]) == "running 3/10 done 3"
    assert job_state_text(rows["grid"]) == "running 2/4 done 0"
    assert "sweep@9" in all_rows
    ledger = sim.ledger.jobs
    assert {j: str(r.state) for j, r in ledger.items()} == states  # one state machine


def test_a_job_may_depend_on_an_array_or_on_one_task():
    sim = scenario(
        {"at": 0, "submit": {"id": "a", "tenant": "ml", "gpus": 2, "duration": "10m",
                             "array": {"count": 4, "max_running": 2}}},
        {"at": "1m", "submit": {"id": "after-all", "tenant": "ml", "gpus": 1, "duration": "1m",
                                "depends_on": [{"job": "a"}]}},
        {"at": "1m", "submit": {"id": "after-one", "tenant": "ml", "gpus": 1, "duration": "1m",
                                "depends_on": [{"job": "a@0", "on": "finished"}]}},
        {"at": "1m", "submit": {"id": "with-it", "tenant": "ml", "gpus": 1, "duration": "1m",
                                "depends_on": [{"job": "a", "on": "started"}]}},
    )  # fmt: skip
    placed = {e.job_id: e.occurred_at_ms for e in logged(sim, ev.GangPlaced)}
    assert placed["after-all"] == 1_200_000  # the array's last task ended at 20 min
    assert placed["after-one"] == 600_000  # a@0 ended at 10 min
    assert placed["with-it"] == 60_000  # its tasks were running when it came


def test_the_ui_queue_shows_an_array_as_one_line(tmp_path):
    from gpuledger.projections.ui.data import queue

    sim = simulate(load(EXAMPLES / "arrays.yaml"), until_ms=700_000)
    with projected(sim, tmp_path / "p.duckdb") as con:
        rows = queue(con, None)["rows"]
    lines = {r["job_id"]: r for r in rows}
    assert sorted(lines) == ["grid", "sweep"]
    assert lines["sweep"]["tasks_waiting"] == 4 and lines["sweep"]["reason"] == "ArrayTaskLimit"
    assert lines["sweep"]["message"].startswith("4 tasks waiting; sweep@6: array sweep runs")


def test_run_metrics_count_an_array_as_its_tasks():
    from gpuledger.replay.metrics import measure

    sim = simulate(load(EXAMPLES / "arrays.yaml"))
    m = measure(sim.log).metrics
    assert m["jobs"]["submitted"] == m["jobs"]["completed"] == 14  # 10 + 4 tasks
    assert m["never_placed_by_class"] == {"batch": 0}


def test_the_simulate_summary_counts_an_array_s_tasks_as_the_jobs():
    """Given examples/arrays.yaml (sweep: 10 tasks, grid: 4), when simulated, then the summary
    line counts 14 jobs in 2 arrays, not 16 (the arrays are not jobs once more)."""
    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    result = CliRunner().invoke(app, ["simulate", str(EXAMPLES / "arrays.yaml")])
    assert result.exit_code == 0, result.output
    assert "\n14 jobs (2 arrays) {'completed': 14};" in result.output
