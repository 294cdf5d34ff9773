"""A GPU model no GPU has is caught before the job waits for ever (issue 44, item 8): with the
cluster known (`check CONFIG JOB`, admission) it is an error naming the closest model the
cluster has; with the cluster unknown (`check JOB`) a model outside gpuledger's vocabulary is
a warning naming the closest known model, and the exit code stays 0."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.model_names import suggestion, unknown_models
from tests.integration.cluster import cli
from tests.services.given import cluster, given, of_type, submitted_json

CONFIG = """cluster:
  nodes:
    - {name: n1, gpus: 8, model: H100-80GB}
tenants:
  - {name: team-a, guaranteed: 4}
"""


def job(model: str) -> str:
    return f"id: j1\ntenant: team-a\ngpus: 1\nmodels: [{model}]\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "cluster.yaml").write_text(CONFIG)
    for name, model in {"typo": "H100-8GB", "alias": "H100-80G", "other": "A100-80GB"}.items():
        (tmp_path / f"{name}.yaml").write_text(job(model))
    return tmp_path


def test_check_with_the_cluster_is_an_error_with_a_did_you_mean(files):
    out = cli("check", "cluster.yaml", "typo.yaml", cwd=files)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "error: typo.yaml: models: no GPU of model 'H100-8GB' in the cluster"
        " (did you mean 'H100-80GB'?)"
    ]


def test_check_of_the_job_alone_warns_naming_the_model_and_exits_0(files):
    out = cli("check", "typo.yaml", cwd=files)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [
        "warning: typo.yaml: models: 'H100-8GB' is not a GPU model gpuledger knows"
        " (did you mean 'H100-80GB'?); check the job against the cluster:"
        " gpuledger check CONFIG JOB"
    ]
    assert out.stdout.splitlines() == ["ok typo.yaml (job)"]


def test_a_model_the_vocabulary_knows_passes_without_a_word(files):
    """`H100-80G` is `H100-80GB` in gpuledger's vocabulary: it runs on the cluster's GPUs;
    `A100-80GB` is a real model: without the cluster nothing says it is missing."""
    for name in ("alias", "other"):
        out = cli("check", f"{name}.yaml", cwd=files)
        assert (out.returncode, out.stderr) == (0, ""), name
    assert cli("check", "cluster.yaml", "alias.yaml", cwd=files).returncode == 0
    assert unknown_models(["H100-80G", "a100", "A100-80GB"]) == []


def test_admission_rejects_a_model_no_gpu_has_with_a_did_you_mean():
    ledger = given(
        *cluster({"name": "n1", "gpus": 8, "model": "H100-80GB"}, tenants=[{"name": "t"}]),
        submitted_json(job_id="j1", tenant="t", resources={"gpus": 1, "gpu_models": ["H100-8GB"]}),
    )
    (rejected,) = of_type(Admission().decide(ledger, 100), ev.JobRejected)
    assert rejected.reason == "Unschedulable"
    assert rejected.message == (
        "no registered GPU of model ['H100-8GB'] (did you mean 'H100-80GB'?)"
    )


def test_a_suggestion_is_only_made_when_one_is_close():
    assert suggestion("h100_8g", ["H100-80GB", "L4-24GB"]) == " (did you mean 'H100-80GB'?)"
    assert suggestion("MI300X", ["H100-80GB"]) == ""
