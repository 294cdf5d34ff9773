"""`gpuledger check CONFIG JOB...` judges each job as admission would on a cluster of exactly
that configuration (issue 29): the README's first live example (`check cluster.yaml job.yaml`
said ok, then `submit` was rejected `Unschedulable`: 4 members of 8 GPUs, the fleet holds 2)
is one error line with admission's reason and message, exit 2."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.main import app

runner = CliRunner()

# README "Cluster configuration" and "job.yaml", as written there
CLUSTER = {
    "cluster": {
        "nodes": [
            {"name_prefix": "node-", "count": 2, "gpus": 8, "model": "H100-80GB", "cpu": 128,
             "memory": "1Ti", "cliques": 1, "leaf_switch": "leaf-1"},
            {"name": "shared-1", "gpus": 2, "model": "L40S", "gpu_memory": "48Gi",
             "sharing": ["mps", "timeslice"]},
        ]
    },
    "tenants": [
        {"name": "research", "guaranteed": 8, "weight": 1},
        {"name": "product", "guaranteed": 8, "limit": 12},
    ],
    "priority_classes": [
        {"name": "inference-critical", "value": 10000, "preemptible": False,
         "slo_class": "latency-critical"},
    ],
    "policy": {"preemption": True, "preemption_scope": "cluster", "default_grace_s": 30},
}  # fmt: skip
JOB = {
    "id": "train-42",
    "tenant": "research",
    "class": "train",
    "replicas": 4,
    "min_members": 4,
    "gpus": 8,
    "cpu": 32,
    "memory": "256Gi",
    "models": ["H100-80GB"],
    "duration": "6h",
    "checkpoint": {"interval": "30m", "grace": "2m", "save": "30s"},
    "command": ["python", "train.py"],
}


def check(tmp_path, job: dict):
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(CLUSTER))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, runner.invoke(app, ["check", str(config), str(path)])


def admission_says(job: dict) -> ev.JobRejected | None:
    """What admission decides on that cluster (the simulator runs the same deciders)."""
    doc = {**CLUSTER, "timeline": [{"at": 0, "submit": job}], "until": "1s"}
    sim = simulate(from_document(doc))
    (decision,) = [e for _, _, e in sim.log if isinstance(e, ev.JobAdmitted | ev.JobRejected)]
    return decision if isinstance(decision, ev.JobRejected) else None


def test_the_readme_job_that_admission_rejects_is_an_error_with_admissions_message(tmp_path):
    path, result = check(tmp_path, JOB)
    rejected = admission_says(JOB)
    assert rejected is not None and rejected.reason == "Unschedulable"
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: Unschedulable: {rejected.message}"
    assert "Traceback" not in result.output


def test_a_job_the_cluster_can_hold_is_ok(tmp_path):
    job = {**JOB, "replicas": 2, "min_members": 2}
    path, result = check(tmp_path, job)
    assert admission_says(job) is None
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"ok {path} (job)"


def test_non_preemptible_work_beyond_the_guarantee_is_reported_as_admission_would(tmp_path):
    job = {"id": "serve", "tenant": "product", "class": "inference-critical", "gpus": 8,
           "replicas": 2}  # fmt: skip
    path, result = check(tmp_path, job)
    rejected = admission_says(job)
    assert rejected is not None and rejected.reason == "NonPreemptibleOverQuota"
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: NonPreemptibleOverQuota: {rejected.message}"
