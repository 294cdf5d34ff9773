"""Recorded outcomes are inputs (issue 41): given a sacct dump whose jobs failed, hit a node
failure, timed out (with and without a recorded limit), were cancelled while running, were
held and cancelled, waited on a failed job, and an array with a failed task, when it is
imported and replayed under its recorded configuration, then every job ends the way sacct
says, after the same work, and the replay's completed / failed / cancelled counts equal the
observed column's."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay import observed as obs
from gpuledger.replay.importers.csvtrace import import_csv
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log
from gpuledger.replay.metrics import COUNTED_AS, job_counts, measure_observed, observed_outcome
from gpuledger.replay.whatif import external_inputs, replay
from tests.whatif.sacct_dump import ONE, T0_MS, import_dump
from tests.whatif.sacct_dump import at as _t


def row(job, submit, start, end, state, limit="01:00:00", dep="", eligible=0):
    never = start is None and end is not None
    return (
        f"{job}|{job}|j|u|physics|gpu|normal|1|{_t(submit)}|{_t(eligible)}|"
        f"{'None' if never else _t(start)}|{_t(end)}|00:00:00|{limit}|{state}|0:0|1|"
        f"{'None assigned' if never else 'g1'}|{ONE}|{'' if never else ONE}|{dep}"
    )


ROWS = [
    row("100", 0, 0, 600, "FAILED"),
    row("101", 0, 0, 300, "NODE_FAIL"),
    row("102", 0, 0, 600, "TIMEOUT", limit="00:10:00"),  # stopped at its limit
    row("103", 0, 0, 450, "TIMEOUT", limit="Partition_Limit"),  # limit not recorded
    row("104", 0, 500, 900, "CANCELLED by 1000"),  # waited 500 s, cancelled after 400 s
    row("105", 0, None, 1000, "CANCELLED by 1000", eligible=None),  # held, then cancelled
    row("106", 0, None, 700, "CANCELLED by 1000", dep="afterok:100(unfulfilled)"),
    row("107", 0, 0, 200, "COMPLETED"),
    row("108_0", 0, 0, 100, "COMPLETED"),
    row("108_1", 0, 0, 150, "FAILED"),
    row("108_2", 0, 0, 120, "COMPLETED"),
]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    summary, out = import_dump(tmp_path_factory.mktemp("outcomes"), "Dependency", ROWS)
    log = list(read_log(out))
    sim = replay(external_inputs(log))
    return summary, log, sim, out


def ended(sim) -> dict[str, tuple[int, int | None]]:
    """Job id -> (seconds from T0 to its end, seconds it ran in its last placement)."""
    placed = {e.job_id: e.occurred_at_ms for _, _, e in sim.log if isinstance(e, ev.GangPlaced)}
    return {
        j: (
            (r.finished_ms - T0_MS) // 1000,
            None if j not in placed else (r.finished_ms - placed[j]) // 1000,
        )
        for j, r in sim.ledger.jobs.items()
        if r.finished_ms is not None and not r.spec.array
    }


def test_the_recorded_outcome_is_in_the_submission(imported):
    _, log, _, _ = imported
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert {j: s.ends for j, s in jobs.items() if s.ends} == {"100": "failed", "101": "failed"}
    assert jobs["103"].time_limit_s == 450  # a TIMEOUT without a limit: its run was the limit
    assert jobs["104"].duration_s is None  # a user cancel is a wall-clock act, not work
    assert jobs["108"].array.ends == (None, "failed", None)
    assert jobs["107"].ends is msgspec.UNSET  # a completed job encodes as before


def test_each_job_ends_as_sacct_says_after_the_same_work(imported):
    _, _, sim, _ = imported
    states = {j: str(r.state) for j, r in sim.ledger.jobs.items() if not r.spec.array}
    assert states == {
        "100": "failed",
        "101": "failed",
        "102": "timeout",
        "103": "timeout",
        "104": "cancelled",
        "105": "cancelled",
        "106": "cancelled",
        "107": "completed",
        "108@0": "completed",
        "108@1": "failed",
        "108@2": "completed",
    }
    at = ended(sim)
    # failures after their recorded work; timeouts at the limit as Slurm enforces it
    # (OverTimeLimit 0: not the class's 30 s grace)
    assert at["100"] == (600, 600) and at["101"] == (300, 300) and at["108@1"] == (150, 150)
    assert at["102"] == (600, 600) and at["103"] == (450, 450)
    # placed at once in the replay, cancelled at its recorded End (900 s), whatever it was
    # doing then: not completed after the 400 s it ran in Slurm
    assert at["104"] == (900, 900)
    # held and cancelled: never placed, cancelled as it is submitted
    assert at["105"] == (0, None)
    # afterok on a job that fails in the replay: withdrawn when 100 fails, never placed
    assert at["106"] == (600, None)
    assert sim.ledger.jobs["106"].reason == "DependencyNeverSatisfied"


def test_the_baseline_counts_equal_the_observed_ones(imported):
    summary, _, sim, out = imported
    header, items = obs.read(obs.sidecar(out))
    observed = measure_observed(header, list(items)).metrics["jobs"]
    replayed = job_counts(sim.ledger)
    keys = ("submitted", "completed", "failed", "cancelled", "unfinished")
    assert {k: replayed[k] for k in keys} == {k: observed[k] for k in keys}
    assert (observed["completed"], observed["failed"], observed["cancelled"]) == (3, 5, 3)
    assert summary["never_ran"] == {
        "ended before it started, waiting on a dependency: the replay's dependency decides": 1,
        "ended before it started: cancelled at its submission in the replay": 1,
    }
    assert (summary["cancelled_before_start"], summary["cancelled_while_running"]) == (2, 1)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _slurm(out: Path) -> None:
    import_slurm(FIXTURES / "slurm" / "sacct.txt", out, sinfo=FIXTURES / "slurm" / "sinfo.txt")


def _slurm_real(out: Path) -> None:
    real = FIXTURES / "slurm-real"
    import_slurm(real / "sacct.txt", out, sinfo=real / "sinfo.txt")


def _kubernetes(out: Path) -> None:
    k = FIXTURES / "kubernetes"
    import_kubernetes(
        k / "pods.json", out, events=k / "events.json", nodes=k / "nodes.json",
        workloads=k / "workloads.json",
    )  # fmt: skip


def _csv(out: Path) -> None:
    c = FIXTURES / "csv"
    import_csv(c / "jobs.csv", out, mapping=c / "mapping.yaml", nodes_file=c / "nodes.yaml")


def _openb_csv(out: Path) -> None:
    import_csv(
        FIXTURES / "openb" / "openb_pod_list_default.csv", out,
        mapping=Path(__file__).resolve().parents[2] / "examples" / "openb-mapping.yaml",
        nodes=FIXTURES / "openb" / "openb_node_list_gpu_node.csv",
    )  # fmt: skip


@pytest.mark.parametrize("importer", [_slurm, _slurm_real, _kubernetes, _csv, _openb_csv])
def test_every_importer_s_baseline_ends_each_job_as_it_ended(importer, tmp_path):
    """Given each importer's committed fixture, when imported and replayed under the recorded
    configuration, then every job that ended in reality ends the same way in the replay:
    completed, failed (a timeout counts as failed) or cancelled. (A job running or pending
    when the dump was taken has no recorded end to reproduce.)"""
    out = tmp_path / "log.jsonl"
    importer(out)
    _, items = obs.read(obs.sidecar(out))
    ended = {o.job: observed_outcome(o.state) for o in items}
    ended = {j: o for j, o in ended.items() if o != "unfinished"}
    ledger = replay(external_inputs(list(read_log(out)))).ledger
    replayed = {j: COUNTED_AS.get(ledger.jobs[j].state, ledger.jobs[j].state) for j in ended}
    assert replayed == ended
    assert set(ended.values()) >= {"completed", "cancelled"}
