"""Time limits (issue 31) through the simulator: given a scenario, when its runs reach their
`time_limit`, then they are asked to checkpoint, stopped after the grace and end `timeout`
with reason `TimeLimit`; classes give defaults and refuse longer limits; backfill and
reservations trust limits over duration hints; the checking mode agrees with every decide."""

from pathlib import Path

import pytest
import yaml

from gpuledger import events as ev
from gpuledger.events.reasons import TERMINAL_STATES
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate
from tests.replay.simlog import logged, projected

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def scenario(*timeline, classes=(), policy=None, gpus=8):
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": gpus, "model": "H100-80GB"}]},
        "tenants": [{"name": "ml", "guaranteed": gpus}],
        "priority_classes": list(classes),
        "timeline": list(timeline),
    }
    if policy:
        doc["policy"] = policy
    return simulate(from_document(doc), check=True)


def test_the_example_stops_runs_at_their_limits_and_ends_them_timeout():
    sim = simulate(load(EXAMPLES / "time-limits.yaml"), check=True)
    jobs = sim.ledger.jobs
    assert {j: str(jobs[j].state) for j in sorted(jobs)} == {
        "defaulted": "timeout",
        "long-run": "timeout",
        "quick": "completed",
        "too-long": "rejected",
    }
    # long-run asked for 1h: asked to checkpoint at 1h, its 20 s save done, it ends timeout
    (reached,) = logged(sim, ev.TimeLimitReached, job_id="long-run")
    assert (reached.occurred_at_ms, reached.time_limit_s, reached.deadline_ms) == (
        3_600_000,
        3600,
        3_660_000,  # the policy's 60 s grace
    )
    (ended,) = logged(sim, ev.GangFailed, job_id="long-run")
    assert (ended.occurred_at_ms, ended.reason) == (3_620_000, "TimeLimit")
    assert "checkpointed at step 3600" in ended.message
    assert jobs["long-run"].reason == "TimeLimit" and jobs["long-run"].finished_ms == 3_620_000
    # defaulted set no limit: the class default (2h) applies, resolved at admission
    (adm,) = logged(sim, ev.JobAdmitted, job_id="defaulted")
    assert adm.time_limit_s == 7200
    assert logged(sim, ev.GangFailed, job_id="defaulted")[0].occurred_at_ms == 7_220_000
    # too-long asked for more than the class maximum: refused, naming both limits
    (rej,) = logged(sim, ev.JobRejected, job_id="too-long")
    assert rej.reason == "TimeLimitTooLong"
    assert "2d" in rej.message and "max_time_limit_s 1d" in rej.message
    # quick ended on its own, well inside its 45 min limit
    assert logged(sim, ev.TimeLimitReached, job_id="quick") == []
    assert logged(sim, ev.GangCompleted, job_id="quick")[0].occurred_at_ms == 1_800_000


def test_a_run_that_cannot_save_within_the_grace_is_killed_at_the_deadline_and_loses_its_work():
    sim = scenario(
        {
            "at": 0,
            "submit": {
                "id": "slow-saver",
                "tenant": "ml",
                "gpus": 2,
                "duration": "2h",
                "time_limit": "30m",
                "checkpoint": {"grace": "10s", "save": "1m"},
            },
        }
    )
    (reached,) = logged(sim, ev.TimeLimitReached)
    assert reached.deadline_ms == 1_800_000 + 10_000
    (ended,) = logged(sim, ev.GangFailed)
    assert ended.occurred_at_ms == 1_810_000 and ended.reason == "TimeLimit"
    # 30m10s on 2 GPUs with no checkpoint: 1.01 GPU-h lost
    assert "no checkpoint in time: 1.01 GPU-h lost" in ended.message
    assert logged(sim, ev.MemberCheckpointed) == []
    assert str(sim.ledger.jobs["slow-saver"].state) == "timeout"


def test_a_run_whose_work_reaches_its_limit_is_stopped_at_the_limit_like_slurm_timeout():
    """Simulated work of exactly the limit (an imported Slurm TIMEOUT row), or more, does not
    complete at the limit: it is stopped there and ends `timeout`."""
    for duration in ("30m", "1810s"):
        sim = scenario(
            {
                "at": 0,
                "submit": {
                    "id": "at-limit",
                    "tenant": "ml",
                    "gpus": 1,
                    "duration": duration,
                    "time_limit": "30m",
                    "checkpoint": {"grace": "1m", "save": "30s"},
                },
            }
        )
        assert logged(sim, ev.GangCompleted) == []
        (ended,) = logged(sim, ev.GangFailed)
        assert (ended.occurred_at_ms, ended.reason) == (1_830_000, "TimeLimit")
        assert str(sim.ledger.jobs["at-limit"].state) == "timeout"


