"""Held-out scenarios for the job semantics Slurm and Kueue users expect, written only from the
syntax and outcomes the user docs state (docs/job-semantics.md, docs/elastic-and-limits.md):
given a cluster and a timeline as the docs spell them, when the simulator runs them in
checking mode, then each outcome is the one the docs promise (states, reasons, messages,
times), and `gpuledger why` says what the docs say it says."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.scenario import ScenarioError, from_document
from gpuledger.replay.simulator import simulate
from tests.replay.simlog import logged

M = 60_000
H = 3_600_000
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(doc, **kw):
    return simulate(from_document(doc), check=True, **kw)


def reasons(sim, job_id):
    return [(e.reason, e.message) for e in logged(sim, ev.PendingReasonChanged, job_id=job_id)]


def state(sim, job_id):
    return str(sim.ledger.jobs[job_id].state)


def why(sim, tmp_path, job_id):
    """What `gpuledger why JOB` prints for the simulated log."""
    from gpuledger.projections.store import rebuild
    from gpuledger.services.cli.audit import register

    data = tmp_path / "data"
    if not (data / "projection.duckdb").exists():
        rebuild(sim.log, data / "projection.duckdb")
    app = typer.Typer()
    register(app)
    r = CliRunner().invoke(app, ["why", job_id, "--data", str(data)])
    assert r.exit_code == 0, r.output
    return r.output


def cluster(gpus=8, nodes=1, model="H100-80GB"):
    return {"nodes": [{"name_prefix": "gpu-", "count": nodes, "gpus": gpus, "model": model}]}


# ---------------------------------------------------------------- time limits


def test_given_a_time_limit_when_the_run_reaches_it_then_it_ends_timeout_with_reason_timelimit(
    tmp_path,
):
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "research", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "train-42", "tenant": "research", "gpus": 8,
                                 "duration": "6h", "time_limit": "1h",
                                 "checkpoint": {"interval": "30m", "grace": "2m", "save": "30s"}}},
        ],
    }  # fmt: skip
    sim = run(doc)
    (reached,) = logged(sim, ev.TimeLimitReached, job_id="train-42")
    assert (reached.occurred_at_ms, reached.deadline_ms) == (H, H + 2 * M)
    (failed,) = logged(sim, ev.GangFailed, job_id="train-42")
    assert failed.reason == "TimeLimit"
    assert failed.message.startswith("time limit 1h reached at t+1h; checkpointed")
    assert state(sim, "train-42") == "timeout"
    out = why(sim, tmp_path, "train-42")
    assert "timeout" in out and "TimeLimit" in out


def test_given_class_default_and_maximum_limits_then_admission_resolves_or_refuses_as_the_table_says():
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "priority_classes": [
            {"name": "train", "value": 50, "override": True, "default_time_limit": "2h",
             "max_time_limit": "1d"},
        ],
        "timeline": [
            {"at": 0, "submit": {"id": "own", "tenant": "ml", "gpus": 1, "time_limit": "90m",
                                 "duration": "10m"}},
            {"at": 0, "submit": {"id": "long", "tenant": "ml", "gpus": 1, "time_limit": "2d"}},
            {"at": 0, "submit": {"id": "default", "tenant": "ml", "gpus": 1, "duration": "3h"}},
        ],
    }  # fmt: skip
    sim = run(doc)
    admitted = {e.job_id: e.time_limit_s for e in logged(sim, ev.JobAdmitted)}
    assert admitted["own"] == 90 * 60
    assert admitted["default"] == 2 * 3600
    (rejected,) = logged(sim, ev.JobRejected, job_id="long")
    assert rejected.reason == "TimeLimitTooLong"
    assert rejected.message == (
        "time_limit_s: 2d is longer than class 'train' allows (max_time_limit_s 1d)"
    )
    assert state(sim, "default") == "timeout"  # a 3 h job under the class's 2 h default
    assert state(sim, "own") == "completed"  # ends on its own before its limit


def test_given_a_limited_job_when_it_backfills_before_a_reservation_then_its_limit_not_its_hint_counts():
    """A queued job may backfill capacity reserved for a starving gang when its limit (plus
    grace) ends before the reserved start, whatever its hint says."""
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "policy": {"reservation_after_s": 60, "default_grace_s": 60},
        "timeline": [
            {"at": 0, "submit": {"id": "running", "tenant": "ml", "class": "build", "gpus": 4,
                                 "duration": "3h"}},
            {"at": 1, "submit": {"id": "big", "tenant": "ml", "class": "build", "gpus": 8,
                                 "duration": "1h"}},
            {"at": "5m", "submit": {"id": "short", "tenant": "ml", "class": "build", "gpus": 4,
                                    "duration": "3h", "time_limit": "1h"}},
        ],
    }  # fmt: skip
    sim = run(doc, until_ms=2 * H)
    (placed,) = logged(sim, ev.GangPlaced, job_id="short")
    assert placed.occurred_at_ms == 5 * M  # backfills: its limit ends before the 3 h start
    assert state(sim, "short") == "timeout"


# ---------------------------------------------------------------- dependencies


def dependency_doc(**policy):
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "research", "guaranteed": 8}, {"name": "other", "guaranteed": 0}],
        "timeline": [
            {"at": 0, "submit": {"id": "prep", "tenant": "research", "gpus": 2,
                                 "duration": "30m"}},
            {"at": 0, "submit": {"id": "fetch", "tenant": "research", "gpus": 1,
                                 "duration": "10m"}},
            {"at": "1m", "submit": {"id": "train", "tenant": "research", "gpus": 6,
                                    "duration": "1h",
                                    "depends_on": [{"job": "prep", "on": "succeeded"},
                                                   {"job": "fetch", "on": "finished"}]}},
            {"at": "1m", "submit": {"id": "watch", "tenant": "research", "gpus": 1,
                                    "duration": "10m",
                                    "depends_on": [{"job": "train", "on": "started"}]}},
            {"at": "1m", "submit": {"id": "rescue", "tenant": "research", "gpus": 1,
                                    "duration": "10m",
                                    "depends_on": [{"job": "train", "on": "failed"}]}},
            {"at": "1m", "submit": {"id": "spy", "tenant": "other", "gpus": 1,
                                    "depends_on": [{"job": "prep"}]}},
            {"at": "1m", "submit": {"id": "ghost", "tenant": "research", "gpus": 1,
                                    "depends_on": [{"job": "nosuch"}]}},
        ],
    }  # fmt: skip
    if policy:
        doc["policy"] = policy
    return doc


def test_given_dependencies_when_they_are_met_then_each_job_starts_then_and_not_before(tmp_path):
    sim = run(dependency_doc())
    starts = {e.job_id: e.occurred_at_ms for e in logged(sim, ev.GangPlaced)}
    assert starts["train"] == 30 * M  # prep succeeded at 30 m (fetch finished at 10 m)
    assert starts["watch"] == 30 * M  # train was placed
    assert reasons(sim, "train")[0] == (
        "Dependency",
        "waits for prep to succeed (prep is running), fetch to finish (fetch is running)",
    )
    out = why(sim, tmp_path, "rescue")
    assert "DependencyNeverSatisfied" in out


def test_given_a_dependency_that_can_no_longer_be_met_then_the_job_is_withdrawn_or_pends():
    sim = run(dependency_doc())
    (gone,) = logged(sim, ev.JobWithdrawn, job_id="rescue")
    assert gone.reason == "DependencyNeverSatisfied"
    assert gone.message == (
        "waits for train to fail, which can no longer happen (train is completed)"
    )
    assert state(sim, "rescue") == "cancelled"
    pend = run(dependency_doc(dependency_never_satisfied="pend"))
    assert logged(pend, ev.JobWithdrawn) == []
    assert state(pend, "rescue") == "pending"
    assert pend.ledger.jobs["rescue"].reason == "DependencyNeverSatisfied"


def test_given_unknown_or_foreign_dependencies_then_admission_refuses_them_alike():
    sim = run(dependency_doc())
    rejected = {e.job_id: (e.reason, e.message) for e in logged(sim, ev.JobRejected)}
    assert rejected["ghost"] == (
        "UnknownDependency",
        "depends_on[0].job: tenant research has no job 'nosuch' (a dependency names a job of "
        "the same tenant submitted before)",
    )
    assert rejected["spy"][0] == "UnknownDependency"
    assert rejected["spy"][1].startswith("depends_on[0].job: tenant other has no job 'prep'")


def test_given_a_job_waiting_for_its_dependency_then_it_is_not_its_tenants_demand():
    sim = run(dependency_doc(), until_ms=20 * M)
    share = sim.ledger.fair_shares["research"]
    # prep (2) and fetch (1, ended at 10 m) ran; train (6) and watch (1) wait for dependencies
    assert share.demand_gpu_milli == 2000


# ---------------------------------------------------------------- arrays


def test_given_a_slurm_style_array_then_tasks_run_at_most_max_running_at_once(tmp_path):
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "research", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "sweep", "tenant": "research", "gpus": 1,
                                 "duration": "10m", "array": "0-5%2"}},
            {"at": 0, "submit": {"id": "grid", "tenant": "research", "gpus": 1,
                                 "duration": "10m", "array": {"count": 3, "first": 1}}},
        ],
    }  # fmt: skip
    sim = run(doc)
    jobs = sim.ledger.jobs
    assert sorted(j for j in jobs if j.startswith("sweep@")) == [f"sweep@{i}" for i in range(6)]
    assert sorted(j for j in jobs if j.startswith("grid@")) == ["grid@1", "grid@2", "grid@3"]
    starts = sorted(e.occurred_at_ms for e in logged(sim, ev.GangPlaced) if "sweep@" in e.job_id)
    assert starts == [0, 0, 10 * M, 10 * M, 20 * M, 20 * M]  # three waves of two
    capped = [r for j in jobs if j.startswith("sweep@") for r in reasons(sim, j)]
    assert ("ArrayTaskLimit", "array sweep runs at most 2 tasks at once (max_running)") in capped
    assert state(sim, "sweep") == "completed" and state(sim, "grid") == "completed"
    assert "6 tasks" in why(sim, tmp_path, "sweep")


def test_given_an_array_with_a_reserved_character_in_its_id_then_it_is_refused():
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "research", "guaranteed": 8}],
        "timeline": [{"at": 0, "submit": {"id": "bad@1", "tenant": "research", "gpus": 1}}],
    }
    with pytest.raises(ScenarioError, match="'@' is reserved for the tasks of array jobs"):
        run(doc)


# ---------------------------------------------------------------- elastic gangs


def test_given_an_elastic_gang_when_a_higher_priority_job_needs_room_then_it_shrinks_not_evicted(
    tmp_path,
):
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "policy": {"default_grace_s": 60, "min_runtime_s": 0},
        "timeline": [
            {"at": 0, "submit": {"id": "pretrain", "tenant": "ml", "class": "train", "gpus": 1,
                                 "replicas": 6, "min_members": 4, "duration": "2h",
                                 "checkpoint": {"interval": "10m", "save": "20s"}}},
            {"at": 0, "submit": {"id": "eval", "tenant": "ml", "class": "train", "gpus": 2,
                                 "duration": "3h"}},
            {"at": "30m", "submit": {"id": "notebook", "tenant": "ml", "class": "interactive",
                                     "gpus": 2, "duration": "30m"}},
        ],
    }  # fmt: skip
    sim = run(doc)
    assert logged(sim, ev.GangEvicted) == []
    shrunk, grew = logged(sim, ev.GangResized, job_id="pretrain")
    assert (shrunk.from_members, shrunk.to_members, shrunk.reason) == (6, 4, "Priority")
    assert (shrunk.preempted_by, shrunk.checkpointed, shrunk.lost_gpu_ms) == ("notebook", True, 0)
    assert (grew.from_members, grew.to_members, grew.reason) == (4, 6, "Grow")
    assert state(sim, "pretrain") == "completed"
    assert "shrunk from 6 to 4 members by notebook" in why(sim, tmp_path, "pretrain")


# ---------------------------------------------------------------- lending limits


def test_given_the_documented_lending_and_borrowing_limits_then_both_hold():
    doc = {
        "cluster": {"nodes": [{"name_prefix": "gpu-", "count": 2, "gpus": 8}]},
        "tenants": [
            {"name": "prod", "guaranteed": 8, "lending_limit": 2},
            {"name": "research", "guaranteed": 4, "borrowing_limit": 4},
            {"name": "scratch", "guaranteed": 0},
        ],
        "timeline": [
            {"at": 0, "submit": {"id": "r-train", "tenant": "research", "gpus": 8,
                                 "duration": "2h"}},
            {"at": "1m", "submit": {"id": "r-extra", "tenant": "research", "gpus": 2,
                                    "duration": "1h"}},
            {"at": "2m", "submit": {"id": "s-small", "tenant": "scratch", "gpus": 2,
                                    "duration": "1h"}},
            {"at": "3m", "submit": {"id": "s-big", "tenant": "scratch", "gpus": 4,
                                    "duration": "1h"}},
        ],
    }  # fmt: skip
    sim = run(doc, until_ms=30 * M)
    assert reasons(sim, "r-extra")[0] == (
        "ExceedsLimit",
        "tenant research borrows 4 of its 4-GPU borrowing_limit (uses 8, guaranteed 4), "
        "job needs 2",
    )
    assert state(sim, "s-small") == "running"
    reason, message = reasons(sim, "s-big")[0]
    assert reason == "LendingLimit"
    assert message.startswith(
        "tenant scratch would borrow; 6 of the 6 free GPUs are unused guarantee not lent: "
        "prod keeps 6 (lends 2 of 8 guaranteed, uses 0); job needs 4"
    )


def test_given_per_model_limits_as_documented_then_each_model_is_limited_on_its_own(tmp_path):
    from gpuledger.replay.scenario import load

    sim = simulate(load(EXAMPLES / "model-lending-limits.yaml"), check=True)
    assert reasons(sim, "research-h100")[0] == (
        "ExceedsLimit",
        "tenant research borrows 2 of its 2-GPU borrowing_limit_by_model for H100-80GB "
        "(uses 4 H100-80GB, guaranteed 2), job needs 2",
    )
    assert reasons(sim, "scratch-h100")[0] == (
        "LendingLimit",
        "tenant scratch would borrow H100-80GB GPUs; 4 of the 4 free H100-80GB GPUs are unused "
        "guarantee not lent: prod keeps 4 (lends 2 of 6 guaranteed H100-80GB, uses 0); "
        "job needs 2",
    )
    nodes = {e.job_id: {m.node for m in e.members} for e in logged(sim, ev.GangPlaced)}
    assert nodes["research-any"] == {"a100-0"} and nodes["scratch-any"] == {"a100-0"}
    (prod,) = logged(sim, ev.GangPlaced, job_id="prod-h100")
    assert prod.occurred_at_ms == H  # the H100s prod keeps back are free when it comes
    assert logged(sim, ev.PreemptionRequested) == []
    out = why(sim, tmp_path, "research-h100")
    assert "research-h100" in out


# ---------------------------------------------------------------- preemption and time limits


def test_given_a_victim_about_to_reach_its_time_limit_then_preemption_waits_for_it(tmp_path):
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "policy": {"min_runtime_s": 0},
        "timeline": [
            {"at": 0, "submit": {"id": "train", "tenant": "ml", "class": "train", "gpus": 8,
                                 "duration": "2h", "time_limit": "10m",
                                 "checkpoint": {"interval": "5m", "grace": "2m", "save": "10s"}}},
            {"at": "9m", "submit": {"id": "notebook", "tenant": "ml", "class": "interactive",
                                    "gpus": 8, "duration": "10m"}},
        ],
    }  # fmt: skip
    sim = run(doc, until_ms=H)
    assert logged(sim, ev.PreemptionRequested) == []
    (declined,) = logged(sim, ev.PreemptionDeclined, job_id="notebook")
    assert declined.reason == "EndsAtTimeLimit"
    assert "train reaches its 10m time limit at t+10m, within the 2m grace" in declined.message
    assert state(sim, "train") == "timeout"
    (placed,) = logged(sim, ev.GangPlaced, job_id="notebook")
    assert 10 * M < placed.occurred_at_ms <= 12 * M
    out = why(sim, tmp_path, "train")
    assert "timeout" in out
    waiting = run(doc, until_ms=9 * M + 30_000)
    out = why(waiting, tmp_path / "waiting", "notebook")
    assert "Preemption declined: EndsAtTimeLimit: evicting would make room, but the runs in" in out


def test_given_an_array_half_way_then_jobs_and_why_show_it_as_one_line_with_counts(tmp_path):
    from gpuledger.projections.store import rebuild
    from gpuledger.services.cli.audit import register

    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "research", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "sweep", "tenant": "research", "gpus": 1,
                                 "duration": "10m", "array": {"count": 10, "max_running": 3}}},
        ],
    }  # fmt: skip
    sim = run(doc, until_ms=15 * M)
    data = tmp_path / "data"
    rebuild(sim.log, data / "projection.duckdb")
    app = typer.Typer()
    register(app)
    jobs = CliRunner().invoke(app, ["jobs", "--data", str(data)])
    assert jobs.exit_code == 0, jobs.output
    lines = [x for x in jobs.output.splitlines() if x.startswith("sweep")]
    assert len(lines) == 1 and "running 3/10 done 3" in lines[0]
    tasks = CliRunner().invoke(app, ["jobs", "--tasks", "--data", str(data)])
    assert sum(x.startswith("sweep@") for x in tasks.output.splitlines()) == 10
    assert "10 tasks: 3 running, 4 pending, 3 completed" in why(sim, tmp_path, "sweep")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"time_limit": "1h"}, "time_limit_s: a service runs until it is scaled down"),
        ({"array": {"count": 2}}, "array: a service has replicas, not tasks"),
        ({"depends_on": [{"job": "first"}]}, "depends_on: a service's replicas start when"),
    ],
)
def test_given_a_service_with_job_only_semantics_then_admission_rejects_it(extra, message):
    doc = {
        "cluster": cluster(),
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "first", "tenant": "ml", "gpus": 1, "duration": "1m"}},
            {"at": 1, "submit": {"id": "svc", "tenant": "ml", "gpus": 1, "replicas": 1,
                                 "kind": "service", **extra}},
        ],
    }  # fmt: skip
    sim = run(doc, until_ms=10 * M)
    (rejected,) = logged(sim, ev.JobRejected, job_id="svc")
    assert rejected.reason == "InvalidSpec"
    assert rejected.message.startswith(message)
