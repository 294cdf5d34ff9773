"""The checks of a configuration or scenario file beyond its shapes: fleet size, duplicates,
nodes, classes, tenants, the timeline and the schedules."""

import functools
from typing import Any

from gpuledger.events import validate_tenant, validate_token
from gpuledger.services.domain.fold.config import DEFAULT_CLASSES
from gpuledger.services.domain.inputs import reservations
from gpuledger.services.domain.inputs.gpu_models import job_models
from gpuledger.services.domain.inputs.mig_layouts import LayoutError, parse_layout
from gpuledger.services.domain.inputs.schema.config import TenantDoc
from gpuledger.services.domain.inputs.schema.errors import (
    _dups,
    _suggest,
    _valid_id,
)
from gpuledger.services.domain.inputs.schema.files import (
    EntryDoc,
    FileDoc,
    MaintenanceDoc,
)
from gpuledger.services.domain.inputs.schema.job import JobDoc
from gpuledger.services.domain.inputs.schema.job_checks import _check_job
from gpuledger.services.domain.inputs.schema.references import (
    _node_model,
    check_references,
)
from gpuledger.services.domain.inputs.schema.units import (
    MAX_FLEET_GPUS,
    MAX_NODES,
)


def _milli(value: Any) -> int:
    from gpuledger.services.domain.inputs.quantities import milli

    return milli("gpus", value)


def _check_model_limits(i: int, t: TenantDoc, problems: list[str]) -> None:
    """Per-model lending and borrowing limits name models the tenant has a per-model
    guarantee for (the same model spelled another way counts), and a per-model lending limit
    is at most that guarantee."""
    from gpuledger.services.domain.inputs.gpu_models import resolve

    guaranteed = {resolve(m): v for m, v in t.guaranteed_by_model.items()}
    for key, limits in (
        ("borrowing_limit_by_model", t.borrowing_limit_by_model),
        ("lending_limit_by_model", t.lending_limit_by_model),
    ):
        for m, v in limits.items():
            g = guaranteed.get(resolve(m))
            if g is None:
                known = sorted(guaranteed)
                problems.append(
                    f"tenants[{i}].{key}.{m}: per-model limits apply where guarantees are per "
                    f"model: add {m} to guaranteed_by_model"
                    + (f" (it has {', '.join(known)})" if known else "")
                )
            elif key == "lending_limit_by_model" and _milli(v) > _milli(g):
                problems.append(
                    f"tenants[{i}].{key}.{m}: {v} GPUs is more than the tenant's guarantee for "
                    f"{m} ({g}); a tenant lends at most its unused guarantee"
                )


def _check_file(f: FileDoc, problems: list[str]) -> None:
    """Cross-field checks of a configuration or scenario, section by section in file order
    (the order of `problems` is part of the message a user reads)."""
    if not _check_fleet_size(f, problems):
        return
    node_names, models = _check_nodes(f, problems)
    _dups(node_names, "node name", problems)
    _dups([(f"tenants[{i}].name", t.name) for i, t in enumerate(f.tenants)], "tenant", problems)
    _dups(
        [(f"priority_classes[{i}].name", c.name) for i, c in enumerate(f.priority_classes)],
        "priority class",
        problems,
    )
    _check_classes(f, problems)
    _check_tenants(f, models, problems)
    _check_schedules(f, problems)
    reservations.check(f, {name for _, name in node_names}, problems)
    _check_timeline(f, {name for _, name in node_names}, problems)


def _check_fleet_size(f: FileDoc, problems: list[str]) -> bool:
    """False (with a problem) when the declared fleet is too large to build at all."""
    declared = sum(n.count if n.name_prefix is not None else 1 for n in f.cluster.nodes)
    gpus = sum((n.count if n.name_prefix is not None else 1) * n.gpus for n in f.cluster.nodes)
    if declared > MAX_NODES or gpus > MAX_FLEET_GPUS:  # checked before any node is built
        problems.append(
            f"cluster.nodes: {declared:,} nodes with {gpus:,} GPUs; at most {MAX_NODES:,} nodes"
            f" and {MAX_FLEET_GPUS:,} GPUs (docs/inputs.md)"
        )
        return False
    return True