def test_a_preempted_run_starts_a_fresh_limit_when_it_resumes():
    sim = scenario(
        {
            "at": 0,
            "submit": {
                "id": "low",
                "tenant": "ml",
                "class": "low",
                "gpus": 8,
                "duration": "3h",
                "time_limit": "1h",
                "checkpoint": {"save": "10s"},
            },
        },
        {"at": "40m", "submit": {"id": "high", "tenant": "ml", "gpus": 8, "duration": "30m"}},
        classes=[{"name": "low", "value": 10}],
        policy={"min_runtime_s": 0},
    )
    placed = [e.occurred_at_ms for e in logged(sim, ev.GangPlaced, job_id="low")]
    assert placed == [0, 2_410_000 + 1_800_000]  # after high's 30 min
    (reached,) = logged(sim, ev.TimeLimitReached, job_id="low")
    # the second run started at 4210 s: its limit counts from there, not from 0
    assert (reached.started_ms, reached.occurred_at_ms) == (4_210_000, 4_210_000 + 3_600_000)
    assert str(sim.ledger.jobs["low"].state) == "timeout"


def test_backfill_and_reservations_trust_time_limits_over_duration_hints():
    doc = yaml.safe_load((EXAMPLES / "backfill.yaml").read_text())
    for entry in doc["timeline"]:
        submit = entry.get("submit") or {}
        if submit.get("id") == "pinned-1":  # non-preemptible, 3h hint: would wait `Reserved`
            submit["time_limit"] = "1h"
        if submit.get("id") == "long-a":  # 2h hint, stopped at 90 min
            submit["time_limit"] = "90m"
    sim = simulate(from_document(doc), check=True)
    # the gang's reservation starts when long-a's limit and grace are over, not at its hint
    reserved = [
        e for e in logged(sim, ev.PendingReasonChanged, job_id="gang-16") if "reserved" in e.message
    ]
    assert reserved[0].details["reservation"]["expected_start_s"] == 5430.0
    # pinned-1 (1h limit, placed at 20m) is stopped before that start: it backfills at once
    (pinned,) = logged(sim, ev.GangPlaced, job_id="pinned-1")
    assert pinned.occurred_at_ms == 1_200_000 and pinned.backfill_for is None
    assert logged(sim, ev.PendingReasonChanged, job_id="pinned-1", reason="Reserved") == []
    assert logged(sim, ev.GangFailed, job_id="pinned-1")[0].reason == "TimeLimit"
    # and the gang lands once long-a is stopped and the backfill is evicted
    (gang,) = logged(sim, ev.GangPlaced, job_id="gang-16")
    assert gang.occurred_at_ms == 5_415_000


def test_sql_shows_timeouts_and_the_timeout_state(tmp_path):

    sim = simulate(load(EXAMPLES / "time-limits.yaml"))
    with projected(sim, tmp_path / "p.duckdb") as con:
        rows = con.execute(
            "SELECT job_id, time_limit_s, started_at_ms, deadline_ms, ended_at_ms, outcome "
            "FROM timeouts ORDER BY job_id"
        ).fetchall()
        states = dict(con.execute("SELECT job_id, state FROM jobs").fetchall())
        reasons = dict(con.execute("SELECT job_id, reason FROM jobs").fetchall())
    assert rows == [
        ("defaulted", 7200, 0, 7_260_000, 7_220_000, "timeout"),
        ("long-run", 3600, 0, 3_660_000, 3_620_000, "timeout"),
    ]
    assert states["long-run"] == states["defaulted"] == "timeout"
    assert states["quick"] == "completed" and reasons["long-run"] == "TimeLimit"


def test_metrics_count_timeouts_per_tenant_and_class(tmp_path):
    from gpuledger.projections.exporter import read_metrics

    sim = simulate(load(EXAMPLES / "time-limits.yaml"))
    with projected(sim, tmp_path / "p.duckdb") as con:
        samples = read_metrics(con)
    assert samples["gpuledger_timed_out_workloads_total"] == [(["ml", "train"], 2)]


@pytest.mark.parametrize("name", ["time-limits", "dependencies", "arrays"])
def test_the_issue_31_examples_keep_every_invariant(name):
    from gpuledger.replay.invariants import check_log

    sim = simulate(load(EXAMPLES / f"{name}.yaml"), check=True)
    findings = check_log(sim.log)
    assert findings and all(f.violations == [] for f in findings), findings
    assert all(str(j.state) in TERMINAL_STATES for j in sim.ledger.jobs.values())
