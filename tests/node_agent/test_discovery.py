"""Discovery through a fake NVML: inventory, MIG, cliques, and failures."""

import sys

import pynvml
import pytest

from gpuledger.services.node_agent import nvml_discovery
from gpuledger.services.node_agent.nvml_discovery import NvmlUnavailable, describe, discover
from tests.node_agent.fake_nvml import (
    FakeGpu,
    FakeNvml,
    a100_mig_node,
    fabric_node,
    h100_node,
    h200_node,
)


def test_eight_h100_fully_nvlinked_are_one_healthy_clique(monkeypatch):
    # Given an 8 x H100 node with NVLink between every pair
    fake = h100_node().install(monkeypatch)
    # When the agent discovers it
    inv = discover(pynvml, host="node1")
    # Then it sees 8 healthy H100-80GB in one clique, and released NVML afterwards
    assert inv.driver_version == "550.54.15"
    assert inv.cuda_version == "12.4"
    assert [g.index for g in inv.gpus] == list(range(8))
    assert {g.model for g in inv.gpus} == {"H100-80GB"}
    assert {g.memory_mib for g in inv.gpus} == {81559}
    assert {g.clique for g in inv.gpus} == {"node1-nvl0"}
    assert all(g.healthy and g.health_reason is None for g in inv.gpus)
    assert all(not g.mig_enabled and g.mig_instances == () for g in inv.gpus)
    assert inv.gpus[3].uuid == "GPU-h1000003-0000-0000-0000-000000000000"
    assert inv.gpus[3].name == "NVIDIA H100 80GB HBM3"
    assert fake.initialised == 0


def test_two_nvlink_islands_are_two_cliques(monkeypatch):
    h100_node(islands=[[0, 1, 2, 3], [4, 5, 6, 7]]).install(monkeypatch)
    inv = discover(pynvml, host="node2")
    assert [g.clique for g in inv.gpus] == ["node2-nvl0"] * 4 + ["node2-nvl4"] * 4


def test_gpus_without_nvlink_are_singleton_cliques(monkeypatch):
    h100_node(islands=[]).install(monkeypatch)
    inv = discover(pynvml, host="n")
    assert [g.clique for g in inv.gpus] == [f"n-nvl{i}" for i in range(8)]


def test_clique_prefix_defaults_to_the_short_hostname(monkeypatch):
    h100_node().install(monkeypatch)
    monkeypatch.setattr(nvml_discovery.socket, "gethostname", lambda: "gpu-17.dc1.example")
    assert discover(pynvml).gpus[0].clique == "gpu-17-nvl0"


def test_a100_in_mig_mode_reports_seven_1g_instances_with_profile_ids(monkeypatch):
    # Given an A100-40GB in MIG mode with seven 1g.5gb instances
    a100_mig_node().install(monkeypatch)
    # When discovered
    (gpu,) = discover(pynvml, host="n").gpus
    # Then MIG is on and every instance has profile id 19 (not the profile index 0),
    # a one-slice placement 0..6, its MIG UUID and its instance ids
    assert gpu.model == "A100-40GB"
    assert gpu.mig_enabled
    assert [m.profile_id for m in gpu.mig_instances] == [19] * 7
    assert {m.profile_name for m in gpu.mig_instances} == {"1g.5gb"}
    assert [(m.placement_start, m.placement_size) for m in gpu.mig_instances] == [
        (i, 1) for i in range(7)
    ]
    assert [m.gpu_instance_id for m in gpu.mig_instances] == list(range(7, 14))
    assert {m.compute_instance_id for m in gpu.mig_instances} == {0}
    assert gpu.mig_instances[0].uuid == "MIG-a1000000-0000-0000-0000-000000000000"
    assert gpu.clique == "n-nvl0"
    assert gpu.healthy


def test_mig_profile_names_fall_back_to_the_table_when_nvml_has_none(monkeypatch):
    fake = a100_mig_node()
    fake.gpus[0].profiles = {}
    fake.install(monkeypatch)
    (gpu,) = discover(pynvml, host="n").gpus
    assert {m.profile_name for m in gpu.mig_instances} == {"1g.5gb"}


def test_mig_enabled_gpus_do_not_join_nvlink_cliques(monkeypatch):
    fake = h100_node()
    fake.gpus[2].mig_enabled = True  # no instances yet
    fake.install(monkeypatch)
    inv = discover(pynvml, host="n")
    assert inv.gpus[2].clique == "n-nvl2"
    assert {inv.gpus[i].clique for i in (0, 1, 3, 4, 5, 6, 7)} == {"n-nvl0"}


def test_h200_is_named_with_its_marketed_memory(monkeypatch):
    h200_node().install(monkeypatch)
    (gpu,) = discover(pynvml, host="n").gpus
    assert (gpu.model, gpu.memory_mib, gpu.name) == ("H200-141GB", 143771, "NVIDIA H200")


