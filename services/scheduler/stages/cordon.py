"""Stage `cordon`: nodes the operator cordoned or drains (`NodeCordoned`, events/control.py)
take no new placements; what runs on a cordoned node runs on. When only those nodes would fit
a job, it is told `NodeCordoned`: which nodes are cordoned and which are being drained (a
drain's runs left or not: the message does not move as they leave), and the operator's
words."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """Every cordoned node (the nodes fold's index)."""
    return frozenset(rnd.state.sched.cordoned)


def _listed(nodes: list[str]) -> str:
    return ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """The cordoned and drained nodes' reason when only they keep the job out."""
    if not rnd.binds(job, lim, why, STAGE.name):
        return
    kinds: dict[bool, list[str]] = {False: [], True: []}  # drain? -> nodes
    said: dict[bool, str] = {}
    for n in sorted(rnd.state.sched.cordoned):
        cordon = rnd.state.nodes[n].cordon
        drain = cordon is not None and cordon.drain
        kinds[drain].append(n)
        if drain not in said and cordon is not None and cordon.reason:
            said[drain] = f" ({cordon.reason})"
    parts = [
        f"{what}: {_listed(kinds[drain])}{said.get(drain, '')}"
        for drain, what in ((False, "cordoned nodes"), (True, "nodes being drained"))
        if kinds[drain]
    ]
    why.reason = PendingReason.NodeCordoned
    why.message = "fits only on " + "; and on ".join(parts)
    why.details["cordoned"] = sorted(kinds[False] + kinds[True])
    if kinds[True]:
        why.details["being_drained"] = kinds[True]


STAGE = Stage(
    "cordon",
    __doc__ or "",
    reasons=(PendingReason.NodeCordoned,),
    exclude=exclude,
    explain=explain,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, NODE_SET),
)
