"""Stage `maintenance`: a job is not started on a node whose maintenance window
(`MaintenanceScheduled`, events/control.py; folded once in fold/maintenance.py) it would
reach: a run from now to now + its bound that overlaps the window, the bound being its time
limit, else what is left of its duration hint plus a margin (`maintenance.run_bound_s`);
with neither, any window not yet over. A window held for a tenant (`--tenant`) keeps only the other
tenants' jobs off. So a window's nodes take only work that ends before it, none
while it is in force (planned down), and all again at its end (the stage's wake-up). When
only such nodes would fit a job, it is told `Maintenance`, naming the window."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.fold.maintenance import (
    HINT_MARGIN_PCT,
    closed_nodes,
    reaching,
    run_bound_s,
)
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, NODE_SET, of
from gpuledger.services.domain.tooling.timefmt import duration, instant
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def _run_end(rnd: Round, job: JobRecord) -> int | None:
    """When a run started now would end at the latest (None: unbounded)."""
    bound = run_bound_s(job)
    return None if bound is None else rnd.now_ms + bound * 1000


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The nodes of every window a run started now would reach."""
    return closed_nodes(rnd.state, rnd.now_ms, run_bound_s(job), job.tenant)


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """The windows' reason when only they keep the job out."""
    if not lim.excluded.get(STAGE.name) or not rnd.binds(job, lim, why, STAGE.name):
        return
    now, end = rnd.now_ms, _run_end(rnd, job)
    state = rnd.state
    hits = {
        w.window_id: w
        for n in sorted(lim.excluded[STAGE.name])
        if (w := reaching(state, n, now, end, job.tenant)) is not None
    }
    first = min(hits.values(), key=lambda w: (w.start_ms, w.window_id))
    span = f"{instant(first.start_ms)} to {instant(first.until_ms)}"
    if first.start_ms <= now:
        how = "in force"
    elif end is None:
        how = "the job has no time limit or duration hint"
    elif job.time_limit_s is None:
        how = (
            f"its duration hint with a {HINT_MARGIN_PCT}% margin, {duration(end - now)}, "
            "would reach into it"
        )
    else:
        how = f"its time limit {duration(end - now)} would reach into it"
    why.reason = PendingReason.Maintenance
    held = f" held for tenant {first.tenant}" if first.tenant else ""
    why.message = (
        f"fits only on nodes of maintenance window {first.window_id}{held} "
        f"({', '.join(first.nodes)}, {span}): {how}"
        + (f" ({first.reason})" if first.reason else "")
    )
    why.details["maintenance"] = sorted(hits)


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """The ends of the windows not yet over: their nodes take work again."""
    return [w.until_ms for w in state.maintenance.values() if w.until_ms > now_ms]


STAGE = Stage(
    "maintenance",
    __doc__ or "",
    reasons=(PendingReason.Maintenance,),
    exclude=exclude,
    explain=explain,
    wakeup=wakeup,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, NODE_SET, CLOCK),
)
