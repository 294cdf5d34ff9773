"""Inputs sacct 22.05 prints only in `SubmitLine` and `Eligible` (issue 41): given a dump with
a `SubmitLine` column and no `Dependency` column (sacct 22.05 cannot print one), an array
that finished (its JobIDs carry no `%N`), and jobs eligible later than they were submitted
(`--begin`, a released hold), when imported and replayed, then dependencies and the array's
throttle come from the submit lines, and no job is placed before its eligible time."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.replay.importers.slurm_sacct import SubmitLine, parse_submit_line
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay
from tests.whatif.sacct_dump import ONE, T0_MS, import_dump
from tests.whatif.sacct_dump import at as _t


def row(job, start, end, state, line, eligible=0, submit=0):
    never = start is None and end is not None
    return (
        f"{job}|{job}|j|u|physics|gpu|normal|1|{_t(submit)}|{_t(eligible)}|"
        f"{'None' if never else _t(start)}|{_t(end)}|00:00:00|01:00:00|{state}|0:0|1|"
        f"{'None assigned' if never else 'g1'}|{ONE}|{'' if never else ONE}|{line}"
    )


ARRAY = "sbatch --job-name=sweep --array=0-3%2 --gres=gpu:1 --wrap=python sweep.py"
ROWS = [
    row("300", 0, 60, "FAILED", "sbatch --gres=gpu:1 prep.sh"),
    row("301", None, 70, "CANCELLED by 0", "sbatch -d afterok:300 --gres=gpu:1 train.sh"),
    row("302", 70, 170, "COMPLETED", "sbatch --dependency=afterany:300 eval.sh --fast", 60, 10),
    *(row(f"310_{i}", 0, 200, "COMPLETED", ARRAY) for i in range(4)),
    row("320", 650, 700, "COMPLETED", "sbatch --begin=now+600 --gres=gpu:1 later.sh", 600),
    row("321", 400, 500, "COMPLETED", "sbatch -H --gres=gpu:1 held.sh", 300),
    # cancelled at 200 s, before its --begin (eligible at 3600 s): never ran
    row("322", None, 200, "CANCELLED by 0", "sbatch --begin=now+3600 x.sh", 3600),
    # the submit line is the last column: a `|` of its own is no column separator
    row("330", 0, 10, "COMPLETED", "sbatch -d afterany:300 --wrap=cat a | sort"),
]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    summary, out = import_dump(tmp_path_factory.mktemp("submitline"), "SubmitLine", ROWS)
    log = list(read_log(out))
    return summary, log, replay(external_inputs(log))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("sbatch --array=0-9%2 -d afterok:12 job.sh -d x", SubmitLine("afterok:12", 2)),
        (
            "sbatch -a 1-4%3 --dependency afterany:5:6 --hold x.sh",
            SubmitLine("afterany:5:6", 3, True),
        ),
        ("sbatch -J myH -dafterok:7 job.sh", SubmitLine("afterok:7")),
        ("sbatch --gres=gpu:1 -H job.sh", SubmitLine(held=True)),
        # Slurm keeps the line without its quotes: --wrap's words run to the next option
        ("sbatch --wrap=sleep 1; exit 3 --dependency=afterok:1", SubmitLine("afterok:1")),
        ("sbatch --array=0-3 job.sh", SubmitLine()),
        ("", SubmitLine()),
    ],
)
def test_the_submit_line_says_dependency_array_limit_and_hold(line, expected):
    assert parse_submit_line(line) == expected


def test_dependencies_and_the_array_limit_come_from_the_submit_lines(imported):
    summary, log, _ = imported
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert [(d.job, d.on) for d in jobs["301"].depends_on] == [("300", "succeeded")]
    assert [(d.job, d.on) for d in jobs["302"].depends_on] == [("300", "finished")]
    assert [(d.job, d.on) for d in jobs["330"].depends_on] == [("300", "finished")]
    assert summary["skipped_rows"] == 0
    assert jobs["310"].array.max_running == 2  # a finished array: its JobIDs have no %2
    assert summary["dependencies_dropped"] == 0


def test_the_replay_resolves_them_and_honours_the_throttle(imported):
    _, _, sim = imported
    jobs = sim.ledger.jobs
    # 300 fails as recorded: its afterok dependent is withdrawn, its afterany one runs
    assert (jobs["300"].state, jobs["301"].state, jobs["302"].state) == (
        "failed",
        "cancelled",
        "completed",
    )
    assert jobs["301"].reason == "DependencyNeverSatisfied" and not jobs["301"].placements
    running, most = set(), 0
    for _, _, e in sim.log:
        if isinstance(e, ev.GangPlaced) and e.job_id.startswith("310@"):
            running.add(e.job_id)
        elif isinstance(e, ev.GangCompleted | ev.GangFailed):
            running.discard(e.job_id)
        most = max(most, len(running))
    assert most == 2


def test_no_job_is_placed_before_it_was_eligible(imported):
    summary, log, sim = imported
    submitted = {
        e.job.job_id: e.occurred_at_ms for _, _, e in log if isinstance(e, ev.JobSubmitted)
    }

    def at(kind) -> dict[str, int]:
        return {e.job_id: e.occurred_at_ms - T0_MS for _, _, e in log if isinstance(e, kind)}

    # a --begin and a --hold: submitted when they were, held then, released when eligible
    assert (submitted["320"] - T0_MS, submitted["321"] - T0_MS) == (0, 0)
    assert (at(ev.JobHeld)["320"], at(ev.JobReleased)["320"]) == (0, 600_000)
    assert (at(ev.JobHeld)["321"], at(ev.JobReleased)["321"]) == (0, 300_000)
    placed = {
        e.job_id: e.occurred_at_ms - T0_MS for _, _, e in sim.log if isinstance(e, ev.GangPlaced)
    }
    # the cluster is idle: each is placed the moment it became eligible, not at its submission
    assert (placed["320"], placed["321"]) == (600_000, 300_000)
    # so the replay's wait is Slurm's: from the submission, the hold included
    assert sim.ledger.jobs["320"].submitted_ms - T0_MS == 0
    # 302 waited on a dependency (Eligible 60 s): that dependency, not Eligible, decides
    assert submitted["302"] - T0_MS == 10_000 and "302" not in at(ev.JobHeld)
    # cancelled before it was eligible: held from its submission, never released, cancelled
    # at its End, never placed
    assert submitted["322"] - T0_MS == 0 and at(ev.JobHeld)["322"] == 0
    assert "322" not in at(ev.JobReleased) and "322" not in placed
    assert sim.ledger.jobs["322"].state == "cancelled"
    assert summary["eligible_later"] == 3
