"""Kubernetes node pools: a pod's `nodeSelector` and required node affinity (`In`, one value)
become its job's node selector; nodes keep the labels pods select on; the replay places each
pod only in its pool."""

from __future__ import annotations

import json

from gpuledger import events as ev
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.labels import pod_selector
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay

POOL = "cloud.google.com/gke-nodepool"


def _node(name: str, pool: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {
                POOL: pool,
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            },
        },
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}},
    }


def _pod(name: str, created: int, run: int, **spec) -> dict:
    t = lambda s: f"2024-03-01T09:{s // 60:02d}:{s % 60:02d}Z"  # noqa: E731
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": t(created)},
        "spec": {
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8", "cpu": "8"}}}],
            **spec,
        },
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {"state": {"terminated": {"startedAt": t(created), "finishedAt": t(created + run)}}}
            ],
        },
    }


def _affinity(*exprs: dict, terms: int = 1) -> dict:
    term = {"matchExpressions": list(exprs)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term] * terms}
        }
    }


def test_the_supported_subset_of_node_affinity():
    a100 = {"key": POOL, "operator": "In", "values": ["a100"]}
    assert pod_selector({"affinity": _affinity(a100)}) == ({POOL: "a100"}, False)
    assert pod_selector({"nodeSelector": {"zone": "eu"}, "affinity": _affinity(a100)}) == (
        {POOL: "a100", "zone": "eu"},
        False,
    )
    two = {"key": POOL, "operator": "In", "values": ["a100", "h100"]}
    assert pod_selector({"affinity": _affinity(two)}) == ({}, True)
    assert pod_selector({"affinity": _affinity({"key": "gpu", "operator": "Exists"}, a100)}) == (
        {POOL: "a100"},
        True,
    )
    assert pod_selector({"affinity": _affinity(a100, terms=2)}) == ({}, True)
    assert pod_selector({"nodeSelector": {POOL: "h100"}, "affinity": _affinity(a100)}) == (
        {POOL: "h100"},
        True,
    )


def test_pods_replay_in_their_node_pool(tmp_path):
    nodes = [_node("a-1", "a100"), _node("h-1", "h100"), _node("h-2", "h100")]
    pods = [
        _pod("p0", 0, 600, nodeSelector={POOL: "a100"}),
        _pod("p1", 0, 600, affinity=_affinity({"key": POOL, "operator": "In", "values": ["a100"]})),
        _pod("p2", 0, 600),
        _pod("p3", 0, 60, nodeSelector={POOL: "v100"}),
        _pod("p4", 0, 60, affinity=_affinity({"key": POOL, "operator": "NotIn", "values": ["x"]})),
    ]
    (tmp_path / "nodes.json").write_text(json.dumps({"items": nodes}))
    (tmp_path / "pods.json").write_text(json.dumps({"items": pods}))
    out = tmp_path / "k.jsonl"
    summary = import_kubernetes(tmp_path / "pods.json", out, nodes=tmp_path / "nodes.json").summary
    assert summary["jobs"] == 5
    assert summary["node_selected"] == 3
    assert summary["node_selector_unmatched"] == 1  # p3: no v100 pool
    assert summary["node_affinity_ignored"] == 1  # p4: NotIn
    log = list(read_log(out))
    registered = {e.node.name: e.node for _, _, e in log if isinstance(e, ev.NodeRegistered)}
    assert registered["a-1"].labels == {POOL: "a100"}  # hostname, product: nobody selects them
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert jobs["p1"].node_selector == {POOL: "a100"}
    assert not jobs["p2"].node_selector

    sim = replay(external_inputs(log))
    ran = {
        j: [(at, m.node) for at, members in rec.placements for m in members]
        for j, rec in sim.ledger.jobs.items()
    }
    # p0 and p1 share the one a100 node: one waits for the other; p2 goes anywhere
    assert sorted(n for j in ("p0", "p1") for _, n in ran[j]) == ["a-1", "a-1"]
    assert sorted(at for j in ("p0", "p1") for at, _ in ran[j])[1] >= 600_000
    assert not ran["p3"]
