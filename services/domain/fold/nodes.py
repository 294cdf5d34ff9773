"""The nodes fold: nodes registered (with their GPUs), their heartbeats, lost and back.

Owns `nodes`, `nodes_version`, `sched.heartbeating`, `sched.cordoned` (the operator's
cordons: `NodeCordoned`, `NodeUncordoned`) and `maintenance` (windows: maintenance.py), and books each node's spec and
schedulability in the fleet. The MIG fold changes a node's GPUs through `replace_info`; a
lost node's allocations go to the allocations fold to settle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold import allocations, maintenance
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.records import CordonRecord, NodeRecord
from gpuledger.services.domain.fold.refusals import Refusal, Refused
from gpuledger.services.domain.tooling.placement_adapter import node_spec
from gpuledger.services.placement import PlacementConflict

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def registered(ledger: LedgerState, e: ev.NodeRegistered) -> None:
    before = ledger.nodes.get(e.node.name)
    ledger.nodes[e.node.name] = NodeRecord(
        info=e.node,
        simulated=e.simulated,
        registered_ms=e.occurred_at_ms,
        last_heartbeat_ms=e.occurred_at_ms if e.heartbeat_s > 0 else None,
        cordon=None if before is None else before.cordon,  # an agent's restart keeps it
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
            node.lost_ms = None
            ledger.fleet.set_schedulable(e.node, True)
            ledger.nodes_version += 1


def lost(ledger: LedgerState, e: ev.NodeLost) -> None:
    node = ledger.nodes.get(e.node)
    if node is not None and not node.lost:
        node.lost = True
        node.lost_ms = e.occurred_at_ms
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


def cordoned(ledger: LedgerState, e: ev.NodeCordoned) -> Refusal | None:
    node = ledger.nodes.get(e.node)
    if node is None:
        return Refusal(FoldRefusal.UnknownNode, f"no node {e.node!r}: nothing to cordon")
    deadline = None if e.deadline_s is None else e.occurred_at_ms + e.deadline_s * 1000
    node.cordon = CordonRecord(e.reason, e.occurred_at_ms, e.drain, e.force, deadline)
    ledger.sched.cordoned.add(e.node)
    return None


def uncordoned(ledger: LedgerState, e: ev.NodeUncordoned) -> Refusal | None:
    node = ledger.nodes.get(e.node)
    if node is None:
        return Refusal(FoldRefusal.UnknownNode, f"no node {e.node!r}: nothing to uncordon")
    node.cordon = None
    ledger.sched.cordoned.discard(e.node)
    return None


class NodeStatus(NamedTuple):
    """A node's state as people read it, since when (epoch ms; None for `ready`) and why (the
    operator's words for a cordon or drain, else "")."""

    state: str
    since_ms: int | None
    reason: str


def node_status(ledger: LedgerState, name: str) -> NodeStatus:
    """A node's state (one place: the CLI, `why` and the projection show this): `lost`;
    `cordoned`; `draining` (a drain with runs left on it) or `drained` (since its last run
    left, or the drain if none ran); else `ready`. A maintenance window in force is the
    projection's `node_status` view's (its phase moves with the clock)."""
    node = ledger.nodes[name]
    if node.lost:
        return NodeStatus("lost", node.lost_ms, "")
    cordon = node.cordon
    if cordon is None:
        return NodeStatus("ready", None, "")
    if not cordon.drain:
        return NodeStatus("cordoned", cordon.at_ms, cordon.reason)
    if ledger.agents.node_allocations.get(name):
        return NodeStatus("draining", cordon.at_ms, cordon.reason)
    vacated = ledger.agents.node_vacated_ms.get(name, cordon.at_ms)
    return NodeStatus("drained", max(cordon.at_ms, vacated), cordon.reason)


def node_state(ledger: LedgerState, name: str) -> str:
    """`node_status`'s state alone."""
    return node_status(ledger, name).state


FOLD = Fold(
    name="nodes",
    owns=frozenset(
        {"nodes", "nodes_version", "sched.heartbeating", "sched.cordoned", "maintenance"}
    ),
    handlers={
        ev.NodeRegistered: registered,
        ev.NodeHeartbeat: heartbeat,
        ev.NodeLost: lost,
        ev.NodeCordoned: cordoned,
        ev.NodeUncordoned: uncordoned,
        ev.MaintenanceScheduled: maintenance.scheduled,
        ev.MaintenanceCancelled: maintenance.cancelled,
    },
    modules=("nodes", "maintenance"),
)
