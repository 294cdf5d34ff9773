"""Critical XID events mark a GPU unhealthy; application-caused XIDs do not."""

import pynvml
import pytest

from gpuledger.services.node_agent.nvml_discovery import discover
from gpuledger.services.node_agent.telemetry import Sampler
from gpuledger.services.node_agent.xid import XidEvent, XidWatcher, xid_reason
from tests.node_agent.fake_nvml import a100_mig_node, h100_node


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_caused_xids_are_not_faults(xid):
    assert xid_reason(xid) is None


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 94, 95])
def test_other_xids_are_faults(xid):
    assert xid_reason(xid) == f"critical XID {xid} reported by the driver"


def test_a_critical_xid_makes_the_gpu_unhealthy_in_later_samples(monkeypatch):
    # Given a watched, healthy node
    fake = h100_node().install(monkeypatch)
    gpus = discover(pynvml, host="n").gpus
    fake.nvmlInit()
    watcher = XidWatcher(pynvml)
    assert watcher.register(g.uuid for g in gpus) == ()
    assert watcher.poll() == ()
    # When GPU 2 reports XID 79 (fallen off the bus) and GPU 5 an application XID 13
    fake.raise_xid(2, 79)
    fake.raise_xid(5, 13)
    events = watcher.poll()
    # Then both are reported, only XID 79 is a fault, and it marks GPU 2 unhealthy
    assert events == (
        XidEvent(gpus[2].uuid, 79, None, None, "critical XID 79 reported by the driver"),
        XidEvent(gpus[5].uuid, 13, None, None, None),
    )
    rows = Sampler(pynvml).sample(gpus, known_faults=watcher.faults)
    assert [r.healthy for r in rows] == [True, True, False, True, True, True, True, True]
    assert rows[2].health_reason == "critical XID 79 reported by the driver"
    # and the fault stays after the event has been drained
    assert watcher.poll() == ()
    assert watcher.faults == {gpus[2].uuid: "critical XID 79 reported by the driver"}
    watcher.close()


def test_xids_on_mig_instances_carry_the_instance_and_fault_the_gpu(monkeypatch):
    fake = a100_mig_node().install(monkeypatch)
    (gpu,) = discover(pynvml, host="n").gpus
    fake.nvmlInit()
    watcher = XidWatcher(pynvml)
    watcher.register([gpu.uuid])
    fake.raise_xid(0, 94, gi=9, ci=0)
    assert watcher.poll() == (
        XidEvent(gpu.uuid, 94, 9, 0, "critical XID 94 reported by the driver"),
    )
    rows = Sampler(pynvml).sample([gpu], known_faults=watcher.faults)
    assert not any(r.healthy for r in rows)


def test_gpus_that_cannot_report_xids_are_named(monkeypatch):
    fake = h100_node().install(monkeypatch)
    gpus = discover(pynvml, host="n").gpus
    fake.nvmlInit()
    fake.gpus[4].failures["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert XidWatcher(pynvml).register(g.uuid for g in gpus) == (gpus[4].uuid,)
