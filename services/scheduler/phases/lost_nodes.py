"""Phase `lost_nodes`: a node silent for `policy.node_timeout_s` is declared lost
(`NodeLost`); settling then evicts the allocations on it."""

from __future__ import annotations

from gpuledger.events import Event, NodeLost
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import NODE_SET, of
from gpuledger.services.scheduler.phase import Phase


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """`NodeLost` for every heartbeating node silent for the timeout."""
    out: list[Event] = []
    if not state.sched.heartbeating:
        return out
    timeout = state.config.policy.node_timeout_s * 1000
    for name in sorted(state.sched.heartbeating):
        node = state.nodes[name]
        if node.lost or node.last_heartbeat_ms is None:
            continue
        silent = now_ms - node.last_heartbeat_ms
        if silent >= timeout:
            out.append(
                svc.emit(
                    state,
                    now_ms,
                    NodeLost,
                    key=f"{name}@{node.last_heartbeat_ms}",
                    correlation_id=name,
                    node=name,
                    message=f"no heartbeat for {silent / 1000:.0f}s (timeout {timeout / 1000:.0f}s)",
                )
            )
    return out


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """When a heartbeating node's timeout comes."""
    if not state.sched.heartbeating:
        return []
    timeout = state.config.policy.node_timeout_s * 1000
    return [
        n.last_heartbeat_ms + timeout
        for n in (state.nodes[name] for name in state.sched.heartbeating)
        if n.last_heartbeat_ms is not None and not n.lost
    ]


PHASE = Phase("lost_nodes", run, wakeup, reads=of(NODE_SET, "tenants"))
