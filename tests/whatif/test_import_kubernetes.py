"""The Kubernetes importer on hand-written kubectl dumps (tests/fixtures/kubernetes/: pods,
events, nodes and Kueue workloads shaped like the Kubernetes / Kueue documentation's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.jsonstream import iter_items
from gpuledger.replay.importers.kubernetes import import_kubernetes, quantity
from gpuledger.replay.logio import read_log
from gpuledger.services.cli.main import app

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"


def run(tmp_path, **kw):
    out = tmp_path / "k.jsonl"
    result = import_kubernetes(
        FIX / "pods.json",
        out,
        nodes=FIX / "nodes.json",
        events=FIX / "events.json",
        workloads=FIX / "workloads.json",
        **kw,
    )
    log = list(read_log(out))
    return (
        result.summary,
        log,
        {e.job.job_id: e for _, _, e in log if isinstance(e, ev.JobSubmitted)},
    )


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    return run(tmp_path_factory.mktemp("k8s"))


def test_gangs_from_indexed_jobs_jobsets_and_podgroups(imported):
    summary, _, jobs = imported
    assert (jobs["train"].job.replicas, jobs["train"].job.resources.gpus) == (2, 8)  # indexed Job
    assert (jobs["llm"].job.replicas, jobs["llm"].job.resources.gpus) == (2, 8)  # JobSet
    assert "pg-driver-0" in jobs and "pg-worker-0" in jobs  # a PodGroup of unequal shapes, split
    assert summary["gangs"] == 2 and summary["gangs_split"] == 1
    assert summary["jobs"] == 11


def test_resources_gpu_mig_cpu_memory_and_init_containers(imported):
    _, _, jobs = imported
    nb = jobs["notebook-7f9c6d5b8-q2w4x"].job.resources
    assert (nb.gpus, nb.cpu_milli, nb.memory_mib) == (1, 4000, 32 * 1024)
    assert jobs["mig-infer-5d8f7c9b6-abcde"].job.resources.mig_profile == "3g.40gb"
    web = jobs[
        "web-with-init-1a2b3"
    ].job.resources  # max(600m of containers, 2 of the init container)
    assert (web.gpus, web.cpu_milli, web.memory_mib) == (0, 2000, 1024)


def test_times_pending_deleted_evicted_preempted(imported):
    summary, log, jobs = imported
    assert (
        jobs["train"].job.duration_s == 4 * 3600 - 1
    )  # last member started 09:05:11, ended 13:05:10
    assert jobs["eval-pending-9xk2m"].job.duration_s is None
    assert jobs["notebook-7f9c6d5b8-q2w4x"].job.duration_s is None
    cancels = [e for _, _, e in log if isinstance(e, ev.JobCancelled)]
    assert [c.job_id for c in cancels] == ["sweep-cancelled-4hj7k"]
    evicted = jobs["evicted-etl-6f5e4"]  # no container end: the Evicted event's time
    assert evicted.job.duration_s == (10 * 60 + 4) * 60 + 58 - ((9 * 60 + 45) * 60 + 1)
    assert jobs["preempted-batch-8s9d0"].job.duration_s == 30 * 60 + 14
    assert summary["preempted_events"] == 2 and summary["evicted_events"] == 1
    assert summary["workload_evictions"] == 1


def test_classes_tenants_and_nodes(imported, tmp_path):
    _, log, jobs = imported
    classes = {e.name: e for _, _, e in log if isinstance(e, ev.PriorityClassConfigured)}
    assert classes["high-priority"].value == 1000 and classes["batch-low"].value == 100
    assert classes["default"].value == 0
    assert jobs["train"].job.tenant == "team-a"
    nodes = {e.node.name: e.node for _, _, e in log if isinstance(e, ev.NodeRegistered)}
    assert (
        len(nodes["gpu-node-1"].gpus) == 8
        and nodes["gpu-node-1"].gpus[0].model == "A100-80GB"  # the GPU model vocabulary
    )
    assert nodes["gpu-node-1"].gpus[0].memory_mib == 81920
    assert [g.sharing for g in nodes["mig-node-1"].gpus] == ["mig"]
    assert nodes["cpu-node-1"].gpus == () and nodes["cpu-node-1"].cpu_milli == 64000
    # queues as tenants: the pod's Kueue label, else its Workload's queue
    mapping = tmp_path / "map.yaml"
    mapping.write_text("tenant_from: queue\n")
    _, _, jobs = run(tmp_path, mapping=mapping)
    assert jobs["train"].job.tenant == "team-a/team-a-queue"
    assert jobs["llm"].job.tenant == "team-b/team-b-queue"  # from workloads.json
    assert jobs["preempted-batch-8s9d0"].job.tenant == "team-b/team-b-queue"
    assert jobs["web-with-init-1a2b3"].job.tenant == "team-b"


def test_skipped_items_are_reported(imported):
    summary, _, _ = imported
    assert summary["skipped_rows"] == 3
    reasons = summary["skipped"]
    assert reasons["DaemonSet pod (runs on every node, not scheduled)"]["first"] == [
        f"{FIX / 'pods.json'}:4"
    ]
    assert any("cannot read quantity '4GB'" in r for r in reasons)


def test_replay_places_and_runs_the_imported_jobs(imported, tmp_path):
    from gpuledger.replay.whatif import external_inputs, replay

    _, log, _ = imported
    sim = replay(external_inputs(log))
    states = {j: job.state for j, job in sim.ledger.jobs.items()}
    assert states["train"] == "completed" and states["llm"] == "completed"
    assert states["mig-infer-5d8f7c9b6-abcde"] == "running"
    assert not any(isinstance(e, ev.JobRejected) for _, _, e in sim.log)


def test_stream_reader_errors_and_quantities(tmp_path):
    bad = tmp_path / "pods.json"
    bad.write_text('{"apiVersion": "v1", "items": [{"a": 1}, {"b": ]}')
    with pytest.raises(TraceImportError, match="pods.json:1: not JSON"):
        list(iter_items(bad))
    bad.write_text("[]")
    with pytest.raises(TraceImportError, match="expected a JSON object"):
        list(iter_items(bad))
    assert quantity("500m") == 0.5 and quantity("4Gi") == 4 * 2**30 and quantity("1e3") == 1000
    from gpuledger.replay.importers import jsonstream

    big = tmp_path / "big.json"
    items = [{"metadata": {"name": f"p{i}", "x": "y" * 50}} for i in range(300)]
    import json

    big.write_text(json.dumps({"apiVersion": "v1", "items": items, "kind": "List"}, indent=2))
    old = jsonstream.CHUNK
    jsonstream.CHUNK = 97  # items cut across chunks
    try:
        got = [item for _, item in iter_items(big)]
    finally:
        jsonstream.CHUNK = old
    assert got == items


def test_cli(tmp_path):
    r = CliRunner().invoke(
        app,
        [
            "import",
            "kubernetes",
            "--pods",
            str(FIX / "pods.json"),
            "--nodes",
            str(FIX / "nodes.json"),
            "--events",
            str(FIX / "events.json"),
            "--workloads",
            str(FIX / "workloads.json"),
            "--out",
            str(tmp_path / "k.jsonl"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "jobs 11 (2 gangs, 13 members)" in r.output
    r = CliRunner().invoke(
        app,
        [
            "import",
            "kubernetes",
            "--pods",
            str(FIX / "pods.json"),
            "--out",
            str(tmp_path / "k.jsonl"),
        ],
    )
    assert r.exit_code == 2 and "exactly one of --nodes FILE" in r.output
