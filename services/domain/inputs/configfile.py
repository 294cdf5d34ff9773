"""Cluster configuration documents (YAML) to configuration events and node inventories.

One document shape serves `gpuledger up --config`, scenario files and compose:

    cluster:
      nodes:
        - {name: n1, gpus: 8, model: H100-80GB, gpu_memory: 80Gi, cpu: 128, memory: 1Ti,
           cliques: 1, sharing: exclusive, leaf_switch: leaf-1}
        - {name_prefix: a, count: 4, gpus: 8, ...}      # a1..a4
    tenants:
      - {name: org/a, guaranteed: 4, limit: 8, weight: 1, guaranteed_by_model: {H100-80GB: 2}}
    priority_classes:
      - {name: inference-critical, value: 10000, preemptible: false, slo_class: latency-critical}
    schedules:
      - {name: business-hours, cron: "0 8 * * 1-5", timezone: Europe/Berlin,
         tenants: [{name: org/a, guaranteed: 6}], priority_classes: [{name: train, value: 40}]}
    policy: {preemption: true, preemption_scope: cluster, default_grace_s: 30, ...}
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

from gpuledger.events import (
    ClassChange,
    Event,
    GpuInfo,
    NodeInfo,
    Policy,
    PolicyConfigured,
    PriorityClassConfigured,
    ScheduleConfigured,
    ServiceChange,
    TenantChange,
    TenantConfigured,
    derive_event_id,
    encode,
)
from gpuledger.events.specs import SubmitLimit, UserLimit, UserLimits
from gpuledger.services.domain.inputs import reservations
from gpuledger.services.domain.inputs.gpu_models import resolve, resolve_node
from gpuledger.services.domain.inputs.mig_layouts import layout_text, parse_layout
from gpuledger.services.domain.inputs.quantities import mebibytes, milli, seconds
from gpuledger.services.domain.inputs.schema import (
    FileDoc,
    InputError,
    NodeDoc,
    ScheduleDoc,
    validate_file,
)


class ConfigFileError(InputError):
    """A configuration document that does not validate; one problem per line, each with its
    key path (see `services.domain.inputs.schema`)."""


def parse(doc: Any) -> FileDoc:
    """The document checked against the strict schema; raises ConfigFileError."""
    if isinstance(doc, FileDoc):
        return doc
    try:
        return validate_file(doc)
    except InputError as exc:
        raise ConfigFileError(exc.problems) from None


def _gpus(name: str, n: NodeDoc) -> tuple[GpuInfo, ...]:
    count = n.gpus
    per = max(1, -(-count // n.cliques))
    memory = mebibytes("gpu_memory", n.gpu_memory)
    shares = n.sharing_of()
    model = resolve_node(n.model, memory)
    layout = layout_text(parse_layout(model, n.mig_layout)) if n.mig_layout else ()
    return tuple(
        GpuInfo(
            index=i,
            uuid=f"GPU-{name}-{i}",
            model=model,
            memory_mib=memory,
            clique=f"{name}-nvl{i // per}",
            sharing=shares[i],
            **cast(dict[str, Any], {"mig_layout": layout} if layout and shares[i] == "mig" else {}),
        )
        for i in range(count)
    )


def node_infos(doc: Any) -> tuple[NodeInfo, ...]:
    """The declared nodes (`name_prefix` + `count` expanded), in file order."""
    out: list[NodeInfo] = []
    for n in parse(doc).cluster.nodes:
        for name in n.names():
            out.append(
                NodeInfo(
                    name=name,
                    cpu_milli=milli("cpu", n.cpu),
                    memory_mib=mebibytes("memory", n.memory),
                    gpus=_gpus(name, n),
                    pool=n.pool,
                    leaf_switch=n.leaf_switch,
                    labels=dict(n.labels),
                )
            )
    return tuple(out)


def schedule_event(s: ScheduleDoc) -> ScheduleConfigured:
    """A `schedules:` entry as the configuration event the fold keeps."""
    return ScheduleConfigured(
        name=s.name,
        cron=s.cron,
        timezone=s.timezone,
        description=s.description,
        tenants=tuple(
            TenantChange(
                tenant=t.name,
                guaranteed_gpu_milli=None
                if t.guaranteed is None
                else milli("guaranteed", t.guaranteed),
                limit_gpu_milli=None if t.limit is None else milli("limit", t.limit),
                over_quota_weight=t.weight,
            )
            for t in s.tenants
        ),
        priority_classes=tuple(
            ClassChange(name=c.name, value=c.value, preemptible=c.preemptible)
            for c in s.priority_classes
        ),
        services=tuple(ServiceChange(job_id=c.job, replicas=c.replicas) for c in s.services),
    )


def _by_model(key: str, values: dict[str, Any]) -> Any:
    """A per-model map of milli-GPUs, model names resolved and sorted; `UNSET` when empty
    (left out of the JSON)."""
    if not values:
        return msgspec.UNSET
    return dict(sorted((resolve(m), milli(f"{key}.{m}", v)) for m, v in values.items()))


def _user_limit(key: str, d: Any) -> UserLimit:
    return UserLimit(
        running_jobs=d.running_jobs,
        gpu_milli=None if d.gpus is None else milli(f"{key}.gpus", d.gpus),
        submit_jobs=d.submit_jobs,
        array_size=d.array_size,
        weight=d.weight,
        gpu_milli_by_model=_by_model(f"{key}.gpus_by_model", d.gpus_by_model),
    )


def _submit_limits(limits: Any) -> Any:
    """A tenant's `limits:` as `SubmitLimit`; `UNSET` when not given (left out of the JSON)."""
    if limits is None:
        return msgspec.UNSET
    return SubmitLimit(
        submit_jobs=limits.submit_jobs,
        array_size=limits.array_size,
        submit_rate=limits.submit_rate,
    )


