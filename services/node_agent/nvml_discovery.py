"""Discover the GPUs of this host through NVML (module ``pynvml`` from ``nvidia-ml-py``).

``discover()`` reads driver and CUDA versions and, per GPU: UUID, raw and normalised model
name, memory, MIG mode and MIG instances (profile id, placement, MIG UUID, GPU/compute
instance ids), NVLink clique and health. Invariants:

- A GPU whose NVML calls fail is reported unhealthy with the reason; discovery of the
  other GPUs goes on. Only "NVML cannot be used at all" raises (``NvmlUnavailable``).
- NVLink peers come from ``nvmlDeviceGetP2PStatus(.., NVML_P2P_CAPS_INDEX_NVLINK)``, which
  is correct behind NVSwitches too (per-link remote PCI info names the switch there, not
  the peer GPU). MIG-enabled GPUs take no part in NVLink peer-to-peer: each is a clique of
  its own.
- Units: memory in MiB (integers).
"""

from __future__ import annotations

import ctypes
import importlib
import socket
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import msgspec

from gpuledger.services.node_agent import gpu_model, mig, topology
from gpuledger.services.node_agent.health import (
    device_health_reason,
    error_reason,
    is_not_supported,
)

MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this host (module missing, library or driver not loaded)."""


class MigInstance(msgspec.Struct, frozen=True):
    """One MIG device. ``placement_*`` count memory slices (8 per GPU)."""

    uuid: str
    profile_id: int
    profile_name: str
    placement_start: int
    placement_size: int
    gpu_instance_id: int
    compute_instance_id: int


class DiscoveredGpu(msgspec.Struct, frozen=True):
    """One physical GPU as NVML sees it. ``uuid`` is ``"unknown:<index>"`` when unreadable."""

    index: int
    uuid: str
    name: str
    model: str
    memory_mib: int
    mig_enabled: bool
    mig_instances: tuple[MigInstance, ...]
    clique: str
    healthy: bool
    health_reason: str | None


class HostInventory(msgspec.Struct, frozen=True):
    driver_version: str
    cuda_version: str | None
    gpus: tuple[DiscoveredGpu, ...]


def load_pynvml() -> ModuleType:
    """Import ``pynvml`` or raise ``NvmlUnavailable`` saying how to get it."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as err:
        raise NvmlUnavailable(
            "the pynvml module is not installed; install the 'nvidia-ml-py' distribution"
        ) from err


def cuda_version_string(version: int) -> str:
    """NVML encodes CUDA 12.4 as 12040."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Probe:
    """What we learned about one GPU; ``reason`` set means unhealthy."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    memory_mib: int = 0
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()
    fabric_clique: str | None = None
    reason: str | None = None
    _profile_names: dict[int, str] = field(default_factory=dict)


class _Failed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _call(nvml: Any, name: str, *args: Any) -> Any:
    try:
        return getattr(nvml, name)(*args)
    except nvml.NVMLError as err:
        raise _Failed(error_reason(name, err, lost_code=nvml.NVML_ERROR_GPU_IS_LOST)) from err


def _profile_names(nvml: Any, handle: Any, model: str) -> dict[int, str]:
    """profile id -> name, from NVML's profile table (indexes are not ids)."""
    names: dict[int, str] = {}
    for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except nvml.NVMLError:
            continue  # profile not offered by this GPU
        raw = _text(getattr(info, "name", b""))
        name = mig.clean_profile_name(raw) if raw else mig.profile_name(model, int(info.id))
        if name:
            names[int(info.id)] = name
    return names


def _mig_instances(nvml: Any, handle: Any, model: str) -> tuple[MigInstance, ...]:
    names = _profile_names(nvml, handle, model)
    found: list[MigInstance] = []
    for i in range(_call(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle)):
        try:
            mig_handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except nvml.NVMLError as err:
            if err.value == nvml.NVML_ERROR_NOT_FOUND:
                continue  # empty slot
            raise _Failed(
                error_reason(
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    err,
                    lost_code=nvml.NVML_ERROR_GPU_IS_LOST,
                )
            ) from err
        gi_id = int(_call(nvml, "nvmlDeviceGetGpuInstanceId", mig_handle))
        ci_id = int(_call(nvml, "nvmlDeviceGetComputeInstanceId", mig_handle))
        try:
            gi = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        except nvml.NVMLError as err:
            if err.value == nvml.NVML_ERROR_NO_PERMISSION:
                raise _Failed(
                    "MIG layout unreadable: nvmlDeviceGetGpuInstanceById needs the agent to "
                    "run as root or hold the MIG monitor capability"
                ) from err
            raise _Failed(
                error_reason(
                    "nvmlDeviceGetGpuInstanceById", err, lost_code=nvml.NVML_ERROR_GPU_IS_LOST
                )
            ) from err
        info = _call(nvml, "nvmlGpuInstanceGetInfo", gi)
        profile_id = int(info.profileId)
        found.append(
            MigInstance(
                uuid=_text(_call(nvml, "nvmlDeviceGetUUID", mig_handle)),
                profile_id=profile_id,
                profile_name=names.get(profile_id)
                or mig.profile_name(model, profile_id)
                or f"profile-{profile_id}",
                placement_start=int(info.placement.start),
                placement_size=int(info.placement.size),
                gpu_instance_id=gi_id,
                compute_instance_id=ci_id,
            )
        )
    return tuple(
        sorted(
            found,
            key=lambda m: (m.placement_start, m.gpu_instance_id, m.compute_instance_id, m.uuid),
        )
    )