def _check_nodes(f: FileDoc, problems: list[str]) -> tuple[list[tuple[str, str]], set[str]]:
    """`cluster.nodes`: each entry's own rules; returns (path, name) of every node and the GPU
    models present."""
    node_names: list[tuple[str, str]] = []
    models: set[str] = set()
    for i, n in enumerate(f.cluster.nodes):
        path = f"cluster.nodes[{i}]"
        if (n.name is None) == (n.name_prefix is None):
            problems.append(f"{path}: give exactly one of 'name' and 'name_prefix'")
        if n.name_prefix is None and n.count != 1:
            problems.append(f"{path}.count: 'count' needs 'name_prefix'")
        if isinstance(n.sharing, list) and len(n.sharing) != n.gpus:
            problems.append(f"{path}.sharing: {len(n.sharing)} entries for {n.gpus} GPUs")
        node_names += [(path, name) for name in n.names()]
        for name in n.names()[:1]:
            _valid_id(
                f"{path}.{'name' if n.name is not None else 'name_prefix'}",
                functools.partial(validate_token, "node name", name),
                problems,
            )
        if n.gpus:
            models.add(_node_model(n))
        if n.mig_layout:
            if "mig" not in n.sharing_of():
                problems.append(f"{path}.mig_layout: the node has no GPU with sharing 'mig'")
            try:
                parse_layout(n.model, n.mig_layout)
            except LayoutError as err:
                problems.append(f"{path}.mig_layout: {err}")
    return node_names, models


def _check_classes(f: FileDoc, problems: list[str]) -> None:
    """`priority_classes`: a built-in name is redefined only with `override: true`."""
    builtin = {c.name: c for c in DEFAULT_CLASSES}
    for i, c in enumerate(f.priority_classes):
        if c.name in builtin and not c.override:
            problems.append(
                f"priority_classes[{i}].name: {c.name!r} is a built-in priority class (value "
                f"{builtin[c.name].value}); add `override: true` to redefine it, or choose another name"
            )


def _check_tenants(f: FileDoc, models: set[str], problems: list[str]) -> None:
    """`tenants`: names, weights, lending limits, and per-model guarantees of present models."""
    for i, t in enumerate(f.tenants):
        _valid_id(f"tenants[{i}].name", functools.partial(validate_tenant, t.name), problems)
        for user in t.users.overrides if t.users is not None else ():
            _valid_id(
                f"tenants[{i}].users.overrides",
                functools.partial(validate_token, "user", user),
                problems,
            )
        if t.weight is not None and t.over_quota_weight is not None:
            problems.append(
                f"tenants[{i}].over_quota_weight: give either 'weight' or 'over_quota_weight', not both"
            )
        if t.lending_limit is not None and _milli(t.lending_limit) > _milli(t.guaranteed):
            problems.append(
                f"tenants[{i}].lending_limit: {t.lending_limit} GPUs is more than the tenant's "
                f"guarantee ({t.guaranteed}); a tenant lends at most its unused guarantee"
            )
        _check_model_limits(i, t, problems)
        named = [(f"tenants[{i}].guaranteed_by_model", m) for m in t.guaranteed_by_model]
        if t.users is not None:  # a user's bound per model, the default's and each override's
            named += [
                (f"tenants[{i}].users.default.gpus_by_model", m)
                for m in t.users.default.gpus_by_model
            ]
            named += [
                (f"tenants[{i}].users.overrides.{u}.gpus_by_model", m)
                for u, o in t.users.overrides.items()
                for m in o.gpus_by_model
            ]
        for where, m in named:
            if models and not set(job_models((m,))) & models:
                problems.append(
                    f"{where}.{m}: no GPU of model {m!r} in the cluster{_suggest(m, models)}"
                )


def _check_timeline(f: FileDoc, nodes: set[str], problems: list[str]) -> None:
    """`timeline`: each entry's shape, then what it names (a job submitted earlier, a service,
    a node of the cluster)."""
    submitted: dict[str, str] = {}
    services: set[str] = set()
    arrays: set[str] = set()
    for i, e in enumerate(f.timeline or []):
        path = f"timeline[{i}]"
        if not _check_entry_shape(e, path, problems):
            continue
        if e.submit is not None:
            seen = (submitted, services, arrays)
            _check_submit(e.submit, e.expect, f"{path}.submit", f, seen, problems)
            continue
        problem = _job_reference_problem(e, path, submitted, services, arrays)
        problem = problem or _node_reference_problem(e, path, nodes)
        if problem is not None:
            problems.append(problem)


