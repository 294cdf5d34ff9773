"""One GPU model vocabulary: the names Slurm, Kubernetes, NVML, traces and configurations use
for one GPU map to one canonical name; a family named without a size matches every size;
unknown names are kept verbatim and listed in one warning."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.services.domain.inputs.gpu_models import (
    CANONICAL,
    Vocabulary,
    canonical,
    job_models,
    resolve,
    resolve_node,
)

SAME_GPU = [
    # (source, name, canonical)
    ("config", "A100-80GB", "A100-80GB"),
    ("slurm gres type", "a100_80g", "A100-80GB"),
    ("slurm gres type", "a100-80gb", "A100-80GB"),
    ("kubernetes gpu.product", "NVIDIA-A100-SXM4-80GB", "A100-80GB"),
    ("kubernetes gpu.product", "NVIDIA-A100-80GB-PCIe", "A100-80GB"),
    (
        "kubernetes gpu.product, MIG single strategy",
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "A100-80GB",
    ),
    ("nvml", "NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("nvml", "NVIDIA A100-SXM4-40GB", "A100-40GB"),
    ("kubernetes gpu.product", "NVIDIA-H100-80GB-HBM3", "H100-80GB"),
    ("nvml", "NVIDIA H100 NVL", "H100-94GB"),
    ("kubernetes gpu.product", "NVIDIA-H200", "H200-141GB"),
    ("kubernetes gpu.product", "Tesla-V100-SXM2-16GB", "V100-16GB"),
    ("trace code", "V100M16", "V100-16GB"),
    ("trace code", "V100M32", "V100-32GB"),
    ("slurm gres type", "v100s", "V100-32GB"),
    ("slurm gres type", "t4", "T4-16GB"),
    ("kubernetes gpu.product", "Tesla-T4", "T4-16GB"),
    ("slurm gres type", "l40s", "L40S-48GB"),
    ("kubernetes gpu.product", "NVIDIA-A10G", "A10G-24GB"),
]


@pytest.mark.parametrize(
    "source, name, expected", SAME_GPU, ids=[f"{s}:{n}" for s, n, _ in SAME_GPU]
)
def test_every_sources_name_maps_to_the_canonical_one(source, name, expected):
    assert canonical(name) == expected
    assert expected in CANONICAL


def test_a_family_of_several_sizes_named_without_one_is_the_family():
    assert canonical("a100") == canonical("A100") == "A100"
    assert canonical("NVIDIA H100 PCIe") == "H100"
    # a job asking for the family runs on any size; a node with its memory gets the size
    assert job_models(("a100",)) == ("A100", "A100-40GB", "A100-80GB")
    assert resolve_node("A100", 81_920) == "A100-80GB"
    assert resolve_node("a100", 0) == "A100"
    # a site's alias says what its name means
    assert resolve("a100", {"a100": "A100-80GB"}) == "A100-80GB"
    assert job_models(("a100",), {"a100": "A100-80GB"}) == ("A100-80GB",)


def test_unknown_names_are_kept_verbatim_and_warned_about_once():
    vocab = Vocabulary()
    assert vocab.node("G2") == "G2"
    assert vocab.job(("G3", "t4")) == ("G3", "T4-16GB")
    assert vocab("G2") == "G2"
    assert vocab.warning() == (
        "GPU model names not in the vocabulary, kept verbatim: G2, G3 (map them with the "
        "mapping's gpu_models: {NAME: CANONICAL}, e.g. {a100: A100-80GB})"
    )
    assert Vocabulary().warning() is None


def test_a_configuration_and_a_job_file_use_the_vocabulary():
    from gpuledger.services.domain.inputs.configfile import config_events, node_infos
    from gpuledger.services.domain.inputs.jobfile import job_spec

    doc = {
        "cluster": {"nodes": [{"name": "n1", "gpus": 2, "model": "A100", "gpu_memory": "80Gi"}]},
        "tenants": [{"name": "t", "guaranteed_by_model": {"NVIDIA-A100-SXM4-80GB": 2}}],
    }
    (node,) = node_infos(doc)
    assert {g.model for g in node.gpus} == {"A100-80GB"}
    (tenant,) = [e for e in config_events(doc) if isinstance(e, ev.TenantConfigured)]
    assert tenant.guaranteed_by_model == {"A100-80GB": 2000}
    spec = job_spec({"id": "j", "tenant": "t", "gpus": 1, "models": ["a100"]})
    assert "A100-80GB" in spec.resources.gpu_models


def test_an_overlay_naming_a_model_another_way_changes_the_recorded_key():
    from gpuledger.replay.overlay import Overlay
    from gpuledger.services.domain.inputs.configfile import config_events

    recorded = config_events(
        {"tenants": [{"name": "t", "guaranteed": 4, "guaranteed_by_model": {"A100-80GB": 2}}]}
    )
    overlay = Overlay(recorded)
    overlay.set("tenants.t.guaranteed_by_model.a100_80g=3")
    (tenant,) = [e for e in overlay.events(0) if isinstance(e, ev.TenantConfigured)]
    assert tenant.guaranteed_by_model == {"A100-80GB": 3000}


HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|Priority|Submit|Eligible|Start|End|Elapsed|"
    "Timelimit|State|ExitCode|NNodes|NodeList|ReqTRES|AllocTRES"
)


def _sacct(tmp_path, gres_type: str):
    tres = f"cpu=8,gres/gpu:{gres_type}=8,gres/gpu=8,mem=64G,node=1"
    row = (
        f"1|1|x|u|acct|gpu|normal|1|2024-03-01T09:00:00|2024-03-01T09:00:00|2024-03-01T09:00:00|"
        f"2024-03-01T10:00:00|01:00:00|02:00:00|COMPLETED|0:0|1|n|{tres}|{tres}"
    )
    path = tmp_path / "sacct.txt"
    path.write_text(f"{HEADER}\n{row}\n")
    return path


def test_a_slurm_job_of_gres_type_a100_runs_on_nodes_configured_as_a100_80gb(tmp_path):
    """Given nodes from a configuration (`A100-80GB`) and a sacct job `gres/gpu:a100=8`, when
    imported and replayed, then the job runs (before: `a100` matched no node)."""
    from gpuledger.replay.importers.slurm import import_slurm
    from gpuledger.replay.logio import read_log
    from gpuledger.replay.whatif import external_inputs, replay

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump({"cluster": {"nodes": [{"name": "n1", "gpus": 8, "model": "A100-80GB"}]}})
    )
    out = tmp_path / "s.jsonl"
    summary = import_slurm(_sacct(tmp_path, "a100"), out, nodes_file=nodes).summary
    assert "warnings" not in summary
    sim = replay(external_inputs(list(read_log(out))))
    assert sim.ledger.jobs["1"].placements


def test_import_warns_once_about_unknown_gres_types(tmp_path):
    from gpuledger.services.cli.main import app

    sinfo = tmp_path / "sinfo.txt"
    sinfo.write_text("n1|64|1031000|gpu:mystery9:8(S:0-1)\n")
    result = CliRunner().invoke(
        app,
        [
            "import",
            "slurm",
            "--sacct",
            str(_sacct(tmp_path, "mystery9")),
            "--sinfo",
            str(sinfo),
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: GPU model names not in the vocabulary, kept verbatim: mystery9 (map them "
        "with the mapping's gpu_models: {NAME: CANONICAL}, e.g. {a100: A100-80GB})"
    ]