def _user_limits(users: Any) -> Any:
    """A tenant's `users:` as `UserLimits`; `UNSET` when not given (left out of the JSON)."""
    if users is None:
        return msgspec.UNSET
    return UserLimits(
        default=_user_limit("users.default", users.default),
        overrides={
            u: _user_limit(f"users.overrides.{u}", users.overrides[u])
            for u in sorted(users.overrides)
        },
    )


def config_events(doc: Any, producer: str = "config", at_ms: int = 0) -> list[Event]:
    """Configuration events for the document, with content-derived ids (re-publishing the
    same configuration is deduplicated)."""
    f = parse(doc)
    out: list[Event] = []
    for t in f.tenants:
        weight = t.weight if t.weight is not None else t.over_quota_weight
        out.append(
            TenantConfigured(
                tenant=t.name,
                guaranteed_gpu_milli=milli("guaranteed", t.guaranteed),
                limit_gpu_milli=None if t.limit is None else milli("limit", t.limit),
                over_quota_weight=1 if weight is None else weight,
                guaranteed_by_model=dict(
                    sorted(
                        (resolve(m), milli(f"guaranteed_by_model.{m}", v))
                        for m, v in t.guaranteed_by_model.items()
                    )
                ),
                borrowing_limit_gpu_milli=msgspec.UNSET
                if t.borrowing_limit is None
                else milli("borrowing_limit", t.borrowing_limit),
                lending_limit_gpu_milli=msgspec.UNSET
                if t.lending_limit is None
                else milli("lending_limit", t.lending_limit),
                borrowing_limit_by_model=_by_model(
                    "borrowing_limit_by_model", t.borrowing_limit_by_model
                ),
                lending_limit_by_model=_by_model(
                    "lending_limit_by_model", t.lending_limit_by_model
                ),
                user_limits=_user_limits(t.users),
                submit_limits=_submit_limits(t.limits),
            )
        )
    for c in f.priority_classes:
        fields = msgspec.structs.asdict(c)
        del fields["override"]
        for key in ("default_time_limit", "max_time_limit"):  # friendly durations -> seconds
            value = fields.pop(key)
            if value is not None:
                fields[f"{key}_s"] = seconds(key, value)
        out.append(PriorityClassConfigured(**fields))
    if f.policy is not None:
        policy = msgspec.structs.asdict(f.policy)  # type: ignore[unreachable]  # PolicyDoc: defstruct
        out.append(PolicyConfigured(policy=Policy(**policy)))
    for s in f.schedules:
        out.append(schedule_event(s))
    stamped = []
    for e in out:
        key = f"{at_ms}:{encode(e).decode()}"
        stamped.append(
            msgspec.structs.replace(
                e,
                event_id=derive_event_id(type(e).__name__, key),
                occurred_at_ms=at_ms,
                correlation_id="config",
                producer=producer,
            )
        )
    return stamped + reservations.events(f, producer, at_ms)  # ids from content alone