def test_multi_node_fabric_gpus_use_cluster_uuid_and_clique_id(monkeypatch):
    cluster = bytes.fromhex("5f0e6a1c2b3d4e5f60718293a4b5c6d7")
    fabric_node(cluster, 32766).install(monkeypatch)
    inv = discover(pynvml, host="n")
    assert {g.clique for g in inv.gpus} == {"5f0e6a1c-2b3d-4e5f-6071-8293a4b5c6d7.32766"}
    assert {g.model for g in inv.gpus} == {"GB200-186GB"}


def test_an_all_zero_cluster_uuid_falls_back_to_host_nvlink_cliques(monkeypatch):
    fabric_node(bytes(16), 0).install(monkeypatch)
    assert {g.clique for g in discover(pynvml, host="n").gpus} == {"n-nvl0"}


def test_a_fabric_not_yet_completed_falls_back_to_host_cliques(monkeypatch):
    fake = fabric_node(b"\x11" * 16, 3)
    for gpu in fake.gpus:
        gpu.fabric.state = pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
    fake.install(monkeypatch)
    assert {g.clique for g in discover(pynvml, host="n").gpus} == {"n-nvl0"}


def test_an_nvml_error_on_one_gpu_marks_it_unhealthy_and_spares_the_others(monkeypatch):
    # Given GPU 5's name query fails
    fake = h100_node()
    fake.gpus[5].failures["nvmlDeviceGetName"] = pynvml.NVML_ERROR_UNKNOWN
    fake.install(monkeypatch)
    # When discovered
    inv = discover(pynvml, host="n")
    # Then GPU 5 is unhealthy with the reason, known by its UUID; the rest are fine
    bad = inv.gpus[5]
    assert not bad.healthy
    assert bad.health_reason == "NVML error in nvmlDeviceGetName: Unknown Error"
    assert bad.uuid == "GPU-h1000005-0000-0000-0000-000000000000"
    assert bad.model == "UNKNOWN"
    assert bad.clique == "n-nvl5"  # an unhealthy GPU is in no one's clique
    assert all(g.healthy for g in inv.gpus if g.index != 5)
    assert {g.clique for g in inv.gpus if g.index != 5} == {"n-nvl0"}


def test_a_lost_gpu_is_reported_unhealthy_with_a_placeholder_uuid(monkeypatch):
    fake = h100_node()
    fake.gpus[0].lost = True
    fake.install(monkeypatch)
    gpu = discover(pynvml, host="n").gpus[0]
    assert (gpu.healthy, gpu.uuid) == (False, "unknown:0")
    assert gpu.health_reason == "GPU is lost (nvmlDeviceGetHandleByIndex)"


def test_a_mig_layout_that_cannot_be_read_makes_the_gpu_unhealthy(monkeypatch):
    fake = a100_mig_node()
    fake.gpus[0].failures["nvmlDeviceGetGpuInstanceById"] = pynvml.NVML_ERROR_NO_PERMISSION
    fake.install(monkeypatch)
    (gpu,) = discover(pynvml, host="n").gpus
    assert not gpu.healthy
    assert gpu.health_reason.startswith("MIG layout unreadable")
    assert "root" in gpu.health_reason


def test_uncorrected_ecc_errors_make_a_gpu_unhealthy(monkeypatch):
    fake = h100_node()
    fake.gpus[1].ecc_uncorrected_volatile = 2
    fake.install(monkeypatch)
    gpu = discover(pynvml, host="n").gpus[1]
    assert not gpu.healthy
    assert gpu.health_reason == "2 uncorrected ECC error(s) since the last driver load"


def test_gpus_without_ecc_are_healthy(monkeypatch):
    fake = FakeNvml(
        [
            FakeGpu(
                uuid="GPU-x", name="NVIDIA GeForce RTX 4090", memory_mib=24564, ecc_supported=False
            )
        ]
    )
    fake.install(monkeypatch)
    (gpu,) = discover(pynvml, host="n").gpus
    assert gpu.healthy and gpu.model == "RTX4090-24GB"


def test_nvml_init_failure_raises_nvml_unavailable_with_a_clear_message(monkeypatch):
    FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED).install(monkeypatch)
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded.*NVIDIA driver installed"):
        discover(pynvml)


def test_missing_pynvml_module_raises_nvml_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py"):
        discover()


def test_real_nvml_without_a_driver_raises_nvml_unavailable():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has a working NVML")
    with pytest.raises(NvmlUnavailable):
        discover(pynvml)


def test_describe_summarises_gpus_and_mig_instances(monkeypatch):
    fake = a100_mig_node()
    fake.install(monkeypatch)
    text = describe(discover(pynvml, host="n"))
    assert text.splitlines()[0] == "driver 550.54.15, CUDA 12.4, 1 GPU(s)"
    assert "A100-40GB 40960 MiB clique=n-nvl0, MIG 7 instance(s)" in text
    assert "1g.5gb (id 19) @6:1 gi=13 ci=0 MIG-a1000006" in text
    assert len(text.splitlines()) == 1 + 1 + 7


def test_describe_shows_unhealthy_reasons(monkeypatch):
    fake = h100_node()
    fake.gpus[0].lost = True
    fake.install(monkeypatch)
    assert "UNHEALTHY: GPU is lost" in describe(discover(pynvml, host="n"))
