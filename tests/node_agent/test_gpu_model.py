"""Model-name normalisation: raw NVML names become <FAMILY>-<GB>GB."""

import pytest

from gpuledger.services.node_agent.gpu_model import model_family, normalise_model


@pytest.mark.parametrize(
    ("raw", "memory_mib", "model"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA H100 PCIe", 81559, "H100-80GB"),
        ("NVIDIA H100 NVL", 95830, "H100-94GB"),
        ("NVIDIA H200", 143771, "H200-141GB"),
        ("NVIDIA H200 NVL", 143771, "H200-141GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 40536, "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", 81251, "A100-80GB"),
        ("Tesla V100-SXM2-16GB", 16160, "V100-16GB"),
        ("Tesla T4", 15360, "T4-16GB"),
        ("NVIDIA L4", 23034, "L4-24GB"),
        ("NVIDIA L40S", 46068, "L40S-48GB"),
        ("NVIDIA A10G", 23028, "A10G-24GB"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX4090-24GB"),
    ],
)
def test_known_gpus_get_their_marketed_model_name(raw, memory_mib, model):
    assert normalise_model(raw, memory_mib) == model


def test_a_size_in_the_name_that_contradicts_the_memory_is_ignored():
    # GH200's name states the module's total memory (HBM + LPDDR), not the GPU's.
    assert normalise_model("NVIDIA GH200 480GB", 97871) == "GH200-96GB"


def test_an_unknown_family_rounds_measured_memory_up_to_whole_gib():
    assert normalise_model("NVIDIA Z9000", 50000) == "Z9000-49GB"


def test_family_drops_vendor_words_and_form_factors():
    assert model_family("NVIDIA A100-SXM4-40GB") == "A100"
    assert model_family("NVIDIA RTX 6000 Ada Generation") == "RTX6000ADA"
    assert model_family("") == "UNKNOWN"
