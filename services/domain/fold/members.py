"""Where the members of active allocations are: per node (`agents.node_allocations`, read by
the node agents, and when each node was last left empty: `agents.node_vacated_ms`) and per spread group and node (`sched.spread_nodes`, read by the
scheduler's spread limit). Part of the allocations aggregate (`allocations.FOLD`).

Invariant: both count exactly the members of active allocations; no empty entries in
`spread_nodes`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuledger.events import MemberPlacement

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import AllocationRecord, JobRecord, LedgerState


def index(ledger: LedgerState, rec: AllocationRecord) -> None:
    """`rec` runs on its nodes (`rec.nodes()`)."""
    for node in rec.nodes():
        ledger.agents.node_allocations.setdefault(node, set()).add(rec.allocation_id)


def unindex(ledger: LedgerState, rec: AllocationRecord, now_ms: int) -> None:
    """`rec` no longer runs on its nodes; a node it leaves empty is vacated at `now_ms`."""
    for node in rec.nodes():
        left = ledger.agents.node_allocations.get(node, set())
        left.discard(rec.allocation_id)
        if not left:
            ledger.agents.node_vacated_ms[node] = now_ms


def spread(
    ledger: LedgerState, job: JobRecord | None, members: Iterable[MemberPlacement], sign: int
) -> None:
    """Count `members` of a job in a spread group on their nodes (`sign` 1) or take them
    away (-1); no zero entries are kept."""
    if job is None or not job.spec.spread:
        return
    group = job.spec.spread.group
    if sign > 0:
        per_node = ledger.sched.spread_nodes.setdefault(group, {})
        for m in members:
            per_node[m.node] = per_node.get(m.node, 0) + 1
        return
    per_node = ledger.sched.spread_nodes.get(group, {})
    for m in members:
        left = per_node.get(m.node, 0) - 1
        if left > 0:
            per_node[m.node] = left
        else:
            per_node.pop(m.node, None)
    if not per_node:
        ledger.sched.spread_nodes.pop(group, None)
