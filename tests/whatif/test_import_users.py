"""Importers keep who submitted each job (`JobSpec.user`): Slurm's sacct `User`, a
Kubernetes pod's user annotation (or label), a CSV mapping's `user:` column. A name a
subject token cannot hold is made one (`.` -> `_`); no user recorded: unset (shown `-`)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from gpuledger import events as ev
from gpuledger.replay.importers.common import spec_user
from gpuledger.replay.importers.csvtrace import import_csv
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log

FIX = Path(__file__).resolve().parents[1] / "fixtures"
NODES = FIX / "csv" / "nodes.yaml"


def submitted(path: Path) -> dict[str, ev.JobSpec]:
    return {e.job.job_id: e.job for _, _, e in read_log(path) if isinstance(e, ev.JobSubmitted)}


def test_slurm_jobs_carry_the_sacct_user(tmp_path):
    # given the sacct dump (job 1001 by alice, 1002 by bob, ...)
    out = tmp_path / "slurm.jsonl"
    # when it is imported
    import_slurm(FIX / "slurm" / "sacct.txt", out, sinfo=FIX / "slurm" / "sinfo.txt")
    # then every job's spec names its sacct User, the array its first task's
    jobs = submitted(out)
    assert jobs["1001"].user == "alice"
    assert all(isinstance(j.user, str) and j.user for j in jobs.values())


def test_a_csv_mapping_user_column_becomes_the_jobs_user(tmp_path):
    # given the CSV fixture's mapping with a `user:` column added
    mapping = (
        (FIX / "csv" / "mapping.yaml")
        .read_text()
        .replace("  id: job_id\n", "  id: job_id\n  user: user\n")
    )
    (tmp_path / "mapping.yaml").write_text(mapping)
    out = tmp_path / "csv.jsonl"
    # when the trace is imported
    import_csv(FIX / "csv" / "jobs.csv", out, mapping=tmp_path / "mapping.yaml", nodes_file=NODES)
    # then each job carries its row's user (tenant still from the same column's map)
    jobs = submitted(out)
    assert (jobs["j-0001"].user, jobs["j-0001"].tenant) == ("alice", "research/vision")
    assert jobs["j-0002"].user == "bob"


def test_a_csv_mapping_without_user_leaves_jobs_without_one(tmp_path):
    out = tmp_path / "csv.jsonl"
    import_csv(
        FIX / "csv" / "jobs.csv", out, mapping=FIX / "csv" / "mapping.yaml", nodes_file=NODES
    )
    assert {j.submitter for j in submitted(out).values()} == {"-"}
    assert b'"user"' not in out.read_bytes()  # unset: the JSON is what it was before users


def test_a_kubernetes_pods_user_annotation_or_label_becomes_the_jobs_user(tmp_path):
    # given the pod dump where the notebook pod is annotated and the train gang labelled
    pods = json.loads((FIX / "kubernetes" / "pods.json").read_text())
    for pod in pods["items"]:
        meta = pod["metadata"]
        if meta["name"].startswith("notebook-"):
            meta.setdefault("annotations", {})["gpuledger.io/user"] = "dana.r"
        if meta["name"].startswith("train-"):
            meta.setdefault("labels", {})["user"] = "erik"
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    out = tmp_path / "k.jsonl"
    # when imported
    import_kubernetes(tmp_path / "pods.json", out, nodes=FIX / "kubernetes" / "nodes.json")
    # then the notebook is dana_r's ('.' cannot be in a subject token), the gang erik's,
    # and a pod naming nobody has no user
    jobs = submitted(out)
    notebook = next(j for k, j in jobs.items() if k.startswith("notebook-"))
    assert notebook.user == "dana_r"
    assert jobs["train"].user == "erik"
    assert {j.submitter for k, j in jobs.items() if k.startswith("mig-infer")} == {"-"}


def test_source_user_names_become_subject_tokens():
    assert spec_user("john.doe") == "john_doe"
    assert spec_user("a b*c>d") == "a_b_c_d"
    assert spec_user("x" * 300) == "x" * 128
    assert spec_user(None) is msgspec.UNSET and spec_user("") is msgspec.UNSET
