"""The configuration's `reservations:`: maintenance windows declared with the cluster (Slurm
reservations with `flags=maint` in a site's setup) become the same `MaintenanceScheduled`
as `gpuledger node maintenance`, folded once (fold/maintenance.py) and read everywhere from
there. Published with the configuration (`gpuledger apply`, `gpuledger up`, a scenario's
start), each with an event id derived from its content and `origin: config`, so applying the
configuration again changes nothing. A window that has ended when the configuration is
published is left out (it planned nothing).

Checked with the file (one line per problem, exit 2, nothing published): a name that is not
a subject token or is used twice, a malformed node range, a node the file's `cluster.nodes`
does not declare (when it declares any), a time without its zone, an end not after the
start, two reservations overlapping on a node they share, a `tenant` the file does not
configure.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuledger.events import MaintenanceScheduled
    from gpuledger.services.domain.inputs.schema.files import FileDoc


def yaml_times(doc: Any) -> Any:
    """`doc` with the reservations' times as written: YAML 1.1 (PyYAML) reads an unquoted
    `2026-12-08T06:00:00Z` as a datetime, which goes back to its ISO text (a naive one
    without a zone, so it is refused as one). Nothing else changes."""
    rs = doc.get("reservations") if isinstance(doc, dict) else None
    if not isinstance(rs, list):
        return doc
    plain = [
        {k: v.isoformat() if isinstance(v, datetime) else v for k, v in r.items()}
        if isinstance(r, dict)
        else r
        for r in rs
    ]
    return {**doc, "reservations": plain}


def zoned_ms(text: str, zone: tzinfo | None = None) -> int:
    """An ISO instant with its zone (`2026-12-08T06:00Z`, `...+01:00`) in epoch ms, a naive
    one taken in `zone` when given; ValueError (one line) for anything else."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time (YYYY-MM-DDTHH:MM[:SS] with Z or +HH:MM)"
        ) from None
    if t.tzinfo is None:
        if zone is None:
            raise ValueError(f"{text!r} has no zone: add Z or +HH:MM")
        t = t.replace(tzinfo=zone)
    return int(t.timestamp() * 1000)


def check(f: FileDoc, declared: set[str], problems: list[str]) -> None:
    """Append the problems of `f.reservations` (`declared`: the nodes `cluster.nodes` names)."""
    from gpuledger.events.ids import InvalidId, validate_token
    from gpuledger.services.domain.inputs.node_ranges import expand_nodes

    seen: dict[str, str] = {}
    spans: list[tuple[str, set[str], int, int]] = []
    for i, r in enumerate(f.reservations):
        path = f"reservations[{i}]"
        try:
            validate_token("window", r.name)
        except InvalidId as exc:
            problems.append(f"{path}.name: {exc}")
        if r.name in seen:
            problems.append(
                f"{path}.name: duplicate reservation {r.name!r} (first at {seen[r.name]})"
            )
        seen.setdefault(r.name, path)
        try:
            nodes = set(expand_nodes(r.nodes))
        except ValueError as exc:
            problems.append(f"{path}.nodes: {exc}")
            continue
        if r.tenant is not None and r.tenant not in {t.name for t in f.tenants}:
            problems.append(f"{path}.tenant: no tenant {r.tenant!r} in tenants")
        unknown = sorted(nodes - declared) if declared else []
        if unknown:
            problems.append(
                f"{path}.nodes: no node {', '.join(map(repr, unknown))} in cluster.nodes"
            )
        times = []
        for key in ("start", "end"):
            try:
                times.append(zoned_ms(getattr(r, key)))
            except ValueError as exc:
                problems.append(f"{path}.{key}: {exc}")
        if len(times) < 2:
            continue
        start, end = times
        if end <= start:
            problems.append(f"{path}.end: {r.end} is not after start {r.start}")
            continue
        for name, other, s, e in spans:
            shared = sorted(nodes & other)
            if shared and start < e and s < end:
                problems.append(f"{path}: overlaps reservation {name!r} on {', '.join(shared)}")
                break
        spans.append((r.name, nodes, start, end))


def events(f: FileDoc, producer: str, at_ms: int) -> list[MaintenanceScheduled]:
    """The reservations not ended at `at_ms` as `MaintenanceScheduled` (`origin: config`),
    each with an event id derived from its content alone (the same on every publication)."""
    from gpuledger.events import MaintenanceScheduled
    from gpuledger.events.ids import derive_event_id
    from gpuledger.services.domain.inputs.node_ranges import expand_nodes

    out = []
    for r in f.reservations:
        nodes = tuple(sorted(expand_nodes(r.nodes)))
        start, end = zoned_ms(r.start), zoned_ms(r.end)
        if end <= at_ms:
            continue
        key = f"{r.name}:{','.join(nodes)}:{start}:{end}:{r.reason}:{r.tenant or ''}"
        out.append(
            MaintenanceScheduled(
                event_id=derive_event_id("MaintenanceScheduled", key),
                occurred_at_ms=at_ms,
                correlation_id=r.name,
                producer=producer,
                window_id=r.name,
                nodes=nodes,
                start_ms=start,
                end_ms=end,
                reason=r.reason,
                origin="config",
                **({} if r.tenant is None else {"tenant": r.tenant}),
            )
        )
    return out
