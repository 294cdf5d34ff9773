"""Event -> row handlers of nodes: registration, heartbeats, loss, GPU metrics."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.projections.mappers.rows import (
    GpuRow,
    MaintenanceRow,
    NodeRow,
    _dumps,
)
from gpuledger.projections.mappers.state import ProjectionState
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side


class NodeMappers(ProjectionState):
    """The `nodes`, `gpus` and `gpu_metrics` rows."""

    # -------------------------------------------------------------- handlers: nodes

    def _node_registered(self, seq: int, e: ev.NodeRegistered) -> None:
        info = e.node
        n = self.nodes.get(info.name)
        if n is None:
            n = NodeRow(node=info.name, running_members=0)
            self.nodes[info.name] = n
        n.pool, n.leaf_switch = info.pool, info.leaf_switch
        n.cpu_milli, n.memory_mib = info.cpu_milli, info.memory_mib
        n.gpu_count = len(info.gpus)
        n.simulated = e.simulated
        self._node_status(n)  # a re-registration keeps a cordon
        n.labels = _dumps(info.labels or {})
        n.registered_at_ms = e.occurred_at_ms
        n.lost_at_ms = n.lost_message = None
        self.batch.upsert(n)
        seen = set()
        for g in info.gpus:
            key = (info.name, g.index)
            seen.add(key)
            row = GpuRow(
                node=info.name,
                gpu_index=g.index,
                uuid=g.uuid,
                model=g.model,
                memory_mib=g.memory_mib,
                clique=g.clique,
                sharing=g.sharing,
                healthy=g.healthy,
                registered_at_ms=e.occurred_at_ms,
            )
            self.gpus[key] = row
            self.batch.upsert(row)
        for key in [k for k in self.gpus if k[0] == info.name and k not in seen]:
            del self.gpus[key]
            self.batch.delete("gpus", key)

    def _heartbeat(self, seq: int, e: ev.NodeHeartbeat) -> None:
        n = self.nodes.get(e.node)
        if n is None:
            return
        n.last_heartbeat_ms = e.occurred_at_ms
        n.running_members = len(e.running)
        rec = self.ledger.nodes.get(e.node)
        if n.status == "lost" and rec is not None and not rec.lost:
            # the ledger's rule (the scheduler places on it again): heard from again, it is back
            n.lost_at_ms = n.lost_message = None
        if rec is not None:  # the ledger's state (a drain ends as `drained` between reports)
            self._node_status(n)
        self.batch.upsert(n)

    def _node_lost(self, seq: int, e: ev.NodeLost) -> None:
        n = self.nodes.get(e.node)
        if n is None:
            return
        self._node_status(n)
        n.lost_at_ms = e.occurred_at_ms
        n.lost_message = e.message
        self.batch.upsert(n)

    def _node_control(self, seq: int, e: ev.NodeCordoned | ev.NodeUncordoned) -> None:
        """The operator's cordon: the node's status is the ledger's (`nodes.node_status`)."""
        n = self.nodes.get(e.node)
        if n is not None:
            self._node_status(n)
            self.batch.upsert(n)

    def _maintenance(self, seq: int, e: ev.MaintenanceScheduled | ev.MaintenanceCancelled) -> None:
        """A window as the fold derived it (`MaintenanceWindow`): one row per node; a window
        held for a tenant names it (its idle GPU time is reserved, not planned down)."""
        w = self.ledger.maintenance.get(e.window_id)
        if w is not None:
            self.batch.upsert(
                MaintenanceRow(
                    window_id=w.window_id,
                    node=w.nodes,
                    start_ms=w.start_ms,
                    end_ms=w.end_ms,
                    until_ms=w.until_ms,
                    reason=w.reason,
                    scheduled_at_ms=w.scheduled_ms,
                    cancelled_at_ms=w.cancelled_ms,
                    tenant=w.tenant,
                )
            )

    def _metrics(self, seq: int, e: ev.GpuMetricsReported) -> None:
        add = self._add_metric
        at = e.occurred_at_ms
        node = e.node
        for s in e.samples:
            add(seq, at, node, s.uuid, s.mig_uuid, s.sm_active, s.util_source, s.memory_used_mib)
