"""The embedded NATS of `gpuledger up` and `demo`: one nats-server or a loopback cluster,
authentication on, with the identities a cluster configuration calls for."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def embedded(data: Path | None, keep: bool, doc: dict[str, Any] | None = None):
    """The embedded nats-server, authentication on: identities in `<data>/auth` (the layout of
    `gpuledger auth init`), with one per node and one CI identity per tenant of `doc`."""
    from gpuledger.services.runtime.nats_server import EmbeddedNats

    store = None
    if keep and data is not None:
        store = data / "nats"
        store.mkdir(parents=True, exist_ok=True)
    server = EmbeddedNats(store, sync_always=keep)
    if doc:
        server.auth.add(*cluster_principals(doc))
    return server


def embedded_cluster(data: Path, nodes: int, doc: dict[str, Any] | None = None):
    """A loopback NATS cluster of `nodes` nodes (services/runtime/nats_cluster.py), stores kept
    in `<data>/nats-cluster/node-<i>`, the same identities as `embedded` in `<data>/auth`."""
    from gpuledger.services.runtime.nats_cluster import EmbeddedNatsCluster

    store = data / "nats-cluster"
    store.mkdir(parents=True, exist_ok=True)
    cluster = EmbeddedNatsCluster(nodes, store, auth=data / "auth", sync_always=True)
    if doc:
        cluster.auth.add(*cluster_principals(doc))
    return cluster


def cluster_principals(doc: dict[str, Any]) -> list[str]:
    """The per-node and per-tenant identities a cluster configuration calls for."""
    from gpuledger.services.domain.inputs.configfile import node_infos, parse

    return [f"node:{n.name}" for n in node_infos(doc)] + [
        f"ci:{t.name}" for t in parse(doc).tenants
    ]
