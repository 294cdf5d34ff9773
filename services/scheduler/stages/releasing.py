"""Stage `releasing`: while victims preempted for the job still checkpoint and exit, it is
`WaitingForPreemptedWorkloads` (their deadlines), or `WaitingForConsolidation` while they
are migrating out of its way (policy `consolidation`: who moves from where to where, the
nodes that will hold it). An explanation only."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason, PreemptionReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.domain.tooling.timefmt import instant
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def releasing(state: Ledger, job: JobRecord) -> list[AllocationRecord]:
    """Victim allocations still being released for this job."""
    recs = [state.allocations[a] for a in sorted(state.nominations.get(job.job_id, ()))]
    return [r for r in recs if not r.ended and r.preemption is not None]


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """Who is still leaving for the job, and by when."""
    state = rnd.state
    leaving = releasing(state, job)
    if not leaving:
        return
    result = why.result
    moving = state.sched.consolidations.get(job.job_id)
    if moving is not None and all(
        r.preemption.reason == PreemptionReason.Consolidate for r in leaving
    ):
        why.reason = PendingReason.WaitingForConsolidation
        why.message = (
            "waiting for a consolidation: "
            + "; ".join(
                f"{r.job_id} migrating off {', '.join(r.nodes())} to "
                f"{', '.join(next((m.to_nodes for m in moving.moves if m.allocation_id == r.allocation_id), ()))}"
                f" (checkpoint deadline {instant(r.preemption.deadline_ms)})"
                for r in leaving
            )
            + f"; room on {', '.join(moving.target_nodes)}; {result.message}"
        )
        why.details["migrating_for_it"] = [r.job_id for r in leaving]
        return
    why.reason = PendingReason.WaitingForPreemptedWorkloads
    why.message = (
        "waiting for "
        + ", ".join(
            f"{r.job_id} to checkpoint and exit (deadline {instant(r.preemption.deadline_ms)})"
            for r in leaving
        )
        + f"; {result.message}"
    )
    why.details["preempted_for_it"] = [r.job_id for r in leaving]


STAGE = Stage(
    "releasing",
    __doc__ or "",
    reasons=(PendingReason.WaitingForPreemptedWorkloads, PendingReason.WaitingForConsolidation),
    explain=explain,
    reads=of(ADMITTED_JOBS, "allocations"),
)
