"""Scenario files: a cluster configuration plus a timeline of external inputs.

    timeline:
      - at: 0                  # seconds (or "10m")
        submit: {id: j1, tenant: org/a, class: train, gpus: 8, duration: 2h}
      - at: 600
        cancel: j1
      - at: 900
        node_down: n3

Everything else in the document is read by `services.domain.configfile`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from events import Event, JobCancelled, NodeInfo, NodeLost
from services.domain.configfile import ConfigFileError, config_events, node_infos
from services.domain.jobfile import JobFileError, job_spec
from services.domain.quantities import QuantityError, seconds
from services.domain.stamp import stamp, submission


class ScenarioError(ValueError):
    """A scenario that cannot be read; the message says where."""


@dataclass(frozen=True)
class Scenario:
    name: str
    config: list[Event]
    nodes: tuple[NodeInfo, ...]
    inputs: list[tuple[int, Event]]
    """(at_ms, event) in timeline order."""


def load(path: str | Path) -> Scenario:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: {exc}") from exc
    return from_document(doc or {}, name=Path(path).stem)


def from_document(doc: dict[str, Any], name: str = "scenario") -> Scenario:
    try:
        config = config_events(doc, producer="scenario")
        nodes = node_infos(doc)
    except ConfigFileError as exc:
        raise ScenarioError(str(exc)) from exc
    inputs: list[tuple[int, Event]] = []
    for i, item in enumerate(doc.get("timeline") or []):
        try:
            inputs.append(_input(item))
        except (JobFileError, QuantityError, KeyError, TypeError, ValueError) as exc:
            raise ScenarioError(f"timeline[{i}]: {exc}") from exc
    inputs.sort(key=lambda p: p[0])
    return Scenario(name=str(doc.get("name", name)), config=config, nodes=nodes, inputs=inputs)


def _input(item: dict[str, Any]) -> tuple[int, Event]:
    at_ms = seconds("at", item.get("at", 0)) * 1000 if not isinstance(item.get("at"), float) else round(item["at"] * 1000)
    common = dict(producer="scenario", now_ms=at_ms)
    if "submit" in item:
        spec = job_spec(item["submit"])
        return at_ms, submission(spec, now_ms=at_ms, producer="scenario")
    if "cancel" in item:
        job_id = str(item["cancel"])
        tenant = str(item.get("tenant", ""))
        return at_ms, stamp(JobCancelled, key=job_id, correlation_id=job_id, job_id=job_id,
                            tenant=tenant or "-", **common)
    if "node_down" in item:
        node = str(item["node_down"])
        return at_ms, stamp(NodeLost, key=f"{node}@{at_ms}", correlation_id=node, node=node,
                            message="node reported down", **common)
    raise ValueError(f"unknown timeline entry {sorted(item)} (use submit, cancel or node_down)")
