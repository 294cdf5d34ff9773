"""The MIG fold: re-geometry of a MIG GPU, requested by the preemption service (one at a time
per node, rate-limited by its history) and reported done by the node's agent.

Owns `mig.mig_requests` and `mig.mig_history`; the node's new GPU layout goes to the nodes
fold (`nodes.replace_info`). A report that contradicts the node (no such MIG GPU, an instance
in use, a layout the model cannot hold) raises `Refused` before any change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold import nodes
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.refusals import Refusal, Refused
from gpuledger.services.domain.inputs.mig_layouts import LayoutError, layout_text, parse_layout

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState

MIG_HISTORY = 16
"""Re-geometry request times kept per node (the rate limit allows at most 16 per window)."""


def requested(ledger: LedgerState, e: ev.MigReconfigurationRequested) -> Refusal | None:
    node = ledger.nodes.get(e.node)
    if node is None:
        return Refusal(FoldRefusal.UnknownNode, f"no node {e.node!r}")
    if e.node in ledger.mig.mig_requests:
        return Refusal(
            FoldRefusal.MigReconfigurationPending,
            f"node {e.node} already has a MIG re-geometry under way",
        )
    history = ledger.mig.mig_history.setdefault(e.node, [])
    history.append(e.occurred_at_ms)
    del history[:-MIG_HISTORY]
    ledger.mig.mig_requests[e.node] = e
    return None


def reconfigured(ledger: LedgerState, e: ev.MigReconfigured) -> None:
    node = ledger.nodes.get(e.node)
    if node is None:
        raise Refused(FoldRefusal.UnknownNode, f"no node {e.node!r}")
    gpus = {g.index: g for g in node.info.gpus}
    gpu = gpus.get(e.gpu_index)
    if gpu is None or gpu.sharing != "mig":
        raise Refused(FoldRefusal.NotMigGpu, f"node {e.node} has no MIG GPU {e.gpu_index}")
    for a in sorted(ledger.agents.node_allocations.get(e.node, ())):
        if any(m.node == e.node and e.gpu_index in m.gpus for m in ledger.allocations[a].members):
            raise Refused(
                FoldRefusal.MigInstanceInUse,
                f"GPU {e.gpu_index} of {e.node} holds an instance of {a}",
            )
    try:
        layout = layout_text(parse_layout(gpu.model, e.layout))
    except LayoutError as err:
        raise Refused(FoldRefusal.InvalidMigLayout, str(err)) from err
    info = msgspec.structs.replace(
        node.info,
        gpus=tuple(
            msgspec.structs.replace(g, mig_layout=layout) if g.index == e.gpu_index else g
            for g in node.info.gpus
        ),
    )
    nodes.replace_info(ledger, node, info)
    pending = ledger.mig.mig_requests.get(e.node)
    if pending is not None and pending.gpu_index == e.gpu_index:
        del ledger.mig.mig_requests[e.node]


FOLD = Fold(
    name="mig",
    owns=frozenset({"mig.mig_requests", "mig.mig_history"}),
    handlers={
        ev.MigReconfigurationRequested: requested,
        ev.MigReconfigured: reconfigured,
    },
    modules=("mig",),
)
