"""Scenarios through the simulator: given a scenario file, when it runs on the virtual
clock, then jobs end in the expected states with the expected placements."""

from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.logio import read_log, write_log
from gpuledger.replay.report import report
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def jobs_by_id(sim):
    return {j["id"]: j for j in report(sim.ledger, sim.log, sim.now_ms)["jobs"]}


def test_three_jobs_complete_and_the_invalid_one_is_rejected_with_its_reason():
    sim = simulate(load(EXAMPLES / "three-jobs.yaml"))
    jobs = jobs_by_id(sim)
    assert {k: j["state"] for k, j in jobs.items()} == {
        "job-1": "completed",
        "job-2": "completed",
        "job-3": "completed",
        "job-bad": "rejected",
    }
    assert jobs["job-bad"]["reason"] == "TopologyUnsatisfiable"
    # job-1 and job-2 fill both nodes at t=0; job-3 waits for job-2 (2 s) and runs 2 s
    assert jobs["job-3"]["placements"][0]["at_s"] == 2.0
    assert jobs["job-3"]["completed_at_s"] == 4.0


def test_the_demo_reclaims_with_a_checkpoint_and_the_victim_resumes():
    sim = simulate(load(EXAMPLES / "demo.yaml"))
    jobs = jobs_by_id(sim)
    (pre,) = jobs["pretrain"]["preemptions"]
    assert (pre["at_s"], pre["by"], pre["reason"], pre["checkpointed"], pre["lost_gpu_s"]) == (
        4.0,
        "serve",
        "Reclaim",
        True,
        0.0,
    )
    assert [p["at_s"] for p in jobs["pretrain"]["placements"]] == [0.0, 13.0]
    # 4 s of work saved at the preemption; 16 s left after resuming when serve ends at 13 s
    assert jobs["pretrain"]["completed_at_s"] == 13.0 + 16.0
    resumed = [e for _, _, e in sim.log if isinstance(e, ev.GangPlaced) and e.job_id == "pretrain"][
        -1
    ]
    assert resumed.resume_step == 4
    assert jobs["serve"]["placements"][0]["at_s"] == 5.0  # after the 1 s checkpoint
    assert jobs["notebook"]["placements"][0]["members"][0]["gpu_milli"] == 500
    assert jobs["bad-job"]["state"] == "rejected" and jobs["bad-job"]["reason"] == "UnknownTenant"


def test_a_checkpoint_slower_than_the_grace_period_loses_the_work_since_the_last_periodic_one():
    doc = {
        "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
        "tenants": [{"name": "t", "guaranteed": 8}],
        "policy": {"default_grace_s": 5},
        "timeline": [
            {
                "at": 0,
                "submit": {
                    "id": "batch",
                    "tenant": "t",
                    "gpus": 8,
                    "duration": "1h",
                    "checkpoint": {"interval": "5m", "save": "60s"},
                },
            },
            {
                "at": 400,
                "submit": {
                    "id": "prod",
                    "tenant": "t",
                    "gpus": 8,
                    "class": "inference",
                    "duration": "1m",
                },
            },
        ],
    }
    jobs = jobs_by_id(simulate(from_document(doc)))
    (pre,) = jobs["batch"]["preemptions"]
    assert pre["checkpointed"] is False
    assert pre["lost_gpu_s"] == 8 * (
        405 - 300
    )  # killed at the 5 s deadline; last periodic checkpoint at 300 s
    assert jobs["prod"]["placements"][0]["at_s"] == 405


def test_with_preemption_disabled_the_high_priority_job_waits():
    doc = {
        "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
        "tenants": [{"name": "t", "guaranteed": 8}],
        "policy": {"preemption": False},
        "timeline": [
            {"at": 0, "submit": {"id": "batch", "tenant": "t", "gpus": 8, "duration": "1h"}},
            {
                "at": 10,
                "submit": {
                    "id": "prod",
                    "tenant": "t",
                    "gpus": 8,
                    "class": "inference",
                    "duration": "1m",
                },
            },
        ],
    }
    jobs = jobs_by_id(simulate(from_document(doc)))
    assert jobs["batch"]["preemptions"] == []
    assert jobs["prod"]["placements"][0]["at_s"] == 3600


def test_the_same_scenario_gives_a_byte_identical_log(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_log(a, simulate(load(EXAMPLES / "demo.yaml")).log)
    write_log(b, simulate(load(EXAMPLES / "demo.yaml")).log)
    assert a.read_bytes() == b.read_bytes()
    assert [seq for seq, _, _ in read_log(a)] == list(range(1, len(a.read_text().splitlines()) + 1))


def test_cancel_stops_a_running_job_without_requeue():
    doc = {
        "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
        "tenants": [{"name": "t", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "j", "tenant": "t", "gpus": 8, "duration": "1h"}},
            {"at": 60, "cancel": "j", "tenant": "t"},
            {"at": 61, "submit": {"id": "k", "tenant": "t", "gpus": 8, "duration": "1m"}},
        ],
    }
    jobs = jobs_by_id(simulate(from_document(doc)))
    assert jobs["j"]["state"] == "cancelled" and len(jobs["j"]["placements"]) == 1
    assert jobs["k"]["placements"][0]["at_s"] == 61 and jobs["k"]["state"] == "completed"