def _job_reference_problem(
    e: EntryDoc, path: str, submitted: dict[str, str], services: set[str], arrays: set[str]
) -> str | None:
    """What is wrong with the job a cancel, hold, release, requeue, update, top or scale
    entry names (None: it was submitted earlier, a service for scale)."""
    if e.cancel is not None:
        return _cancel_problem(e.cancel, path, submitted, arrays)
    named = e.hold or e.release or e.requeue or e.update or e.top
    if named is not None:
        if named in submitted:
            return None
        verb = "hold" if e.hold else "release" if e.release else "requeue"
        verb = "update" if e.update else "top" if e.top else verb
        return (
            f"{path}.{verb}: job {named!r} is not submitted "
            f"earlier in the timeline{_suggest(named, submitted)}"
        )
    if e.scale is not None and e.scale not in services:
        return (
            f"{path}.scale: no service {e.scale!r} (kind: service) submitted earlier "
            f"in the timeline{_suggest(e.scale, services)}"
        )
    return None


def _node_reference_problem(e: EntryDoc, path: str, nodes: set[str]) -> str | None:
    """What is wrong with the node a cordon, uncordon, drain, maintenance or node_down entry
    names (None: a node of the cluster, or no cluster to check against), or with a window's
    span."""
    node = e.cordon or e.uncordon or e.drain
    if node is not None:
        if not nodes or node in nodes:
            return None
        verb = "cordon" if e.cordon else "uncordon" if e.uncordon else "drain"
        return f"{path}.{verb}: no node {node!r} in the cluster{_suggest(node, nodes)}"
    if e.maintenance is not None:
        return _maintenance_problem(e.maintenance, path, nodes)
    if e.node_down is not None and nodes and e.node_down not in nodes:
        return f"{path}.node_down: no node {e.node_down!r} in the cluster{_suggest(e.node_down, nodes)}"
    return None


def _cancel_problem(job: str, path: str, submitted: dict[str, str], arrays: set[str]) -> str | None:
    """A cancel names a job submitted earlier, or a task of an array submitted earlier."""
    if job in submitted or job.rpartition("@")[0] in arrays:
        return None
    return (
        f"{path}.cancel: job {job!r} is not submitted earlier in the timeline"
        f"{_suggest(job, submitted)}"
    )


def _maintenance_problem(m: MaintenanceDoc, path: str, nodes: set[str]) -> str | None:
    """A window names nodes of the cluster and ends after it starts."""
    bad = [n for n in m.nodes if nodes and n not in nodes]
    if bad:
        return f"{path}.maintenance: no node {bad[0]!r} in the cluster{_suggest(bad[0], nodes)}"
    span = _span(m)
    return None if span is None else f"{path}.maintenance: {span}"


def _span(m: MaintenanceDoc) -> str | None:
    """What is wrong with a window's span (None: it ends after it starts)."""
    from gpuledger.services.domain.inputs.quantities import seconds

    def at(v: float | int | str) -> float:
        return v if isinstance(v, float) else seconds("time", v)

    try:
        ok = at(m.end) > at(m.start)
    except ValueError as exc:
        return str(exc)
    return None if ok else "end must be after start"


ENTRY_ACTIONS = (
    "submit",
    "cancel",
    "scale",
    "node_down",
    "hold",
    "release",
    "requeue",
    "update",
    "top",
    "cordon",
    "uncordon",
    "drain",
    "maintenance",
    "maintenance_cancel",
)


