"""Stage `reserve`: the first starving job (waiting longer than `reservation_after_s`) that
is short of capacity reserves what frees up soonest; later jobs of the decide are kept off
it by the stage `reservation`. Its message says which nodes from when. An explanation with
a side effect on this decide (the reservation), no reason of its own."""

from __future__ import annotations

from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.policy.pending import CAPACITY_REASONS
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.domain.tooling.timefmt import instant
from gpuledger.services.scheduler.reservation import reserve, starving
from gpuledger.services.scheduler.round import Limits, Round, Why, queued_since
from gpuledger.services.scheduler.stage import Stage


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """Reserve for the first starving job short of capacity."""
    if (
        rnd.reservation is not None
        or why.reason not in CAPACITY_REASONS
        or not starving(rnd.state, job, rnd.now_ms)
    ):
        return
    rnd.reservation = reserve(rnd.state, job, rnd.now_ms, lim.exclude, rnd.trial)
    if rnd.reservation is not None:
        why.message += (
            f"; reserved {', '.join(sorted(rnd.reservation.nodes))} from "
            f"{instant(rnd.reservation.expected_start_ms)}"
        )
        why.details["reservation"] = rnd.reservation.describe()


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """When a pending job starts to starve."""
    after = state.config.policy.reservation_after_s * 1000
    if not after or not state.pending:
        return []
    return [
        t
        for j in state.pending
        if (since := queued_since(state, state.jobs[j])) is not None
        and (t := since + after) > now_ms
    ]


STAGE = Stage(
    "reserve",
    __doc__ or "",
    explain=explain,
    wakeup=wakeup,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants"),
)
