"""MIG from Slurm and Kubernetes: instances listed per profile become MIG GPUs with fixed
layouts (checked with placement's slot rules); MIG-typed requests become MIG members; a
geometry no GPU can hold is warned about, never skipped silently."""

from __future__ import annotations

import json

import msgspec
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.migmap import pack
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay
from gpuledger.services.cli.main import app
from gpuledger.services.domain.inputs.mig_layouts import parse_layout

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|Priority|Submit|Eligible|Start|End|Elapsed|"
    "Timelimit|State|ExitCode|NNodes|NodeList|ReqTRES|AllocTRES"
)


def _row(job: str, gres: str, run: int = 600, asked: str | None = None) -> str:
    """A sacct row given `gres` (AllocTRES); asked for `asked` (ReqTRES; default the same)."""
    tres = f"cpu=2,{gres},mem=8G,node=1"
    req = tres if asked is None else f"cpu=2,{asked},mem=8G,node=1"
    return (
        f"{job}|{job}|x|u|acct|gpu|normal|1|2024-03-01T09:00:00|2024-03-01T09:00:00|"
        f"2024-03-01T09:00:00|2024-03-01T09:{run // 60:02d}:00|00:10:00|01:00:00|COMPLETED|0:0|1|"
        f"n|{req}|{tres}"
    )


def _files(tmp_path, sinfo: str, rows: list[str]):
    (tmp_path / "sinfo.txt").write_text(sinfo)
    (tmp_path / "sacct.txt").write_text("\n".join([HEADER, *rows]) + "\n")
    return tmp_path / "sacct.txt", tmp_path / "sinfo.txt"


def test_packing_fills_gpus_largest_first_with_valid_layouts():
    layouts = pack({"1g.10gb": 14, "3g.40gb": 2}, "A100-80GB")
    assert layouts == [
        ("3g.40gb@0", "3g.40gb@4"),
        tuple(f"1g.10gb@{s}" for s in range(7)),
        tuple(f"1g.10gb@{s}" for s in range(7)),
    ]
    for layout in layouts:  # the configuration's own layout check accepts each
        parse_layout("A100-80GB", layout)
    assert pack({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}, "H100-80GB") == [
        ("2g.20gb@0", "1g.10gb@2", "3g.40gb@4")
    ]


def test_slurm_mig_gres_become_mig_gpus_and_mig_jobs(tmp_path):
    """Given sinfo `gpu:1g.10gb:14(S:0),gpu:3g.40gb:2(S:1)` and jobs asking for one 1g.10gb,
    two 1g.10gb and one 3g.40gb instance, when imported and replayed, then the node has 3 MIG
    GPUs (16 instances) and every job runs on MIG slots (before: 16 whole GPUs of model
    `1g.10gb`, whole-GPU jobs)."""
    sacct, sinfo = _files(
        tmp_path,
        "mig-01|64|515000|gpu:1g.10gb:14(S:0),gpu:3g.40gb:2(S:1)|gpu\n",
        [
            _row("1", "gres/gpu:1g.10gb=1,gres/gpu=1"),
            _row("2", "gres/gpu:1g.10gb=2,gres/gpu=2"),
            _row("3", "gres/gpu:3g.40gb=1,gres/gpu=1"),
        ],
    )
    out = tmp_path / "s.jsonl"
    summary = import_slurm(sacct, out, sinfo=sinfo).summary
    assert summary["gpus"] == 3 and "warnings" not in summary
    assert summary["by_shape"] == {"mig-1g.10gb": 2, "mig-3g.40gb": 1}
    log = list(read_log(out))
    (node,) = [e.node for _, _, e in log if isinstance(e, ev.NodeRegistered)]
    assert [(g.model, g.sharing) for g in node.gpus] == [("A100-80GB", "mig")] * 3
    assert sum(len(g.mig_layout) for g in node.gpus) == 16
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert (jobs["1"].resources.mig_profile, jobs["1"].replicas) == ("1g.10gb", 1)
    assert (jobs["2"].resources.mig_profile, jobs["2"].replicas) == ("1g.10gb", 2)
    assert jobs["2"].resources.cpu_milli == 1000  # 2 CPUs over 2 members
    assert jobs["3"].resources.mig_profile == "3g.40gb"

    sim = replay(external_inputs(log))
    for j in ("1", "2", "3"):
        members = [m for _, ms in sim.ledger.jobs[j].placements for m in ms]
        assert members and all(m.mig_profile == jobs[j].resources.mig_profile for m in members)


def test_untyped_gpus_given_slices_of_two_profiles_are_members_of_the_smallest(tmp_path):
    """Given a job that asked for `--gres=gpu:2` (untyped) and was given a 1g.10gb and a
    3g.40gb instance (the real Slurm's `urgent2`), when imported, then it is two members of
    the smallest profile it was given (any instance would have done), not a skipped row; a
    job that named both profiles is still skipped (a member holds one MIG instance)."""
    sacct, sinfo = _files(
        tmp_path,
        "mig-01|64|515000|gpu:1g.10gb:4(S:0),gpu:3g.40gb:1(S:1)|gpu\n",
        [
            _row("1", "gres/gpu:1g.10gb=1,gres/gpu:3g.40gb=1,gres/gpu=2", asked="gres/gpu=2"),
            _row("2", "gres/gpu:1g.10gb=1,gres/gpu:3g.40gb=1,gres/gpu=2"),
        ],
    )
    summary = import_slurm(sacct, tmp_path / "s.jsonl", sinfo=sinfo).summary
    jobs = {
        e.job.job_id: e.job
        for _, _, e in read_log(tmp_path / "s.jsonl")
        if isinstance(e, ev.JobSubmitted)
    }
    assert (jobs["1"].resources.mig_profile, jobs["1"].replicas) == ("1g.10gb", 2)
    assert "2" not in jobs and summary["skipped_rows"] == 1