def _check_entry_shape(e: EntryDoc, path: str, problems: list[str]) -> bool:
    """One timeline entry's keys belong together; False when it has not exactly one action
    (nothing more is checked of it then)."""
    actions = [k for k in ENTRY_ACTIONS if getattr(e, k) is not None]
    if len(actions) != 1:
        problems.append(
            f"{path}: an entry needs exactly one of {', '.join(ENTRY_ACTIONS)}"
            + (f" (got {', '.join(actions)})" if actions else "")
        )
        return False
    if e.expect is not None and e.submit is None:
        problems.append(f"{path}.expect: 'expect: rejected' belongs to a submit entry")
    if e.tenant is not None and e.cancel is None:
        problems.append(
            f"{path}.tenant: 'tenant' belongs to a cancel entry (a job names its tenant inside submit)"
        )
    if (e.replicas is None) != (e.scale is None):
        problems.append(
            f"{path}.{'replicas' if e.scale is None else 'scale'}: 'scale' and "
            "'replicas' go together (scale: SERVICE, replicas: N)"
        )
    return True


def _check_submit(
    j: JobDoc,
    expect: str | None,
    jp: str,
    f: FileDoc,
    seen: tuple[dict[str, str], set[str], set[str]],
    problems: list[str],
) -> None:
    """A submit entry: the job on its own, its id unique, then (unless it expects a rejection)
    its references to the configuration. Records it in `seen` (submitted, services, arrays)."""
    submitted, services, arrays = seen
    before = len(problems)
    _check_job(j, jp, problems)
    if len(problems) > before:
        return
    job_id = j.id or j.job_id or ""
    if job_id in submitted:
        problems.append(f"{jp}.id: duplicate job id {job_id!r} (first at {submitted[job_id]})")
    submitted.setdefault(job_id, jp)
    if j.kind == "service":
        services.add(job_id)
    if j.array is not None:
        arrays.add(job_id)
    if expect != "rejected":
        check_references(j, jp, f, problems)


def _check_schedules(f: FileDoc, problems: list[str]) -> None:
    _dups(
        [(f"schedules[{i}].name", s.name) for i, s in enumerate(f.schedules)], "schedule", problems
    )
    tenants = {t.name for t in f.tenants}
    classes = {c.name for c in DEFAULT_CLASSES} | {c.name for c in f.priority_classes}
    for i, s in enumerate(f.schedules):
        path = f"schedules[{i}]"
        _valid_id(
            f"{path}.name", functools.partial(validate_token, "schedule name", s.name), problems
        )
        _check_when(s, path, problems)
        if not s.tenants and not s.priority_classes and not s.services:
            problems.append(
                f"{path}: a schedule changes nothing (give tenants, priority_classes or services)"
            )
        _check_changes(s, path, tenants, classes, problems)
    if f.until is not None and f.timeline is None:
        problems.append("until: 'until' belongs to a scenario (a file with a timeline)")


def _check_when(s: Any, path: str, problems: list[str]) -> None:
    """A schedule's time zone is an IANA name and its cron line fires in it."""
    from gpuledger.services.domain.policy.schedules import cron_problem, zone

    try:
        zone(s.timezone)
    except ValueError:
        import zoneinfo

        problems.append(
            f"{path}.timezone: unknown time zone {s.timezone!r} (an IANA name such as "
            f"Europe/Berlin){_suggest(s.timezone, zoneinfo.available_timezones())}"
        )
        return
    problem = cron_problem(s.cron, s.timezone)
    if problem is not None:
        problems.append(f"{path}.cron: {problem}")


def _check_changes(
    s: Any, path: str, tenants: set[str], classes: set[str], problems: list[str]
) -> None:
    """A schedule's services are valid ids; its tenants and classes are configured and each
    change changes something."""
    for j, svc in enumerate(s.services):
        try:
            validate_token("job id", svc.job)
        except ValueError as err:
            problems.append(f"{path}.services[{j}].job: {err}")
    for j, t in enumerate(s.tenants):
        if t.name not in tenants:
            problems.append(
                f"{path}.tenants[{j}].name: tenant {t.name!r} is not configured"
                f"{_suggest(t.name, tenants)}"
            )
        if t.guaranteed is None and t.limit is None and t.weight is None:
            problems.append(
                f"{path}.tenants[{j}]: changes nothing (give guaranteed, limit or weight)"
            )
    for j, c in enumerate(s.priority_classes):
        if c.name not in classes:
            problems.append(
                f"{path}.priority_classes[{j}].name: priority class {c.name!r} is not configured"
                f"{_suggest(c.name, classes)}"
            )
        if c.value is None and c.preemptible is None:
            problems.append(
                f"{path}.priority_classes[{j}]: changes nothing (give value or preemptible)"
            )
