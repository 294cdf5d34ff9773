"""The allocations fold: a gang's placement, what its members report (started, checkpointed,
exited), the requests to stop it (a preemption, its time limit) and its end (evicted,
completed, failed); an elastic gang's resize is in resize.py.

Owns `allocations`, `active`, `awaiting_start`, `expected`, `time_limits`, `backfills`,
`agents.node_allocations`, `agents.node_vacated_ms`, `sched.settle_ready`, `sched.growable` and `sched.spread_nodes`
(with members.py and resize.py), and books the capacity of its allocations in the fleet (atomically: a conflict raises
`Refused` before any change) and, through the tenants fold, in the tenants' use. What a run
means for its job is the jobs fold's (`jobs.placed`, `jobs.evicted`, `jobs.run_over`).

Invariants: an allocation is either active (its capacity booked in `fleet`) or ended; a job
has at most one active allocation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal, JobState
from gpuledger.events.specs import DEFAULT_USER
from gpuledger.services.domain.fold import jobs, members, queue, requeues, resize, tenants
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.records import AllocationRecord, JobRecord, elastic, tally_keys
from gpuledger.services.domain.fold.refusals import Refusal, Refused
from gpuledger.services.domain.tooling.placement_adapter import gang_request, to_placement
from gpuledger.services.placement import GangRequest, PlacementConflict

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def placed(ledger: LedgerState, e: ev.GangPlaced) -> Refusal | None:
    job = ledger.jobs.get(e.job_id)
    if job is None or job.state != JobState.pending:
        return jobs.not_in_state(e.job_id, job, "pending")
    if e.allocation_id in ledger.allocations:
        return Refusal(FoldRefusal.DuplicateAllocation, f"allocation {e.allocation_id!r} exists")
    try:  # first, and atomic: a conflict changes nothing
        ledger.fleet.allocate(
            e.allocation_id, job.tenant, to_placement(e.members), request_of(ledger, job)
        )
    except (PlacementConflict, ValueError) as err:
        raise Refused(FoldRefusal.PlacementConflict, f"{e.allocation_id}: {err}") from err
    per_member = job.spec.resources.gpu_milli_total()
    rec = AllocationRecord(
        allocation_id=e.allocation_id,
        job_id=e.job_id,
        tenant=e.tenant,
        members=e.members,
        node_names=tuple(sorted({m.node for m in e.members})),
        placed_ms=e.occurred_at_ms,
        gpu_milli=per_member * len(e.members),
        borrowing=e.borrowing,
        start_progress_ms=job.progress_ms,
        backfill_for=e.backfill_for,
    )
    if e.backfill_for is not None:
        ledger.backfills.setdefault(e.backfill_for, set()).add(e.allocation_id)
    ledger.allocations[e.allocation_id] = rec
    ledger.active.add(e.allocation_id)
    for key in tally_keys(job):
        ledger.placed_jobs[key] = ledger.placed_jobs.get(key, 0) + 1
    ledger.awaiting_start.add(e.allocation_id)
    if elastic(job) and len(e.members) < job.spec.replicas:
        ledger.sched.growable.add(e.allocation_id)
    members.index(ledger, rec)
    members.spread(ledger, job, e.members, 1)
    tenants.book(
        ledger,
        job.tenant,
        e.members,
        per_member,
        job.preemptible,
        1,
        e.occurred_at_ms,
        job.spec.submitter,
    )
    jobs.placed(ledger, job, e)
    return None


def request_of(ledger: LedgerState, job: JobRecord) -> GangRequest:
    """The placement request of a job (time-slicing allowed by its class)."""
    cls = ledger.config.classes.get(job.spec.priority_class)
    return gang_request(job, allow_timeslice=cls is not None and cls.allow_timeslice)


def member_refusal(
    ledger: LedgerState, e: ev.MemberStarted | ev.MemberCheckpointed | ev.MemberExited
) -> tuple[AllocationRecord | None, Refusal | None]:
    """The allocation a node's member fact is about, or why the fact is refused: a node
    reports only on members placed on it (`WrongNode`: another node's member, or a rank
    the allocation does not have), under the allocation's own job (`WrongJob`). A fact
    about an allocation the log does not hold changes nothing (a late or replayed fact)."""
    rec = ledger.allocations.get(e.allocation_id)
    if rec is None:
        return None, None
    member = next((m for m in rec.members if m.rank == e.rank), None)
    if member is None or member.node != e.node:
        where = "no such rank" if member is None else f"it runs on {member.node!r}"
        return None, Refusal(
            FoldRefusal.WrongNode,
            f"{type(e).__name__} from node {e.node!r} for member {e.rank} of allocation "
            f"{e.allocation_id!r}: {where}",
        )
    if e.job_id != rec.job_id:
        return None, Refusal(
            FoldRefusal.WrongJob,
            f"{type(e).__name__} names job {e.job_id!r}; allocation {e.allocation_id!r} "
            f"is job {rec.job_id!r}",
        )
    return rec, None


def member_started(ledger: LedgerState, e: ev.MemberStarted) -> Refusal | None:
    rec, refusal = member_refusal(ledger, e)
    if refusal is not None:
        return refusal
    if rec is not None and not rec.ended:
        rec.started.setdefault(e.rank, e.occurred_at_ms)
        if len(rec.started) == len(rec.members):
            ledger.awaiting_start.discard(e.allocation_id)
            job = ledger.jobs.get(rec.job_id)
            if job is not None and job.spec.duration_s is not None:
                remaining = max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)
                # members added by a grow end with those started first (simulated agents)
                began = min if rec.resized_ms is not None else max
                ledger.expected.set(e.allocation_id, "end", began(rec.started.values()) + remaining)
            if job is not None and job.time_limit_s is not None:
                ledger.time_limits.set(
                    e.allocation_id, "limit", max(rec.started.values()) + job.time_limit_s * 1000
                )
    return None


def member_checkpointed(ledger: LedgerState, e: ev.MemberCheckpointed) -> Refusal | None:
    rec, refusal = member_refusal(ledger, e)
    if rec is not None:
        rec.checkpoints[e.rank] = (e.step, e.progress_ms, e.occurred_at_ms)
    return refusal


def member_exited(ledger: LedgerState, e: ev.MemberExited) -> Refusal | None:
    rec, refusal = member_refusal(ledger, e)
    if rec is not None:
        rec.exited.setdefault(e.rank, (e.outcome, e.occurred_at_ms))
        if not rec.ended and (e.outcome == "failed" or rec.all_exited()):
            ledger.sched.settle_ready.add(e.allocation_id)
        leaving = rec.leaving()
        if not rec.ended and leaving is not None and all(r in rec.exited for r in leaving):
            ledger.sched.settle_ready.add(e.allocation_id)  # a shrink to settle (`GangResized`)
    return refusal


def settle(ledger: LedgerState, allocation_ids: Iterable[str]) -> None:
    """The scheduler must settle these active allocations (a node of theirs was lost)."""
    ledger.sched.settle_ready.update(allocation_ids)


def preemption_requested(ledger: LedgerState, e: ev.PreemptionRequested) -> Refusal | None:
    found = _to_stop(ledger, e)
    if isinstance(found, Refusal):
        return found
    rec, job = found
    if isinstance(e.ranks, tuple):
        resize.check_shrink(e, rec, job)
    rec.preemption = e
    if not isinstance(e.ranks, tuple):  # a shrinking gang keeps running
        jobs.preempting(job)
    expect_stop(ledger, e.allocation_id, job, e.occurred_at_ms, e.deadline_ms)
    if e.beneficiary:  # a drain's request frees capacity for nobody in particular
        queue.nominate(ledger, e.beneficiary, e.allocation_id)
    return None


def requeue_requested(ledger: LedgerState, e: ev.JobRequeued) -> Refusal | None:
    """A requeue is the preemption path without a beneficiary (services/domain/fold/requeues.py)."""
    found = requeues.stop_request(ledger, e)
    if isinstance(found, Refusal):
        return found
    rec, job, stop = found
    rec.preemption = stop
    jobs.preempting(job)
    expect_stop(ledger, rec.allocation_id, job, stop.occurred_at_ms, stop.deadline_ms)
    return None


def expect_stop(
    ledger: LedgerState, alloc_id: str, job: JobRecord, asked_ms: int, deadline_ms: int
) -> None:
    """When the members asked at `asked_ms` to checkpoint and exit should have saved, and
    when they must be gone (a preemption's or a time limit's deadline)."""
    ledger.expected.set(alloc_id, "checkpoint", asked_ms + job.spec.checkpoint.save_s * 1000)
    ledger.expected.set(alloc_id, "deadline", deadline_ms)


def time_limit_reached(ledger: LedgerState, e: ev.TimeLimitReached) -> Refusal | None:
    found = _to_stop(ledger, e)
    if isinstance(found, Refusal):
        return found
    rec, job = found
    rec.time_limit = e
    ledger.time_limits.clear(e.allocation_id)
    if rec.preemption is None:  # else the preemption's instants stand (they come first)
        expect_stop(ledger, e.allocation_id, job, e.occurred_at_ms, e.deadline_ms)
    return None


def _to_stop(
    ledger: LedgerState, e: ev.PreemptionRequested | ev.TimeLimitReached
) -> tuple[AllocationRecord, JobRecord] | Refusal:
    """The running allocation and job a stop request `e` is about, or `NotRunning` (unknown,
    ended, of no job, or already asked to stop for the same cause)."""
    rec = ledger.allocations.get(e.allocation_id)
    job = ledger.jobs.get(e.job_id)
    if rec is None:
        what = "unknown"
    elif rec.ended:
        what = "ended"
    elif isinstance(e, ev.PreemptionRequested) and rec.preemption is not None:
        what = "already being preempted"
    elif isinstance(e, ev.TimeLimitReached) and rec.time_limit is not None:
        what = "already stopping at its time limit"
    elif job is None:
        what = "of no job"
    else:
        return rec, job
    return Refusal(FoldRefusal.NotRunning, f"allocation {e.allocation_id!r} is {what}")


def release(ledger: LedgerState, allocation_id: str, now_ms: int) -> AllocationRecord | None:
    """End an active allocation: its capacity goes back to the fleet and its tenant, it
    leaves every index; None if it is unknown or ended already."""
    rec = ledger.allocations.get(allocation_id)
    if rec is None or rec.ended:
        return None
    rec.ended = True
    rec.ended_ms = now_ms
    ledger.active.discard(allocation_id)
    owner = ledger.jobs.get(rec.job_id)
    if owner is not None:
        for key in tally_keys(owner):
            ledger.placed_jobs[key] -= 1
    ledger.awaiting_start.discard(allocation_id)
    ledger.sched.settle_ready.discard(allocation_id)
    ledger.sched.growable.discard(allocation_id)
    ledger.expected.clear(allocation_id)
    ledger.time_limits.clear(allocation_id)
    if rec.backfill_for is not None:
        backfilled = ledger.backfills.get(rec.backfill_for)
        if backfilled is not None:
            backfilled.discard(allocation_id)
            if not backfilled:
                del ledger.backfills[rec.backfill_for]
    members.unindex(ledger, rec, now_ms)
    ledger.fleet.release(allocation_id)
    job = ledger.jobs.get(rec.job_id)
    per_member = rec.gpu_milli // len(rec.members) if rec.members else 0
    preemptible = job is None or job.preemptible
    user = DEFAULT_USER if job is None else job.spec.submitter
    tenants.book(ledger, rec.tenant, rec.members, per_member, preemptible, -1, now_ms, user)
    members.spread(ledger, job, rec.members, -1)
    queue.run_ended(ledger, allocation_id, rec.job_id)
    return rec


def gang_evicted(ledger: LedgerState, e: ev.GangEvicted) -> None:
    rec = release(ledger, e.allocation_id, e.occurred_at_ms)
    job = ledger.jobs.get(e.job_id)
    if rec is not None and job is not None:
        jobs.evicted(ledger, job, e, rec)


def gang_ended(ledger: LedgerState, e: ev.GangCompleted | ev.GangFailed) -> None:
    release(ledger, e.allocation_id, e.occurred_at_ms)
    jobs.run_over(ledger, e)


FOLD = Fold(
    name="allocations",
    owns=frozenset(
        {
            "allocations",
            "active",
            "awaiting_start",
            "expected",
            "time_limits",
            "backfills",
            "agents.node_allocations",
            "agents.node_vacated_ms",
            "sched.settle_ready",
            "sched.growable",
            "sched.spread_nodes",
            "placed_jobs",
        }
    ),
    handlers={
        ev.GangPlaced: placed,
        ev.MemberStarted: member_started,
        ev.MemberCheckpointed: member_checkpointed,
        ev.MemberExited: member_exited,
        ev.PreemptionRequested: preemption_requested,
        ev.TimeLimitReached: time_limit_reached,
        ev.JobRequeued: requeue_requested,
        ev.GangResized: resize.resized,
        ev.GangEvicted: gang_evicted,
        ev.GangCompleted: gang_ended,
        ev.GangFailed: gang_ended,
    },
    modules=("allocations", "members", "resize", "requeues"),
)