def test_impossible_slurm_geometry_and_mixed_requests_are_reported(tmp_path):
    sacct, sinfo = _files(
        tmp_path,
        "odd-01|64|515000|gpu:1g.5gb:1,gpu:1g.18gb:1,gpu:h100:2|gpu\n",
        [_row("1", "gres/gpu:1g.10gb=1,gres/gpu:3g.40gb=1,gres/gpu=2")],
    )
    result = CliRunner().invoke(
        app,
        [
            "import",
            "slurm",
            "--sacct",
            str(sacct),
            "--sinfo",
            str(sinfo),
            "--out",
            str(tmp_path / "o.jsonl"),
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    warnings = [w for w in result.stderr.splitlines() if w.startswith("warning:")]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"warning: {sinfo}:1: node odd-01: MIG instances 1 x 1g.18gb, 1 x 1g.5gb fit no GPU "
        "model (known profiles: A100-40GB: 1g.5gb,"
    )
    assert warnings[0].endswith("; left out")
    summary = json.loads(result.stdout)
    assert summary["gpus"] == 2  # the two whole H100s stay
    assert summary["skipped_rows"] == 1
    (reason,) = summary["skipped"]
    assert "asks for MIG instances of several profiles" in reason


def _k8s_node(name: str, labels: dict, capacity: dict) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", **capacity}},
    }


def test_kubernetes_mig_labels_become_layouts_and_an_impossible_count_is_warned(tmp_path):
    product = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/mig.strategy": "mixed",
    }
    nodes = [
        _k8s_node(
            "mig-a",
            {
                **product,
                "nvidia.com/gpu.count": "2",
                "nvidia.com/mig-1g.10gb.count": "7",
                "nvidia.com/mig-3g.40gb.count": "2",
            },
            {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
        ),
        _k8s_node(
            "mig-b",
            {**product, "nvidia.com/gpu.count": "2", "nvidia.com/mig-7g.80gb.count": "3"},
            {"nvidia.com/mig-7g.80gb": "3"},
        ),
    ]
    (tmp_path / "nodes.json").write_text(json.dumps({"items": nodes}))
    (tmp_path / "pods.json").write_text(json.dumps({"items": []}))
    out = tmp_path / "k.jsonl"
    summary = import_kubernetes(tmp_path / "pods.json", out, nodes=tmp_path / "nodes.json").summary
    registered = {
        e.node.name: e.node for _, _, e in read_log(out) if isinstance(e, ev.NodeRegistered)
    }
    a = registered["mig-a"].gpus
    assert [(g.model, g.mig_layout) for g in a] == [
        ("H100-80GB", ("3g.40gb@0", "3g.40gb@4")),
        ("H100-80GB", tuple(f"1g.10gb@{s}" for s in range(7))),
    ]
    b = registered["mig-b"].gpus
    assert [(g.sharing, g.mig_layout) for g in b] == [("mig", msgspec.UNSET)] * 2
    assert summary["warnings"] == [
        f"{tmp_path / 'nodes.json'}:1: node mig-b: MIG instances 3 x 7g.80gb need 3 H100-80GB "
        "GPUs, the node has 2; its GPUs are partitioned on demand instead"
    ]


def test_kubernetes_single_strategy_nodes_and_their_pods_are_mig(tmp_path):
    """Under GFD's single strategy a node's `nvidia.com/gpu` are MIG instances of the profile
    in its product label; a pod placed there asking for one GPU asks for one instance."""
    node = _k8s_node(
        "single-1",
        {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.count": "1",
        },
        {"nvidia.com/gpu": "7"},
    )

    def pod(name: str, gpus: str, node_name: str | None) -> dict:
        return {
            "metadata": {
                "name": name,
                "namespace": "ml",
                "creationTimestamp": "2024-03-01T09:00:00Z",
            },
            "spec": {
                **({"nodeName": node_name} if node_name else {}),
                "containers": [{"resources": {"requests": {"nvidia.com/gpu": gpus}}}],
            },
            "status": {"phase": "Pending"},
        }

    (tmp_path / "nodes.json").write_text(json.dumps({"items": [node]}))
    pods = [pod("on-it", "1", "single-1"), pod("two", "2", "single-1"), pod("unbound", "1", None)]
    (tmp_path / "pods.json").write_text(json.dumps({"items": pods}))
    out = tmp_path / "k.jsonl"
    summary = import_kubernetes(tmp_path / "pods.json", out, nodes=tmp_path / "nodes.json").summary
    log = list(read_log(out))
    (registered,) = [e.node for _, _, e in log if isinstance(e, ev.NodeRegistered)]
    assert [(g.model, g.mig_layout) for g in registered.gpus] == [
        ("A100-80GB", tuple(f"1g.10gb@{s}" for s in range(7)))
    ]
    jobs = {e.job.job_id: e.job.resources for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert (jobs["on-it"].mig_profile, jobs["on-it"].gpus) == ("1g.10gb", 0)
    assert jobs["unbound"].gpus == 1  # not bound to a node: its GPU stays a whole GPU
    assert summary["skipped_rows"] == 1
    assert "asks for 2 MIG 1g.10gb instances on node single-1" in next(iter(summary["skipped"]))
