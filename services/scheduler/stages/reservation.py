"""Stage `reservation`: capacity reserved for a starving gang (`reserve`) keeps other jobs
off its nodes unless they may backfill them: by duration (they end before it starts), or as
preemptible backfill (only if need be: off the reserved nodes first). A job that would fit
but for the reservation is `Reserved`, with the reservation's nodes and expected start."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, NODE_SET, of
from gpuledger.services.domain.tooling.timefmt import instant
from gpuledger.services.scheduler.reservation import may_backfill, may_backfill_preemptibly
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The reserved nodes, unless the job may backfill them."""
    reservation = rnd.reservation
    if reservation is None or may_backfill(job, rnd.now_ms, reservation, rnd.state.config):
        return frozenset()
    if may_backfill_preemptibly(rnd.state, job, reservation):
        lim.backfill_for = reservation.job_id  # on reserved nodes only if need be
        return frozenset()
    # held back: some reserved node is not already promised to another job's nomination
    lim.held_back = not reservation.nodes <= lim.excluded.get("nominations", frozenset())
    return reservation.nodes


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """`Reserved` when the job would fit but for the reservation it was kept off."""
    reservation = rnd.reservation
    if not lim.held_back or reservation is None or not rnd.binds(job, lim, why, STAGE.name):
        return
    why.reason = PendingReason.Reserved
    why.message = (
        f"capacity on {', '.join(sorted(reservation.nodes))} is reserved for "
        f"{reservation.job_id} (expected start {instant(reservation.expected_start_ms)}); "
        + (
            "it is landing: its backfilled work is being evicted"
            if reservation.landing
            else "the job's duration would run past it"
        )
    )
    why.details["reservation"] = reservation.describe()


STAGE = Stage(
    "reservation",
    __doc__ or "",
    reasons=(PendingReason.Reserved,),
    exclude=exclude,
    explain=explain,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants", CLOCK),
)
