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
    policy: {preemption: true, preemption_scope: cluster, default_grace_s: 30, ...}
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import (
    Event,
    GpuInfo,
    NodeInfo,
    Policy,
    PolicyConfigured,
    PriorityClassConfigured,
    TenantConfigured,
    derive_event_id,
    encode,
)
from services.domain.quantities import QuantityError, mebibytes, milli


class ConfigFileError(ValueError):
    """A configuration document that cannot be read; the message says where."""


def _gpus(name: str, n: dict[str, Any]) -> tuple[GpuInfo, ...]:
    count = int(n.get("gpus", 0))
    cliques = max(1, int(n.get("cliques", 1)))
    per = max(1, -(-count // cliques))
    model = str(n.get("model", "H100-80GB"))
    memory = mebibytes(f"{name}.gpu_memory", n.get("gpu_memory", "80Gi"))
    sharing = n.get("sharing", "exclusive")
    shares = sharing if isinstance(sharing, list) else [sharing] * count
    if len(shares) != count:
        raise ConfigFileError(f"node {name}: sharing list has {len(shares)} entries for {count} GPUs")
    return tuple(
        GpuInfo(
            index=i,
            uuid=f"GPU-{name}-{i}",
            model=model,
            memory_mib=memory,
            clique=f"{name}-nvl{i // per}",
            sharing=str(shares[i]),
        )
        for i in range(count)
    )


def node_infos(doc: dict[str, Any]) -> tuple[NodeInfo, ...]:
    out: list[NodeInfo] = []
    for n in (doc.get("cluster") or {}).get("nodes") or []:
        if not isinstance(n, dict):
            raise ConfigFileError("each cluster node must be a mapping")
        names = (
            [f"{n['name_prefix']}{i}" for i in range(1, int(n.get("count", 1)) + 1)]
            if "name_prefix" in n
            else [str(n.get("name", ""))]
        )
        for name in names:
            if not name:
                raise ConfigFileError("a cluster node needs a name (or name_prefix and count)")
            try:
                out.append(
                    NodeInfo(
                        name=name,
                        cpu_milli=milli(f"{name}.cpu", n.get("cpu", 64)),
                        memory_mib=mebibytes(f"{name}.memory", n.get("memory", "512Gi")),
                        gpus=_gpus(name, n),
                        pool=str(n.get("pool", "default")),
                        leaf_switch=str(n.get("leaf_switch", "")),
                        labels={str(k): str(v) for k, v in (n.get("labels") or {}).items()},
                    )
                )
            except (QuantityError, ValueError, TypeError) as exc:
                raise ConfigFileError(f"node {name}: {exc}") from exc
    return tuple(out)


def config_events(doc: dict[str, Any], producer: str = "config", at_ms: int = 0) -> list[Event]:
    """Configuration events for the document, with content-derived ids (re-publishing the
    same configuration is deduplicated)."""
    out: list[Event] = []
    try:
        for t in doc.get("tenants") or []:
            out.append(
                TenantConfigured(
                    tenant=str(t["name"]),
                    guaranteed_gpu_milli=milli("guaranteed", t.get("guaranteed", 0)),
                    limit_gpu_milli=None if t.get("limit") is None else milli("limit", t["limit"]),
                    over_quota_weight=int(t.get("weight", t.get("over_quota_weight", 1))),
                    guaranteed_by_model={
                        str(m): milli(f"guaranteed_by_model.{m}", v)
                        for m, v in sorted((t.get("guaranteed_by_model") or {}).items())
                    },
                )
            )
        for c in doc.get("priority_classes") or []:
            out.append(msgspec.convert(c, PriorityClassConfigured))
        if doc.get("policy") is not None:
            out.append(PolicyConfigured(policy=msgspec.convert(doc["policy"], Policy)))
    except (KeyError, QuantityError, msgspec.ValidationError, TypeError) as exc:
        raise ConfigFileError(f"configuration: {exc}") from exc
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
    return stamped
