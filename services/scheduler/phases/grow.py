"""Phase `grow`: elastic gangs below `replicas` take capacity that is free once the queue has
nothing waiting for capacity (queued work first; a job waiting for a dependency does not
wait for capacity): each, in allocation order, gets as many more members as fit and as its
tenant's quota allows (`GangResized` up), unless it is starting, being preempted, or was
resized less than `policy.min_runtime_s` ago (the anti-thrash cooldown). A grow runs the
stages that bind it (`Stage.binds_grow`: quota, nominations, spread, per-model guarantees
and limits) as a placement does, its smallest step one member, and is booked by every
stage."""

from __future__ import annotations

import msgspec

from gpuledger.events import Event, GangResized
from gpuledger.events.reasons import ResizeReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.policy.pending import CAPACITY_REASONS
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.placement_adapter import to_members
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, NODE_SET, of
from gpuledger.services.placement import Placement
from gpuledger.services.scheduler.phase import Phase
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stages import book, capped, exclusions


def _queue_waits(state: Ledger) -> bool:
    """Some pending job waits for capacity."""
    for j in state.pending:
        job = state.jobs[j]
        if job.cancel_requested or (job.reason is not None and job.reason not in CAPACITY_REASONS):
            continue
        if j in state.pending_dependent and deps.unmet(state, job.spec):
            continue  # waits for a dependency, not for capacity
        return True
    return False


def _may_grow(rec: AllocationRecord, job: JobRecord, now_ms: int, cooldown: int) -> bool:
    """Not being preempted or cancelled, every member started and none exited, and out of
    the cooldown of its last resize."""
    if rec.preemption is not None or job.cancel_requested:
        return False
    if len(rec.started) < len(rec.members) or rec.exited:
        return False
    return rec.resized_ms is None or now_ms >= rec.resized_ms + cooldown


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """`GangResized` up for every elastic gang that may grow and fits more members."""
    if not state.sched.growable or _queue_waits(state):
        return []
    cooldown = state.config.policy.min_runtime_s * 1000
    rnd = Round.start(svc, state, now_ms)
    out: list[Event] = []
    for alloc_id in sorted(state.sched.growable):
        rec = state.allocations[alloc_id]
        job = state.jobs[rec.job_id]
        if not _may_grow(rec, job, now_ms, cooldown):
            continue
        n = len(rec.members)
        per = job.spec.resources.gpu_milli_total()
        lim = Limits(need=per)  # the smallest grow: one member
        exclusions(rnd, job, lim, grow=True)
        k = capped(rnd, job, lim, job.spec.replicas - n, 0, grow=True)
        if k <= 0:
            continue
        request = msgspec.structs.replace(state.gang_request(job), replicas=k, min_members=1)
        view = rnd.trial
        placed = view.place(request, rnd.policy, exclude=lim.exclude, explain=False)
        if not isinstance(placed, Placement):
            continue
        view.allocate(f"{alloc_id}~grow", job.tenant, placed, request)
        added = tuple(
            msgspec.structs.replace(m, rank=n + i) for i, m in enumerate(to_members(placed))
        )
        book(rnd, job, added)
        since = rec.resized_ms if rec.resized_ms is not None else rec.placed_ms
        out.append(
            svc.emit(
                state,
                now_ms,
                GangResized,
                key=f"{alloc_id}:grow:{n}-{n + len(added)}:{since}",
                correlation_id=job.job_id,
                job_id=job.job_id,
                allocation_id=alloc_id,
                members=rec.members + added,
                from_members=n,
                to_members=n + len(added),
                reason=ResizeReason.Grow,
            )
        )
    return out


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """When a grow's cooldown ends."""
    cooldown = state.config.policy.min_runtime_s * 1000
    if not state.sched.growable or not cooldown:
        return []
    return [
        t
        for a in sorted(state.sched.growable)
        if (r := state.allocations[a].resized_ms) is not None and (t := r + cooldown) > now_ms
    ]


# a grow builds the same round as placement (quota outlooks read the clock)
PHASE = Phase(
    "grow",
    run,
    wakeup,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants", "mig", CLOCK),
)
