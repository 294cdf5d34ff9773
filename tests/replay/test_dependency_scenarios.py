"""Dependencies (issue 31) through the simulator: given jobs with `depends_on`, when the jobs
they name start and end, then they wait (`Dependency`), start as soon as the dependency is
met, and are withdrawn (`DependencyNeverSatisfied`) when it no longer can be; admission
refuses unknown, foreign and cyclic dependencies; SQL shows every dependency's status."""

from pathlib import Path

import yaml

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate
from tests.replay.simlog import logged, projected

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def placed_at(sim, job_id):
    return [e.occurred_at_ms for e in logged(sim, ev.GangPlaced, job_id=job_id)]


def test_the_example_runs_each_job_when_its_dependency_is_met():
    sim = simulate(load(EXAMPLES / "dependencies.yaml"), check=True)
    jobs = sim.ledger.jobs
    assert placed_at(sim, "prep") == [0]
    assert placed_at(sim, "train") == [1_800_000]  # prep succeeded at 30 min
    assert placed_at(sim, "monitor") == [1_800_000]  # train started
    assert placed_at(sim, "report") == [5_400_000]  # train finished
    (waiting,) = logged(sim, ev.PendingReasonChanged, job_id="train")
    assert (waiting.reason, waiting.message) == (
        "Dependency",
        "waits for prep to succeed (prep is running)",
    )
    # train succeeded: the job waiting for it to fail is withdrawn when it does
    (gone,) = logged(sim, ev.JobWithdrawn)
    assert (gone.job_id, gone.occurred_at_ms, gone.reason) == (
        "cleanup-on-failure",
        5_400_000,
        "DependencyNeverSatisfied",
    )
    assert gone.message == (
        "waits for train to fail, which can no longer happen (train is completed)"
    )
    assert str(jobs["cleanup-on-failure"].state) == "cancelled"
    assert jobs["cleanup-on-failure"].reason == "DependencyNeverSatisfied"
    rejected = {e.job_id: (e.reason, e.message) for e in logged(sim, ev.JobRejected)}
    assert rejected["orphan"][0] == rejected["foreign"][0] == "UnknownDependency"
    assert rejected["foreign"][1].startswith("depends_on[0].job: tenant other has no job 'prep'")
    assert rejected["loop-a"] == (
        "DependencyCycle",
        "depends_on: the dependencies lead back to the job: loop-a -> loop-b -> loop-a",
    )
    assert rejected["loop-b"][0] == "DependencyCycle"


def test_after_not_ok_runs_when_the_job_fails_at_its_time_limit():
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "long", "tenant": "ml", "gpus": 8, "duration": "2h",
                                 "time_limit": "1h"}},
            {"at": 0, "submit": {"id": "rescue", "tenant": "ml", "gpus": 8, "duration": "10m",
                                 "depends_on": [{"job": "long", "on": "failed"}]}},
            {"at": 0, "submit": {"id": "next", "tenant": "ml", "gpus": 8, "duration": "10m",
                                 "depends_on": [{"job": "long", "on": "succeeded"}]}},
        ],
    }  # fmt: skip
    sim = simulate(from_document(doc), check=True)
    assert str(sim.ledger.jobs["long"].state) == "timeout"
    (ended,) = logged(sim, ev.GangFailed, job_id="long")
    assert placed_at(sim, "rescue") == [ended.occurred_at_ms]
    assert str(sim.ledger.jobs["next"].state) == "cancelled"
    assert placed_at(sim, "next") == []


def test_the_pend_policy_leaves_a_job_whose_dependency_failed_pending():
    doc = yaml.safe_load((EXAMPLES / "dependencies.yaml").read_text())
    doc["policy"] = {"dependency_never_satisfied": "pend"}
    sim = simulate(from_document(doc), check=True)
    assert logged(sim, ev.JobWithdrawn) == []
    job = sim.ledger.jobs["cleanup-on-failure"]
    assert (str(job.state), job.reason) == ("pending", "DependencyNeverSatisfied")


def test_a_yaml_on_key_is_read_as_on_not_as_true():
    """PyYAML reads a bare `on:` key as True (YAML 1.1): job files and scenarios get `on`."""
    from gpuledger.services.domain.inputs.jobfile import job_spec

    doc = yaml.safe_load("{id: b, tenant: t, depends_on: [{job: a, on: started}]}")
    assert True in doc["depends_on"][0]
    (dep,) = job_spec(doc).depends_on
    assert (dep.job, dep.on) == ("a", "started")


def test_sql_lists_every_dependency_with_its_status(tmp_path):

    sim = simulate(load(EXAMPLES / "dependencies.yaml"), until_ms=2_000_000)
    with projected(sim, tmp_path / "p.duckdb") as con:
        rows = con.execute(
            'SELECT job_id, depends_on, "on", dependency_state, status, state, reason '
            "FROM dependency_waits WHERE state NOT IN ('rejected') ORDER BY job_id"
        ).fetchall()
    assert rows == [
        ("cleanup-on-failure", "train", "failed", "running", "waiting", "pending", "Dependency"),
        ("monitor", "train", "started", "running", "met", "running", None),
        ("report", "train", "finished", "running", "waiting", "pending", "Dependency"),
        ("train", "prep", "succeeded", "completed", "met", "running", None),
    ]
