"""Phase `place`: pending gangs in queue order, each through the stage table
(`stages.STAGES`): gates, caps, exclusions, the trial placement on this decide's trial view,
then `GangPlaced` (booked by every stage) or the pending reason the stages' explanations
give. Tentative allocations make later jobs see the capacity earlier ones took."""

from __future__ import annotations

import msgspec

from gpuledger.events import Event, GangPlaced
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.policy.queue import ordered_pending
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.placement_adapter import to_members
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, NODE_SET, of
from gpuledger.services.placement import Placement
from gpuledger.services.scheduler.phase import Phase
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stages import book, capped, exclusions, explained, gated


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """Place pending gangs in queue order on a trial view; a pending reason for the rest."""
    out: list[Event] = []
    if not state.pending:
        return out  # nothing to place: no trial view, no queue
    rnd = Round.start(svc, state, now_ms)
    queue = ordered_pending(state, now_ms)
    behind = _unreleased_behind(state, queue)
    ahead = 0  # arrays' unreleased tasks queued ahead: they have no record, but a place
    for i, job in enumerate(queue):
        if not job.cancel_requested:
            out += place_one(rnd, job, i + ahead)
        ahead += behind.get(i, 0)
    return out


def _unreleased_behind(state: Ledger, queue: list[JobRecord]) -> dict[int, int]:
    """Per queue index, the unreleased tasks (services/domain/fold/arrays.py) that queue
    right behind it: an array's sort after its last released task waiting (they wait alike,
    and the window releases them in the queue's order)."""
    if not state.open_arrays:
        return {}
    last: dict[str, int] = {}
    for i, job in enumerate(queue):
        if job.array_parent in state.open_arrays:
            last[job.array_parent] = i
    out: dict[int, int] = {}
    for array_id, i in last.items():
        window = state.jobs[array_id].window
        if window is not None:
            out[i] = out.get(i, 0) + window.unreleased
    return out


def place_one(rnd: Round, job: JobRecord, position: int) -> list[Event]:
    """One job through the stages: `GangPlaced`, or why not."""
    spec = job.spec
    lim = Limits(need=spec.resources.gpu_milli_total() * spec.members_min(), position=position)
    stop = gated(rnd, job, lim)
    if stop is not None:
        return stop
    exclusions(rnd, job, lim)
    if spec.min_members is not None and spec.min_members < spec.replicas:
        # members above the minimum only as far as every stage's cap allows
        lim.max_members = capped(rnd, job, lim, spec.replicas, spec.min_members)
    result = _try_place(rnd, job, lim)
    if isinstance(result, Placement):
        return [_bind(rnd, job, result, lim.backfill_for)]
    why = Why(result.reason, result.message, {**result.details, "queue_position": position})
    why.result = result
    explained(rnd, job, lim, why)
    return rnd.pending(job, why.reason, why.message, why.details)


def _try_place(rnd: Round, job: JobRecord, lim: Limits):
    """The trial placement: preemptible backfill off the reserved nodes first, if it fits
    there (then it is no backfill); clears `lim.backfill_for` when not on them."""
    request = rnd.state.gang_request(job)
    if lim.max_members is not None and lim.max_members < request.replicas:
        request = msgspec.structs.replace(request, replicas=lim.max_members)
    exclude = lim.exclude
    result = None
    if lim.backfill_for is not None:  # off the reserved nodes when it fits there
        assert rnd.reservation is not None
        result = rnd.trial.place(
            request, rnd.policy, exclude=exclude | rnd.reservation.nodes, explain=False
        )
        if isinstance(result, Placement):
            lim.backfill_for = None
    if not isinstance(result, Placement):
        result = rnd.trial.place(request, rnd.policy, exclude=exclude)
        if (
            lim.backfill_for is not None
            and isinstance(result, Placement)
            and not (
                {m.node for m in result.members} & rnd.reservation.nodes  # type: ignore[union-attr]  # set whenever backfill_for is
            )
        ):
            lim.backfill_for = None
    return result


def _bind(rnd: Round, job: JobRecord, result: Placement, backfill_for: str | None) -> Event:
    """Book the placement in the trial view and every stage's tallies; the GangPlaced."""
    state = rnd.state
    alloc_id = f"{job.job_id}#{job.attempts + 1}"
    rnd.unbooked.append((alloc_id, job, result))
    rnd.placed.add(job.job_id)
    members = to_members(result)
    gpu_milli = job.spec.resources.gpu_milli_total() * len(members)
    tenant = state.config.tenants.get(job.tenant)
    used = rnd.usage.get(job.tenant, 0)
    book(rnd, job, members)
    return rnd.svc.emit(
        state,
        rnd.now_ms,
        GangPlaced,
        key=alloc_id,
        correlation_id=job.job_id,
        job_id=job.job_id,
        allocation_id=alloc_id,
        tenant=job.tenant,
        members=members,
        borrowing=tenant is not None and used + gpu_milli > tenant.guaranteed_gpu_milli,
        resume_step=job.resume_step,
        backfill_for=backfill_for,
    )


# the queue order (decayed usage, aging) and so the pending reasons move with the clock
PHASE = Phase(
    "place", run, reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants", "mig", CLOCK)
)
