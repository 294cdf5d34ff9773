"""The service roles a process can run, built from a configuration document.

`gpuledger run ROLE` and `gpuledger up` both go through `build`, so a service is assembled
the same way whether it runs in-process or as its own OS process.
"""

from __future__ import annotations

from typing import Any

from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.configfile import node_infos
from gpuledger.services.node_agent.simulated import SimulatedAgent
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.quota.decider import Quota
from gpuledger.services.scheduler.decider import Scheduler

CONTROL_PLANE = ("admission", "quota", "scheduler", "preemption")
ROLES = (*CONTROL_PLANE, "node-agent")
LIVE_HEARTBEAT_S = 5


class UnknownRole(ValueError):
    def __init__(self, role: str) -> None:
        super().__init__(f"unknown service {role!r} (one of: {', '.join(ROLES)}, projector)")


def build(
    role: str,
    doc: dict[str, Any] | None = None,
    node: str | None = None,
    instance: str = "0",
    *,
    real: bool = False,
    work_dir: str | None = None,
):
    """A service for `role`. A node agent simulates `node` (or every node) of the document;
    with `real`, it runs members as processes for `node` (default: this host's short name),
    with NVML discovery or else the GPUs the document declares for it (`work_dir`: state,
    logs and checkpoints, default `.gpuledger/agent`)."""
    match role:
        case "admission":
            return Admission(instance)
        case "quota":
            return Quota(instance)
        case "scheduler":
            return Scheduler(instance)
        case "preemption":
            return Preemption(instance)
        case "node-agent" if real:
            import socket

            from gpuledger.services.node_agent.agent import RealAgent

            name = node or socket.gethostname().split(".")[0]
            declared = next((n for n in node_infos(doc or {}) if n.name == name), None)
            return RealAgent(
                name,
                work_dir or ".gpuledger/agent",
                declared=declared,
                heartbeat_s=LIVE_HEARTBEAT_S,
            )
        case "node-agent":
            nodes = node_infos(doc or {})
            if node is not None:
                nodes = tuple(n for n in nodes if n.name == node)
                if not nodes:
                    raise ValueError(f"node {node!r} is not declared in the configuration")
            return SimulatedAgent(nodes, instance=node or "sim", heartbeat_s=LIVE_HEARTBEAT_S)
    raise UnknownRole(role)