def _fabric_clique(nvml: Any, handle: Any) -> str | None:
    """The multi-node fabric clique, or None (no fabric, not supported, not completed)."""
    info = nvml.c_nvmlGpuFabricInfoV_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    except nvml.NVMLError:
        return None  # no fabric API / not supported: a host-local clique is right
    if info.state != nvml.NVML_GPU_FABRIC_STATE_COMPLETED or info.status != nvml.NVML_SUCCESS:
        return None
    return topology.fabric_clique(bytes(info.clusterUuid), int(info.cliqueId))


def _probe(nvml: Any, index: int) -> _Probe:
    p = _Probe(index=index)
    try:
        p.handle = _call(nvml, "nvmlDeviceGetHandleByIndex", index)
        p.uuid = _text(_call(nvml, "nvmlDeviceGetUUID", p.handle))
        p.name = _text(_call(nvml, "nvmlDeviceGetName", p.handle))
        p.memory_mib = int(_call(nvml, "nvmlDeviceGetMemoryInfo", p.handle).total) // MIB
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(p.handle)
            p.mig_enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
        except nvml.NVMLError as err:
            if not is_not_supported(nvml, err):
                raise _Failed(
                    error_reason("nvmlDeviceGetMigMode", err, lost_code=nvml.NVML_ERROR_GPU_IS_LOST)
                ) from err
        if p.mig_enabled:
            model = gpu_model.normalise_model(p.name, p.memory_mib)
            p.mig_instances = _mig_instances(nvml, p.handle, model)
        p.fabric_clique = _fabric_clique(nvml, p.handle)
        p.reason = device_health_reason(nvml, p.handle)
    except _Failed as failed:
        p.reason = failed.reason
    return p


def _nvlink_peers(nvml: Any, probes: list[_Probe]) -> list[tuple[int, int]]:
    usable = [p for p in probes if p.reason is None and not p.mig_enabled]
    pairs: list[tuple[int, int]] = []
    for i, a in enumerate(usable):
        for b in usable[i + 1 :]:
            try:
                status = nvml.nvmlDeviceGetP2PStatus(
                    a.handle, b.handle, nvml.NVML_P2P_CAPS_INDEX_NVLINK
                )
            except nvml.NVMLError:
                continue  # cannot tell: treat as not peers
            if status == nvml.NVML_P2P_STATUS_OK:
                pairs.append((a.index, b.index))
    return pairs


def _init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise NvmlUnavailable(
            f"NVML could not be initialised ({error_reason('nvmlInit', err)}); "
            "is the NVIDIA driver installed and libnvidia-ml.so.1 loadable?"
        ) from err


def discover(nvml: ModuleType | Any | None = None, *, host: str | None = None) -> HostInventory:
    """Read this host's GPUs. ``host`` prefixes host-local clique names (default: short
    hostname). Raises ``NvmlUnavailable`` when NVML cannot be used at all."""
    nvml = nvml if nvml is not None else load_pynvml()
    prefix = host or socket.gethostname().split(".")[0]
    _init(nvml)
    try:
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as err:
            raise NvmlUnavailable(
                f"NVML is not usable: {error_reason('nvmlSystemGetDriverVersion', err)}"
            ) from err
        try:
            cuda: str | None = cuda_version_string(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
        except nvml.NVMLError:
            cuda = None
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            raise NvmlUnavailable(
                f"NVML is not usable: {error_reason('nvmlDeviceGetCount', err)}"
            ) from err
        probes = [_probe(nvml, i) for i in range(count)]
        host_cliques = topology.nvlink_cliques(
            [p.index for p in probes], _nvlink_peers(nvml, probes), prefix
        )
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    gpus = tuple(
        DiscoveredGpu(
            index=p.index,
            uuid=p.uuid or f"unknown:{p.index}",
            name=p.name,
            model=gpu_model.normalise_model(p.name, p.memory_mib) if p.name else "UNKNOWN",
            memory_mib=p.memory_mib,
            mig_enabled=p.mig_enabled,
            mig_instances=p.mig_instances,
            clique=p.fabric_clique or host_cliques[p.index],
            healthy=p.reason is None,
            health_reason=p.reason,
        )
        for p in probes
    )
    return HostInventory(driver_version=driver, cuda_version=cuda, gpus=gpus)


def describe(inventory: HostInventory) -> str:
    """A short human summary, one line per GPU and per MIG instance."""
    cuda = inventory.cuda_version or "unknown"
    lines = [f"driver {inventory.driver_version}, CUDA {cuda}, {len(inventory.gpus)} GPU(s)"]
    for g in inventory.gpus:
        state = "healthy" if g.healthy else f"UNHEALTHY: {g.health_reason}"
        mig_note = f", MIG {len(g.mig_instances)} instance(s)" if g.mig_enabled else ""
        lines.append(
            f"  [{g.index}] {g.model} {g.memory_mib} MiB clique={g.clique}{mig_note} "
            f"{g.uuid} {state}"
        )
        for m in g.mig_instances:
            lines.append(
                f"      {m.profile_name} (id {m.profile_id}) @{m.placement_start}:"
                f"{m.placement_size} gi={m.gpu_instance_id} ci={m.compute_instance_id} {m.uuid}"
            )
    return "\n".join(lines)
