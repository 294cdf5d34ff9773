"""Per-GPU and per-MIG-instance utilisation, memory and health samples from NVML.

Utilisation is reported as a 0-1 ratio with its source:

- ``"gpm"``: GPM metric ``NVML_GPM_METRIC_SM_UTIL`` ("percentage of SMs that were busy"),
  the same quantity as DCGM's ``SM_ACTIVE``: how much of the GPU's compute the work really
  used. We do not use ``SM_OCCUPANCY`` (resident warps / maximum warps): it measures how
  full the busy SMs are, so a compute-bound kernel with few warps per SM reads low while
  using the GPU fully. GPM exists on Hopper and later; per MIG instance through
  ``nvmlGpmMigSampleGet``. A GPM ratio needs two samples, so the first sample of a GPU (or
  instance) after start reports ``None``.
- ``"nvml_utilization"``: ``nvmlDeviceGetUtilizationRates().gpu / 100`` on GPUs without
  GPM. It is the fraction of time *a kernel was running*, not SM activity: one tiny kernel
  keeps it at 100 %. Never present it as real utilisation.
- ``None``: no source (e.g. MIG instances on pre-Hopper GPUs).

Health as in ``health.py``; a GPU that errors yields an unhealthy sample, never a crash.
``Sampler`` keeps the previous GPM samples between calls (its only state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from gpuledger.services.node_agent.health import (
    device_health_reason,
    error_reason,
    is_not_supported,
)
from gpuledger.services.node_agent.nvml_discovery import DiscoveredGpu, load_pynvml

MIB = 1024 * 1024
UtilSource = Literal["gpm", "nvml_utilization"]


class GpuSample(msgspec.Struct, frozen=True):
    """One reading. ``mig_uuid`` set: the row is for that MIG instance of GPU ``uuid``."""

    uuid: str
    mig_uuid: str | None
    sm_active: float | None
    util_source: UtilSource | None
    memory_used_mib: int
    healthy: bool
    health_reason: str | None


def ratio(percent: float) -> float:
    """A percentage from NVML as a ratio clamped to [0, 1]."""
    return min(1.0, max(0.0, float(percent) / 100.0))


class _Unhealthy(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Sampler:
    """Takes samples; keeps one GPM sample per GPU / MIG instance between calls.

    Call ``close()`` (or use as a context manager) to free the GPM sample buffers.
    """

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._gpm_supported: dict[str, bool] = {}
        self._previous: dict[tuple[str, int | None], Any] = {}

    # -- public -------------------------------------------------------------------
    def sample(
        self, gpus: Iterable[DiscoveredGpu], known_faults: Mapping[str, str] | None = None
    ) -> tuple[GpuSample, ...]:
        """Sample every GPU. ``known_faults`` (UUID -> reason, e.g. ``XidWatcher.faults``)
        marks GPUs unhealthy that NVML's current readings alone would call healthy."""
        rows: list[GpuSample] = []
        faults = known_faults or {}
        for gpu in gpus:
            for row in self._sample_gpu(gpu):
                if row.healthy and gpu.uuid in faults:
                    row = msgspec.structs.replace(
                        row, healthy=False, health_reason=faults[gpu.uuid]
                    )
                rows.append(row)
        return tuple(rows)

    def close(self) -> None:
        for key in list(self._previous):
            self._free(self._previous.pop(key))

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------
    def _reason(self, call: str, err: BaseException) -> str:
        return error_reason(call, err, lost_code=self._nvml.NVML_ERROR_GPU_IS_LOST)

    def _call(self, name: str, *args: Any) -> Any:
        nvml = self._nvml
        try:
            return getattr(nvml, name)(*args)
        except nvml.NVMLError as err:
            raise _Unhealthy(self._reason(name, err)) from err

    def _optional(self, name: str, *args: Any) -> Any:
        """Like ``_call`` but "not supported" gives None instead of unhealthy."""
        nvml = self._nvml
        try:
            return getattr(nvml, name)(*args)
        except nvml.NVMLError as err:
            if is_not_supported(nvml, err):
                return None
            raise _Unhealthy(self._reason(name, err)) from err

    def _forget(self, uuid: str) -> None:
        for key in [k for k in self._previous if k[0] == uuid]:
            self._free(self._previous.pop(key))

    def _free(self, sample: Any) -> None:
        try:
            self._nvml.nvmlGpmSampleFree(sample)
        except self._nvml.NVMLError:
            pass

    def _gpm(self, uuid: str, handle: Any) -> bool:
        if uuid not in self._gpm_supported:
            support = self._optional("nvmlGpmQueryDeviceSupport", handle)
            self._gpm_supported[uuid] = bool(support is not None and support.isSupportedDevice)
        return self._gpm_supported[uuid]

    def _gpm_sm_util(self, uuid: str, handle: Any, gi_id: int | None) -> float | None:
        """SM activity since the previous sample of this GPU / instance, or None.

        GPM is telemetry, not health: a GPM failure other than "GPU is lost" gives None
        and restarts this key's sample pair.
        """
        nvml = self._nvml
        key = (uuid, gi_id)
        current = None
        try:
            current = nvml.nvmlGpmSampleAlloc()
            if gi_id is None:
                nvml.nvmlGpmSampleGet(handle, current)
            else:
                nvml.nvmlGpmMigSampleGet(handle, gi_id, current)
        except nvml.NVMLError as err:
            if current is not None:
                self._free(current)
            previous = self._previous.pop(key, None)
            if previous is not None:
                self._free(previous)
            if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _Unhealthy(self._reason("nvmlGpmSampleGet", err)) from err
            return None
        previous = self._previous.pop(key, None)
        self._previous[key] = current
        if previous is None:
            return None
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1 = previous
        request.sample2 = current
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError:
            return None
        finally:
            self._free(previous)
        if request.metrics[0].nvmlReturn != nvml.NVML_SUCCESS:
            return None
        return ratio(request.metrics[0].value)

    def _sample_gpu(self, gpu: DiscoveredGpu) -> list[GpuSample]:
        nvml = self._nvml
        try:
            handle = self._call("nvmlDeviceGetHandleByUUID", gpu.uuid)
            reason = device_health_reason(nvml, handle)
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            sm: float | None = None
            source: UtilSource | None = None
            if self._gpm(gpu.uuid, handle):
                # Never mix in utilisation rates on a GPM GPU: None until two samples.
                sm = self._gpm_sm_util(gpu.uuid, handle, None)
                source = "gpm" if sm is not None else None
            elif not gpu.mig_enabled:
                rates = self._optional("nvmlDeviceGetUtilizationRates", handle)
                if rates is not None:
                    sm, source = ratio(rates.gpu), "nvml_utilization"
            rows = [
                GpuSample(
                    gpu.uuid, None, sm, source, int(memory.used) // MIB, reason is None, reason
                )
            ]
            for instance in gpu.mig_instances if gpu.mig_enabled else ():
                rows.append(self._sample_mig(gpu, handle, instance, reason))
            return rows
        except _Unhealthy as bad:
            self._forget(gpu.uuid)
            return [GpuSample(gpu.uuid, None, None, None, 0, False, bad.reason)]

    def _sample_mig(
        self, gpu: DiscoveredGpu, handle: Any, instance: Any, gpu_reason: str | None
    ) -> GpuSample:
        mig_handle = self._call("nvmlDeviceGetHandleByUUID", instance.uuid)
        memory = self._call("nvmlDeviceGetMemoryInfo", mig_handle)
        sm = None
        if self._gpm(gpu.uuid, handle):
            sm = self._gpm_sm_util(gpu.uuid, handle, instance.gpu_instance_id)
        return GpuSample(
            gpu.uuid,
            instance.uuid,
            sm,
            "gpm" if sm is not None else None,
            int(memory.used) // MIB,
            gpu_reason is None,
            gpu_reason,
        )


def sample(
    nvml: Any, gpus: Iterable[DiscoveredGpu], state: Sampler | None = None
) -> tuple[GpuSample, ...]:
    """Functional spelling of ``Sampler.sample``; pass the same ``state`` between calls
    (``Sampler(nvml)``) to get GPM ratios from the second call on."""
    if state is not None:
        return state.sample(gpus)
    with Sampler(nvml) as once:
        return once.sample(gpus)


__all__ = ["GpuSample", "Sampler", "sample", "ratio"]
