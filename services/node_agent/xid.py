"""Critical XID errors (driver-reported GPU faults) through NVML events.

``XidWatcher`` registers for ``nvmlEventTypeXidCriticalError`` on each GPU and drains
events without blocking (``poll(timeout_ms=0)``). XIDs that applications cause themselves
(13 graphics exception, 31 MMU fault, 43 channel stopped, 45 preemptive cleanup, 68 video
decoder exception, 109 context switch timeout; the same default list NVIDIA's Kubernetes
device plugin skips) are reported with ``reason=None``: they do not make a GPU unhealthy.
Any other XID does, and stays in ``faults`` (first reason per GPU) for the life of the
watcher: an XID is an event, not a state, and the GPU needs an operator (a reset) to
recover. Pass ``faults`` to ``Sampler.sample(gpus, known_faults=...)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from gpuledger.services.node_agent.nvml_discovery import load_pynvml

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_NO_INSTANCE = 0xFFFFFFFF


def xid_reason(xid: int) -> str | None:
    """The unhealthy reason for an XID, or None for XIDs an application causes. Pure."""
    if xid in APPLICATION_XIDS:
        return None
    return f"critical XID {xid} reported by the driver"


class XidEvent(msgspec.Struct, frozen=True):
    uuid: str
    xid: int
    gpu_instance_id: int | None
    compute_instance_id: int | None
    reason: str | None  # None: application-caused, GPU stays healthy


class XidWatcher:
    """Collects XID events for registered GPUs; ``faults`` maps UUID -> first reason."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._set = self._nvml.nvmlEventSetCreate()
        self.faults: dict[str, str] = {}

    def register(self, uuids: Iterable[str]) -> tuple[str, ...]:
        """Watch these GPUs; returns the UUIDs that cannot report XID events."""
        nvml = self._nvml
        unwatched = []
        for uuid in uuids:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set)
            except nvml.NVMLError:
                unwatched.append(uuid)
        return tuple(unwatched)

    def poll(self, timeout_ms: int = 0) -> tuple[XidEvent, ...]:
        """Drain pending events, waiting at most ``timeout_ms`` for the first one."""
        nvml = self._nvml
        events: list[XidEvent] = []
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, timeout_ms if not events else 0)
            except nvml.NVMLError:
                break  # timeout: nothing pending (or the set is unusable)
            if data.eventType != nvml.nvmlEventTypeXidCriticalError:
                continue
            try:
                uuid = nvml.nvmlDeviceGetUUID(data.device)
            except nvml.NVMLError:
                continue
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            xid = int(data.eventData)
            gi = None if data.gpuInstanceId == _NO_INSTANCE else int(data.gpuInstanceId)
            ci = None if data.computeInstanceId == _NO_INSTANCE else int(data.computeInstanceId)
            reason = xid_reason(xid)
            if reason is not None:
                self.faults.setdefault(uuid, reason)
            events.append(XidEvent(uuid, xid, gi, ci, reason))
        return tuple(events)

    def close(self) -> None:
        try:
            self._nvml.nvmlEventSetFree(self._set)
        except self._nvml.NVMLError:
            pass
