"""An in-process fake of the parts of ``pynvml`` the node agent uses.

The fake replaces ``pynvml``'s *functions* only (through ``monkeypatch``); constants,
ctypes structs and ``NVMLError`` subclasses stay the real ones, so code under test sees
exactly the types it sees on a real host. Errors are raised the way the real module
raises them: ``pynvml.NVMLError(code)`` returns the matching subclass.

Failure injection:
- ``FakeGpu.lost = True``: every call touching that GPU raises ``NVML_ERROR_GPU_IS_LOST``
  (flip it between calls to lose a GPU mid-run).
- ``FakeGpu.failures = {"nvmlDeviceGetName": code}``: that call fails for that GPU.
- ``FakeNvml(init_error=code)``: ``nvmlInit`` fails.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import pynvml

MIB = 1024 * 1024

# Profile *index* (NVML_GPU_INSTANCE_PROFILE_*) -> (profile id, memory slices, name suffix)
# as an A100-40GB driver reports them: indexes and ids differ on purpose.
A100_40GB_PROFILES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (19, 1, "1g.5gb"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (20, 1, "1g.5gb+me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (15, 2, "1g.10gb"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (14, 2, "2g.10gb"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, 4, "3g.20gb"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (5, 4, "4g.20gb"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (0, 8, "7g.40gb"),
}


@dataclass
class FakeMig:
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile_id: int
    start: int
    size: int
    memory_used_mib: int = 0
    sm_util_pct: float = 0.0


@dataclass
class FakeFabric:
    cluster_uuid: bytes
    clique_id: int
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = pynvml.NVML_SUCCESS


@dataclass
class FakeGpu:
    uuid: str
    name: str
    memory_mib: int
    mig_enabled: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    max_mig_devices: int = 0
    profiles: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    gpm_supported: bool = False
    sm_util_pct: float = 0.0  # what GPM reports for the interval ending at a sample
    gpu_util_pct: int = 0  # what nvmlDeviceGetUtilizationRates reports
    memory_used_mib: int = 0
    ecc_supported: bool = True
    ecc_uncorrected_volatile: int = 0
    fabric: FakeFabric | None = None
    lost: bool = False
    failures: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Handle:
    """A device (``mig is None``) or MIG device handle."""

    gpu: int
    mig: int | None = None


@dataclass(frozen=True)
class GiHandle:
    gpu: int
    gpu_instance_id: int


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    FUNCTIONS = (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion_v2",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlGpuInstanceGetInfo",
        "nvmlDeviceGetP2PStatus",
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetUtilizationRates",
        "nvmlGpmQueryDeviceSupport",
        "nvmlGpmSampleAlloc",
        "nvmlGpmSampleFree",
        "nvmlGpmSampleGet",
        "nvmlGpmMigSampleGet",
        "nvmlGpmMetricsGet",
        "nvmlEventSetCreate",
        "nvmlEventSetFree",
        "nvmlDeviceRegisterEvents",
        "nvmlEventSetWait_v2",
    )

    def __init__(
        self,
        gpus: list[FakeGpu],
        nvlink: set[frozenset[int]] | None = None,
        *,
        driver: str = "550.54.15",
        cuda: int = 12040,
        init_error: int | None = None,
    ) -> None:
        self.gpus = gpus
        self.nvlink = nvlink or set()
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.initialised = 0
        self.calls: list[str] = []
        self._gpm_samples: dict[int, tuple[ctypes.c_uint64, tuple[int, int | None] | None]] = {}
        self._gpm_values: dict[int, float] = {}
        self._event_sets: dict[int, set[int]] = {}  # set id -> registered GPU indexes
        self._xids: list[tuple[int, int, int, int]] = []  # (gpu, xid, gi, ci) pending

    def raise_xid(self, gpu: int, xid: int, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF) -> None:
        """The driver reports XID ``xid`` on GPU ``gpu`` (delivered to registered sets)."""
        self._xids.append((gpu, xid, gi, ci))

    def install(self, monkeypatch) -> FakeNvml:
        for name in self.FUNCTIONS:
            monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    # -- helpers ------------------------------------------------------------------
    def _gpu(self, handle: Handle, call: str) -> FakeGpu:
        self.calls.append(call)
        if not self.initialised:
            raise err(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu = self.gpus[handle.gpu]
        if gpu.lost:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if call in gpu.failures:
            raise err(gpu.failures[call])
        return gpu

    def _mig(self, handle: Handle, call: str) -> FakeMig:
        return self._gpu(handle, call).migs[handle.mig]

    # -- system -------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise err(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            raise err(pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            raise err(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    # -- devices ------------------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if not 0 <= index < len(self.gpus):
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._gpu(Handle(index), "nvmlDeviceGetHandleByIndex")
        return Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                self._gpu(Handle(i), "nvmlDeviceGetHandleByUUID")
                return Handle(i)
            for m, mig in enumerate(gpu.migs):
                if mig.uuid == uuid:
                    self._gpu(Handle(i), "nvmlDeviceGetHandleByUUID")
                    return Handle(i, m)
        raise err(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        if handle.mig is not None:
            return self._mig(handle, "nvmlDeviceGetUUID").uuid
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version=None) -> pynvml.c_nvmlMemory_t:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        info = pynvml.c_nvmlMemory_t()
        if handle.mig is not None:
            mig = gpu.migs[handle.mig]
            info.total = mig.size * (gpu.memory_mib // 8) * MIB
            info.used = mig.memory_used_mib * MIB
        else:
            info.total = gpu.memory_mib * MIB
            info.used = gpu.memory_used_mib * MIB
        info.free = info.total - info.used
        return info

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        if not gpu.max_mig_devices and not gpu.mig_enabled:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount").max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not gpu.mig_enabled:
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < len(gpu.migs):
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return Handle(handle.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: Handle) -> int:
        return self._mig(handle, "nvmlDeviceGetGpuInstanceId").gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Handle) -> int:
        return self._mig(handle, "nvmlDeviceGetComputeInstanceId").compute_instance_id

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Handle, profile: int, version=2):
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceProfileInfo")
        if profile not in gpu.profiles:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        profile_id, slices, name = gpu.profiles[profile]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id = profile_id
        info.sliceCount = slices
        info.memorySizeMB = slices * (gpu.memory_mib // 8)
        info.name = f"MIG {name}".encode()
        return info

    def nvmlDeviceGetGpuInstanceById(self, handle: Handle, gi_id: int) -> GiHandle:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceById")
        if not any(m.gpu_instance_id == gi_id for m in gpu.migs):
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return GiHandle(handle.gpu, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: GiHandle) -> pynvml.c_nvmlGpuInstanceInfo_t:
        gpu = self._gpu(Handle(gi.gpu), "nvmlGpuInstanceGetInfo")
        mig = next(m for m in gpu.migs if m.gpu_instance_id == gi.gpu_instance_id)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id = mig.gpu_instance_id
        info.profileId = mig.profile_id
        info.placement.start = mig.start
        info.placement.size = mig.size
        return info

    def nvmlDeviceGetP2PStatus(self, a: Handle, b: Handle, index: int) -> int:
        self._gpu(a, "nvmlDeviceGetP2PStatus")
        self._gpu(b, "nvmlDeviceGetP2PStatus")
        if index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        if frozenset({a.gpu, b.gpu}) in self.nvlink:
            return pynvml.NVML_P2P_STATUS_OK
        return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Handle, ref) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuFabricInfoV")
        if gpu.fabric is None:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = ref._obj  # the struct passed by ctypes.byref
        if (
            not isinstance(info, pynvml.c_nvmlGpuFabricInfo_v2_t)
            or info.version != pynvml.nvmlGpuFabricInfo_v2
        ):
            raise err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        ctypes.memmove(info.clusterUuid, gpu.fabric.cluster_uuid, 16)
        info.cliqueId = gpu.fabric.clique_id
        info.state = gpu.fabric.state
        info.status = gpu.fabric.status
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, error_type: int, counter: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if not gpu.ecc_supported:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if (error_type, counter) == (
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        ):
            return gpu.ecc_uncorrected_volatile
        return 0

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> pynvml.c_nvmlUtilization_t:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if handle.mig is not None or gpu.mig_enabled:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu = gpu.gpu_util_pct
        return rates

    # -- GPM ----------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Handle) -> pynvml.c_nvmlGpmSupport_t:
        gpu = self._gpu(handle, "nvmlGpmQueryDeviceSupport")
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.gpm_supported)
        return support

    @property
    def live_gpm_samples(self) -> int:
        return len(self._gpm_samples)

    def nvmlGpmSampleAlloc(self):
        buffer = ctypes.c_uint64(0)
        sample = ctypes.cast(ctypes.pointer(buffer), pynvml.c_nvmlGpmSample_t)
        self._gpm_samples[ctypes.addressof(buffer)] = (buffer, None)
        return sample

    def _address(self, sample) -> int:
        address = ctypes.cast(sample, ctypes.c_void_p).value
        if address not in self._gpm_samples:
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return address

    def nvmlGpmSampleFree(self, sample) -> None:
        del self._gpm_samples[self._address(sample)]

    def _take(self, handle: Handle, gi_id: int | None, sample, call: str):
        gpu = self._gpu(handle, call)
        if not gpu.gpm_supported:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        address = self._address(sample)
        if gi_id is None:
            value = gpu.sm_util_pct
        else:
            value = next(m.sm_util_pct for m in gpu.migs if m.gpu_instance_id == gi_id)
        self._gpm_samples[address] = (self._gpm_samples[address][0], (handle.gpu, gi_id))
        self._gpm_values[address] = value
        return sample

    def nvmlGpmSampleGet(self, handle: Handle, sample):
        return self._take(handle, None, sample, "nvmlGpmSampleGet")

    def nvmlGpmMigSampleGet(self, handle: Handle, gi_id: int, sample):
        return self._take(handle, gi_id, sample, "nvmlGpmMigSampleGet")

    def nvmlGpmMetricsGet(self, request):
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first, second = self._address(request.sample1), self._address(request.sample2)
        if self._gpm_samples[first][1] != self._gpm_samples[second][1]:
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # samples of different devices
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId == pynvml.NVML_GPM_METRIC_SM_UTIL:
                metric.value = self._gpm_values[second]
                metric.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request

    # -- events (XID) -----------------------------------------------------------------
    # nvmlEventSetWait_v2 returns a c_nvmlEventData_t whose ``device`` is a C pointer; the
    # fake returns an object with the same field names whose ``device`` is a fake handle.
    def nvmlEventSetCreate(self) -> int:
        set_id = len(self._event_sets) + 1
        self._event_sets[set_id] = set()
        return set_id

    def nvmlEventSetFree(self, set_id: int) -> None:
        del self._event_sets[set_id]

    def nvmlDeviceRegisterEvents(self, handle: Handle, event_types: int, set_id: int) -> None:
        self._gpu(handle, "nvmlDeviceRegisterEvents")
        if event_types != pynvml.nvmlEventTypeXidCriticalError:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._event_sets[set_id].add(handle.gpu)

    def nvmlEventSetWait_v2(self, set_id: int, timeout_ms: int):
        registered = self._event_sets[set_id]
        for i, (gpu, xid, gi, ci) in enumerate(self._xids):
            if gpu in registered:
                del self._xids[i]
                return _EventData(Handle(gpu), pynvml.nvmlEventTypeXidCriticalError, xid, gi, ci)
        raise err(pynvml.NVML_ERROR_TIMEOUT)


@dataclass(frozen=True)
class _EventData:
    device: Handle
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


# -- fixtures' hardware ---------------------------------------------------------------
def _uuid(kind: str, n: int) -> str:
    return f"GPU-{kind}{n:04d}-0000-0000-0000-000000000000"


def h100_node(islands: list[list[int]] | None = None) -> FakeNvml:
    """8 x "NVIDIA H100 80GB HBM3" (81559 MiB, GPM); NVLink by default all-to-all."""
    gpus = [
        FakeGpu(
            uuid=_uuid("h100", i),
            name="NVIDIA H100 80GB HBM3",
            memory_mib=81559,
            gpm_supported=True,
            max_mig_devices=7,
        )
        for i in range(8)
    ]
    islands = islands if islands is not None else [list(range(8))]
    pairs = {frozenset({a, b}) for isl in islands for a in isl for b in isl if a != b}
    return FakeNvml(gpus, pairs)


def a100_mig_node() -> FakeNvml:
    """One "NVIDIA A100-SXM4-40GB" in MIG mode with seven 1g.5gb instances (profile id 19)."""
    migs = [
        FakeMig(
            uuid=f"MIG-a100{i:04d}-0000-0000-0000-000000000000",
            gpu_instance_id=7 + i,
            compute_instance_id=0,
            profile_id=19,
            start=i,
            size=1,
        )
        for i in range(7)
    ]
    gpu = FakeGpu(
        uuid=_uuid("a100", 0),
        name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        mig_enabled=True,
        migs=migs,
        max_mig_devices=7,
        profiles=A100_40GB_PROFILES,
        gpu_util_pct=100,
    )
    return FakeNvml([gpu])


def h200_node() -> FakeNvml:
    """One "NVIDIA H200" (143771 MiB, GPM supported)."""
    return FakeNvml(
        [
            FakeGpu(
                uuid=_uuid("h200", 0),
                name="NVIDIA H200",
                memory_mib=143771,
                gpm_supported=True,
                max_mig_devices=7,
            )
        ]
    )


def fabric_node(cluster_uuid: bytes, clique_id: int, n: int = 4) -> FakeNvml:
    """n GB200-like GPUs that report the same fabric cluster UUID and clique id."""
    gpus = [
        FakeGpu(
            uuid=_uuid("gb20", i),
            name="NVIDIA GB200",
            memory_mib=189471,
            gpm_supported=True,
            fabric=FakeFabric(cluster_uuid, clique_id),
        )
        for i in range(n)
    ]
    pairs = {frozenset({a, b}) for a in range(n) for b in range(n) if a != b}
    return FakeNvml(gpus, pairs)
