"""Stage `cordon`: nodes the operator cordoned (`NodeCordoned`, events/control.py) take no
new placements; what runs there runs on. When only the cordoned nodes would fit a job, it is
told `NodeCordoned` (which nodes, and why they are cordoned)."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """Every cordoned node (the nodes fold's index)."""
    return frozenset(rnd.state.sched.cordoned)


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """The cordoned nodes' reason when only they keep the job out."""
    if not rnd.binds(job, lim, why, STAGE.name):
        return
    nodes = sorted(rnd.state.sched.cordoned)
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    first = rnd.state.nodes[nodes[0]].cordon
    said = f" ({first.reason})" if first is not None and first.reason else ""
    why.reason = PendingReason.NodeCordoned
    why.message = f"fits only on cordoned nodes: {shown}{said}"
    why.details["cordoned"] = nodes


STAGE = Stage(
    "cordon",
    __doc__ or "",
    reasons=(PendingReason.NodeCordoned,),
    exclude=exclude,
    explain=explain,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, NODE_SET),
)
