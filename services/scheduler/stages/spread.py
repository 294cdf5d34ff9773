"""Stage `spread`: members of a spread group (`JobSpec.spread`) go at most `max_per_node` to
a node, tentative allocations of this decide included. When the group's limit is what keeps
a job out (it would fit on nodes at that limit), its message says so (the reason stays the
placement's). Every bind counts its members in its group."""

from __future__ import annotations

from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def counts(rnd: Round, group: str) -> dict[str, int]:
    """Members per node of spread group `group`: the folded index (`Ledger.sched.spread_nodes`,
    the active allocations) corrected by this decide's tentative changes to the fleet."""
    out = rnd.spread.get(group)
    if out is None:
        state = rnd.state
        out = dict(state.sched.spread_nodes.get(group, {}))
        view = rnd.trial  # books this decide's placements first
        added, gone = view.changes()
        for _id, sign, alloc in [
            *((a, -1, view.base.allocation(a)) for a in gone),
            *((a, 1, added[a]) for a in sorted(added)),
        ]:
            job = state.jobs.get(alloc.request.job_id)
            if job is not None and job.spec.spread and job.spec.spread.group == group:
                for m in alloc.placement.members:
                    out[m.node] = out.get(m.node, 0) + sign
        rnd.spread[group] = out
    return out


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The nodes at the job's spread limit."""
    spread = job.spec.spread
    if not spread:
        return frozenset()
    per_node = counts(rnd, spread.group)
    lim.spread_full = frozenset(n for n, c in per_node.items() if c >= spread.max_per_node)
    return lim.spread_full


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """The nodes at the group's limit, and whether they are what keeps the job out."""
    spread = job.spec.spread
    if not lim.spread_full or not spread:
        return
    full = sorted(lim.spread_full)
    why.details["spread"] = {
        "group": spread.group,
        "max_per_node": spread.max_per_node,
        "nodes_at_limit": len(full),
    }
    if not rnd.binds(job, lim, why, STAGE.name):
        why.message += (
            f"; {len(full)} more nodes at the spread limit of group {spread.group!r} "
            f"({spread.max_per_node} per node)"
        )
        return
    shown = ", ".join(full[:5]) + (f" and {len(full) - 5} more" if len(full) > 5 else "")
    why.message = (
        f"spread group {spread.group!r} allows at most {spread.max_per_node} per node; "
        f"the nodes where it would fit are at that limit ({shown})"
    )


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """The members bound count in their group (once its counts are built)."""
    spread = job.spec.spread
    if spread and spread.group in rnd.spread:
        per_node = rnd.spread[spread.group]
        for m in members:
            per_node[m.node] = per_node.get(m.node, 0) + 1


STAGE = Stage(
    "spread",
    __doc__ or "",
    exclude=exclude,
    explain=explain,
    book=book,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, "allocations"),
)
