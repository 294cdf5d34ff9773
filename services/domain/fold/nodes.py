"""The nodes fold: nodes registered (with their GPUs), their heartbeats, lost and back.

Owns `nodes`, `nodes_version` and `sched.heartbeating`, and books each node's spec and
schedulability in the fleet. The MIG fold changes a node's GPUs through `replace_info`; a
lost node's allocations go to the allocations fold to settle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold import allocations
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.records import NodeRecord
from gpuledger.services.domain.fold.refusals import Refused
from gpuledger.services.domain.tooling.placement_adapter import node_spec
from gpuledger.services.placement import PlacementConflict

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def registered(ledger: LedgerState, e: ev.NodeRegistered) -> None:
    ledger.nodes[e.node.name] = NodeRecord(
        info=e.node,
        simulated=e.simulated,
        registered_ms=e.occurred_at_ms,
        last_heartbeat_ms=e.occurred_at_ms if e.heartbeat_s > 0 else None,
    )
    if e.heartbeat_s > 0:
        ledger.sched.heartbeating.add(e.node.name)
    else:
        ledger.sched.heartbeating.discard(e.node.name)
    ledger.fleet.add_node(node_spec(e.node))
    ledger.nodes_version += 1


def heartbeat(ledger: LedgerState, e: ev.NodeHeartbeat) -> None:
    node = ledger.nodes.get(e.node)
    if node is not None:
        node.last_heartbeat_ms = e.occurred_at_ms
        if node.lost:
            node.lost = False
            ledger.fleet.set_schedulable(e.node, True)
            ledger.nodes_version += 1


def lost(ledger: LedgerState, e: ev.NodeLost) -> None:
    node = ledger.nodes.get(e.node)
    if node is not None and not node.lost:
        node.lost = True
        ledger.fleet.set_schedulable(e.node, False)
        ledger.nodes_version += 1
        allocations.settle(ledger, ledger.agents.node_allocations.get(e.node, ()))


def replace_info(ledger: LedgerState, node: NodeRecord, info: ev.NodeInfo) -> None:
    """`node` now has `info` (a GPU re-partitioned): booked in the fleet first, atomically
    (a conflict keeps the old spec and raises `Refused`)."""
    try:
        ledger.fleet.add_node(node_spec(info))
    except PlacementConflict as err:
        raise Refused(FoldRefusal.PlacementConflict, f"{info.name}: {err}") from err
    node.info = info
    ledger.nodes_version += 1


FOLD = Fold(
    name="nodes",
    owns=frozenset({"nodes", "nodes_version", "sched.heartbeating"}),
    handlers={
        ev.NodeRegistered: registered,
        ev.NodeHeartbeat: heartbeat,
        ev.NodeLost: lost,
    },
    modules=("nodes",),
)
