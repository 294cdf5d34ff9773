"""Telemetry: SM activity (GPM or utilisation rates), memory used, health, per MIG too."""

import pynvml
import pytest

from gpuledger.services.node_agent.nvml_discovery import discover
from gpuledger.services.node_agent.telemetry import Sampler, ratio, sample
from tests.node_agent.fake_nvml import a100_mig_node, h100_node, h200_node


def _discovered(fake, monkeypatch):
    fake.install(monkeypatch)
    return discover(pynvml, host="n").gpus


def _with_nvml(fake):
    """Sampling happens between nvmlInit and nvmlShutdown (the shell holds NVML open)."""
    fake.nvmlInit()
    return fake


def test_h200_reports_gpm_sm_activity_from_the_second_sample_on(monkeypatch):
    # Given an H200 that supports GPM, 37.5 % of its SMs busy, 2048 MiB used
    fake = h200_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    fake.gpus[0].sm_util_pct = 37.5
    fake.gpus[0].memory_used_mib = 2048
    with Sampler(pynvml) as sampler:
        # When sampled twice
        first = sampler.sample(gpus)
        second = sampler.sample(gpus)
        # Then the first has no ratio yet, the second has SM activity from GPM
        assert (first[0].sm_active, first[0].util_source) == (None, None)
        (row,) = second
        assert (row.uuid, row.mig_uuid) == (gpus[0].uuid, None)
        assert (row.sm_active, row.util_source) == (0.375, "gpm")
        assert row.memory_used_mib == 2048
        assert row.healthy and row.health_reason is None
    # and every GPM sample buffer was freed
    assert fake.live_gpm_samples == 0


def test_gpus_without_gpm_report_nvml_utilisation_rates_labelled_as_such(monkeypatch):
    fake = h100_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    for gpu in fake.gpus:
        gpu.gpm_supported = False
        gpu.gpu_util_pct = 100
    rows = sample(pynvml, gpus)
    assert len(rows) == 8
    assert {(r.sm_active, r.util_source) for r in rows} == {(1.0, "nvml_utilization")}


def test_a100_in_mig_mode_reports_the_gpu_and_each_instance(monkeypatch):
    # Given an A100 in MIG mode (no GPM before Hopper) with memory used on instance 2
    fake = a100_mig_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    fake.gpus[0].migs[2].memory_used_mib = 1500
    fake.gpus[0].memory_used_mib = 1500
    # When sampled
    rows = Sampler(pynvml).sample(gpus)
    # Then one row for the GPU and one per MIG instance, with no utilisation source
    # (utilisation rates are not offered for MIG devices, and are not faked from the GPU)
    assert [r.mig_uuid for r in rows] == [None] + [m.uuid for m in gpus[0].mig_instances]
    assert {(r.sm_active, r.util_source) for r in rows} == {(None, None)}
    assert [r.memory_used_mib for r in rows] == [1500, 0, 0, 1500, 0, 0, 0, 0]
    assert all(r.healthy for r in rows)


def test_mig_instances_on_gpm_gpus_report_their_own_sm_activity(monkeypatch):
    # Given an H100 in MIG mode, GPM supported, two 3g instances with different loads
    from tests.node_agent.fake_nvml import FakeMig

    fake = h100_node()
    fake.gpus = fake.gpus[:1]
    fake.gpus[0].mig_enabled = True
    fake.gpus[0].migs = [
        FakeMig(
            "MIG-a",
            gpu_instance_id=1,
            compute_instance_id=0,
            profile_id=9,
            start=0,
            size=4,
            sm_util_pct=80.0,
        ),
        FakeMig(
            "MIG-b",
            gpu_instance_id=2,
            compute_instance_id=0,
            profile_id=9,
            start=4,
            size=4,
            sm_util_pct=10.0,
        ),
    ]
    fake.gpus[0].sm_util_pct = 45.0
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    with Sampler(pynvml) as sampler:
        sampler.sample(gpus)
        rows = sampler.sample(gpus)
    assert [(r.mig_uuid, r.sm_active, r.util_source) for r in rows] == [
        (None, 0.45, "gpm"),
        ("MIG-a", 0.8, "gpm"),
        ("MIG-b", 0.1, "gpm"),
    ]
    assert [m.profile_name for m in gpus[0].mig_instances] == ["3g.40gb", "3g.40gb"]


def test_a_gpu_lost_mid_run_is_reported_unhealthy_and_the_others_keep_reporting(monkeypatch):
    # Given a healthy node that was discovered and sampled once
    fake = h100_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    sampler = Sampler(pynvml)
    sampler.sample(gpus)
    # When GPU 3 falls off the bus
    fake.gpus[3].lost = True
    rows = sampler.sample(gpus)
    # Then its row is unhealthy with "GPU is lost", the others are healthy with GPM data
    lost = rows[3]
    assert (lost.uuid, lost.healthy, lost.sm_active) == (gpus[3].uuid, False, None)
    assert lost.health_reason.startswith("GPU is lost")
    assert all(r.healthy and r.util_source == "gpm" for i, r in enumerate(rows) if i != 3)
    # and when it comes back, GPM starts over rather than mixing old and new samples
    fake.gpus[3].lost = False
    again = sampler.sample(gpus)[3]
    assert again.healthy and again.sm_active is None
    sampler.close()
    assert fake.live_gpm_samples == 0


def test_uncorrected_ecc_errors_seen_while_running_make_the_gpu_unhealthy(monkeypatch):
    fake = h100_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    fake.gpus[6].ecc_uncorrected_volatile = 1
    rows = sample(pynvml, gpus)
    assert [r.healthy for r in rows] == [True] * 6 + [False, True]
    assert rows[6].health_reason == "1 uncorrected ECC error(s) since the last driver load"


def test_other_nvml_errors_make_the_gpu_unhealthy_with_the_failing_call(monkeypatch):
    fake = h100_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    fake.gpus[0].failures["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_TIMEOUT
    (row, *_rest) = sample(pynvml, gpus)
    assert not row.healthy
    assert row.health_reason == "NVML error in nvmlDeviceGetMemoryInfo: Timeout"


@pytest.mark.parametrize(("pct", "r"), [(0, 0.0), (50, 0.5), (100, 1.0), (101, 1.0), (-1, 0.0)])
def test_ratios_are_clamped_to_zero_one(pct, r):
    assert ratio(pct) == r


def test_gpm_failures_are_missing_data_not_ill_health(monkeypatch):
    # Given an H200 whose GPM sampling fails with a non-fatal error
    fake = h200_node()
    gpus = _discovered(fake, monkeypatch)
    _with_nvml(fake)
    fake.gpus[0].failures["nvmlGpmSampleGet"] = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    with Sampler(pynvml) as sampler:
        sampler.sample(gpus)
        (row,) = sampler.sample(gpus)
        # Then it is healthy, with no SM activity (and no utilisation-rate stand-in)
        assert (row.healthy, row.sm_active, row.util_source) == (True, None, None)
        # and when GPM recovers, ratios come back from the second good sample
        del fake.gpus[0].failures["nvmlGpmSampleGet"]
        fake.gpus[0].sm_util_pct = 12.5
        sampler.sample(gpus)
        assert sampler.sample(gpus)[0].sm_active == 0.125
    assert fake.live_gpm_samples == 0
