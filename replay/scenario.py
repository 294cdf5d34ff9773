"""Scenario files: a cluster configuration plus a timeline of external inputs.

    timeline:
      - at: 0                  # seconds (or "10m")
        submit: {id: j1, tenant: org/a, class: train, gpus: 8, duration: 2h}
      - at: 600
        cancel: j1
      - at: 700
        scale: svc             # a service (kind: service): its replica count from now on
        replicas: 6
      - at: 900
        node_down: n3
      - at: 950
        maintenance: {id: fw, nodes: [n1, n2], start: 2h, end: 4h}

Everything else in the document is read by `services.domain.inputs.configfile`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuledger.events import (
    Event,
    JobCancelled,
    JobHeld,
    JobMovedToTop,
    JobPriorityChanged,
    JobReleased,
    JobRequeued,
    MaintenanceCancelled,
    MaintenanceScheduled,
    NodeCordoned,
    NodeInfo,
    NodeLost,
    NodeUncordoned,
    ServiceScaled,
)
from gpuledger.services.domain.inputs.configfile import (
    ConfigFileError,
    config_events,
    node_infos,
    parse,
)
from gpuledger.services.domain.inputs.jobfile import job_spec
from gpuledger.services.domain.inputs.quantities import seconds
from gpuledger.services.domain.inputs.schema import EntryDoc, InputError
from gpuledger.services.domain.tooling.stamp import stamp, submission
from gpuledger.services.runtime.documents import DocumentError, load_document


class ScenarioError(InputError):
    """A scenario that does not validate; one problem per line with its key path."""


@dataclass(frozen=True)
class Scenario:
    name: str
    config: list[Event]
    nodes: tuple[NodeInfo, ...]
    inputs: list[tuple[int, Event]]
    """(at_ms, event) in timeline order."""
    until_ms: int | None = None
    """The scenario's own `until:` (the simulation stops there)."""


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file; ScenarioError names the file and every problem."""
    try:
        doc = load_document(Path(path).read_text())
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"cannot read: {exc}", file=str(path)) from None
    except DocumentError as exc:
        raise ScenarioError(str(exc), file=str(path)) from None
    try:
        return from_document(doc or {}, name=Path(path).stem)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, file=str(path)) from None


def from_document(doc: Any, name: str = "scenario") -> Scenario:
    try:
        f = parse(doc)
        config = config_events(f, producer="scenario")
        nodes = node_infos(f)
    except ConfigFileError as exc:
        raise ScenarioError(exc.problems) from None
    tenants = {
        (e.submit.id or e.submit.job_id): e.submit.tenant for e in f.timeline or [] if e.submit
    }
    inputs = [_input(entry, tenants) for entry in f.timeline or []]
    inputs.sort(key=lambda p: p[0])
    until_ms = (
        None
        if f.until is None
        else (
            round(f.until * 1000)
            if isinstance(f.until, float)
            else seconds("until", f.until) * 1000
        )
    )
    return Scenario(
        name=f.name or name, config=config, nodes=nodes, inputs=inputs, until_ms=until_ms
    )


def _ms(name: str, value: float | int | str) -> int:
    """A scenario time (`at`, a window's `start`) in ms."""
    return round(value * 1000) if isinstance(value, float) else seconds(name, value) * 1000


def _input(entry: EntryDoc, tenants: dict[str | None, str]) -> tuple[int, Event]:
    at_ms = _ms("at", entry.at)
    common = dict(producer="scenario", now_ms=at_ms)
    event = _job_input(entry, tenants, at_ms, common)
    return at_ms, event if event is not None else _node_input(entry, at_ms, common)


def _job_input(
    entry: EntryDoc, tenants: dict[str | None, str], at_ms: int, common: dict[str, Any]
) -> Event | None:
    """The event of an entry about a job (submit, cancel, scale, update, hold, release,
    requeue, top), else None."""
    if entry.submit is not None:
        spec = job_spec(entry.submit)
        return submission(spec, now_ms=at_ms, producer="scenario")
    if entry.cancel is not None:
        job_id = entry.cancel
        tenant = entry.tenant or "-"
        return stamp(
            JobCancelled, key=job_id, correlation_id=job_id, job_id=job_id, tenant=tenant, **common
        )
    if entry.scale is not None:
        job_id = entry.scale
        return stamp(
            ServiceScaled,
            key=f"{job_id}@{at_ms}",
            correlation_id=job_id,
            job_id=job_id,
            tenant=tenants.get(job_id, "-"),
            replicas=entry.replicas or 0,
            **common,
        )
    if entry.update is not None:
        return stamp(
            JobPriorityChanged,
            key=f"{entry.update}@{at_ms}",
            correlation_id=entry.update,
            job_id=entry.update,
            tenant=tenants.get(entry.update, "-"),
            actor=entry.by,
            priority=entry.priority,
            nice=entry.nice,
            priority_class=entry.klass,
            reason=entry.reason,
            **common,
        )
    if (named := entry.hold or entry.release or entry.requeue or entry.top) is not None:
        cls = JobHeld if entry.hold else JobReleased if entry.release else JobRequeued
        cls = JobMovedToTop if entry.top else cls
        return stamp(
            cls,
            key=f"{named}@{at_ms}",
            correlation_id=named,
            job_id=named,
            tenant=tenants.get(named, "-"),
            actor=entry.by,
            reason=entry.reason,
            **common,
        )
    return None


def _node_input(entry: EntryDoc, at_ms: int, common: dict[str, Any]) -> Event:
    """The event of an entry about nodes (maintenance, its cancel, drain, cordon, uncordon,
    node_down)."""
    if (m := entry.maintenance) is not None:
        return stamp(
            MaintenanceScheduled,
            key=f"{m.id}@{at_ms}",
            correlation_id=m.id,
            window_id=m.id,
            nodes=tuple(m.nodes),
            start_ms=_ms("start", m.start),
            end_ms=_ms("end", m.end),
            reason=entry.reason,
            **({} if m.tenant is None else {"tenant": m.tenant}),
            **common,
        )
    if entry.maintenance_cancel is not None:
        return stamp(
            MaintenanceCancelled,
            key=f"{entry.maintenance_cancel}@{at_ms}",
            correlation_id=entry.maintenance_cancel,
            window_id=entry.maintenance_cancel,
            reason=entry.reason,
            **common,
        )
    if entry.drain is not None:
        deadline = None if entry.deadline is None else seconds("deadline", entry.deadline)
        return stamp(
            NodeCordoned,
            key=f"{entry.drain}@{at_ms}",
            correlation_id=entry.drain,
            node=entry.drain,
            reason=entry.reason,
            drain=True,
            force=entry.force,
            deadline_s=deadline,
            **common,
        )
    if (node_name := entry.cordon or entry.uncordon) is not None:
        kind = NodeCordoned if entry.cordon else NodeUncordoned
        return stamp(
            kind,
            key=f"{node_name}@{at_ms}",
            correlation_id=node_name,
            node=node_name,
            reason=entry.reason,
            **common,
        )
    node = entry.node_down or ""
    return stamp(
        NodeLost,
        key=f"{node}@{at_ms}",
        correlation_id=node,
        node=node,
        message="node reported down",
        **common,
    )
