"""An elastic gang's resize in the allocations fold (`GangResized`): a shrink gives back the
capacity of the members a partial preemption asked to leave once they have exited; a grow
binds the next ranks on top of the running ones. Both are checked first and change the
fleet atomically (a conflict restores the old booking and raises `Refused`).

Part of the allocations aggregate (`allocations.FOLD`). Invariant: an elastic gang's active
allocation is in `sched.growable` while it holds fewer members than `replicas`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger import events as ev
from gpuledger.events import MemberPlacement
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold import jobs, members, tenants
from gpuledger.services.domain.fold.records import AllocationRecord, JobRecord, elastic
from gpuledger.services.domain.fold.refusals import Refusal, Refused
from gpuledger.services.domain.tooling.placement_adapter import to_placement
from gpuledger.services.placement import PlacementConflict

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def check_shrink(e: ev.PreemptionRequested, rec: AllocationRecord, job: JobRecord) -> None:
    """A partial preemption names distinct members of the allocation, not all of them,
    and leaves at least `min_members`; else `InvalidResize`."""
    ranks = {m.rank for m in rec.members}
    named = e.ranks if isinstance(e.ranks, tuple) else ()
    left = len(rec.members) - len(set(named))
    if not named or len(set(named)) != len(named) or not set(named) <= ranks:
        raise Refused(
            FoldRefusal.InvalidResize,
            f"ranks {list(named)} are not distinct members of {e.allocation_id}",
        )
    if left < job.spec.members_min() or job.service is not None:
        raise Refused(
            FoldRefusal.InvalidResize,
            f"{e.job_id} would keep {left} members, below its minimum {job.spec.members_min()}",
        )


def resized(ledger: LedgerState, e: ev.GangResized) -> Refusal | None:
    """An elastic gang shrank or grew (checked first, changed atomically); refused when its
    allocation is not running."""
    rec = ledger.allocations.get(e.allocation_id)
    job = ledger.jobs.get(e.job_id)
    if rec is None or rec.ended or job is None or rec.job_id != e.job_id:
        return Refusal(FoldRefusal.NotRunning, f"allocation {e.allocation_id!r} is not running")
    if e.to_members > e.from_members:
        return _grown(ledger, e, rec, job)
    return _shrunk(ledger, e, rec, job)


def _shrunk(
    ledger: LedgerState, e: ev.GangResized, rec: AllocationRecord, job: JobRecord
) -> Refusal | None:
    """An elastic gang shrank: the members that left give their capacity back; the
    allocation keeps running with the others."""
    leaving = rec.leaving()
    if leaving is None or not all(r in rec.exited for r in leaving):
        return Refusal(
            FoldRefusal.NotShrinking, f"allocation {e.allocation_id!r} has no members that left"
        )
    kept = tuple(m for m in rec.members if m.rank not in leaving)
    if e.members != kept or (e.from_members, e.to_members) != (len(rec.members), len(kept)):
        raise Refused(
            FoldRefusal.InvalidResize,
            f"{e.allocation_id}: members after the resize must be those that stay",
        )
    gone = tuple(m for m in rec.members if m.rank in leaving)
    _rebind(ledger, rec, job, kept, gone, -1, e.occurred_at_ms)
    for r in leaving:
        rec.started.pop(r, None)
        rec.exited.pop(r, None)
        rec.checkpoints.pop(r, None)
    rec.preemption = None
    _reindex_shrunk(ledger, rec, job)
    jobs.shrunk(job, e)
    return None


def _reindex_shrunk(ledger: LedgerState, rec: AllocationRecord, job: JobRecord) -> None:
    """The time and settling indexes of a gang that shrank: it may grow again; its end is
    due again once all its remaining members run; it settles if they have all exited or one
    failed."""
    alloc_id = rec.allocation_id
    if elastic(job):
        ledger.sched.growable.add(alloc_id)
    ledger.sched.settle_ready.discard(alloc_id)
    ledger.expected.clear(alloc_id)
    if len(rec.started) == len(rec.members):
        ledger.awaiting_start.discard(alloc_id)
        if job.spec.duration_s is not None:
            remaining = max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)
            ledger.expected.set(alloc_id, "end", min(rec.started.values()) + remaining)
    if rec.all_exited() or any(o == "failed" for o, _ in rec.exited.values()):
        ledger.sched.settle_ready.add(alloc_id)


def _grown(
    ledger: LedgerState, e: ev.GangResized, rec: AllocationRecord, job: JobRecord
) -> Refusal | None:
    """An elastic gang grew: the new members (the next ranks) are bound on top of the
    running ones, atomically; they start like a placement's members."""
    n = len(rec.members)
    if rec.preemption is not None:
        return Refusal(FoldRefusal.NotRunning, f"allocation {e.allocation_id!r} is being preempted")
    added = e.members[n:]
    if (
        (e.from_members, e.to_members) != (n, len(e.members))
        or e.members[:n] != rec.members
        or [m.rank for m in added] != list(range(n, len(e.members)))
        or len(e.members) > job.spec.replicas
        or not elastic(job)
    ):
        raise Refused(
            FoldRefusal.InvalidResize,
            f"{e.allocation_id}: a grow keeps the {n} members and adds the next ranks, up "
            f"to {job.spec.replicas}",
        )
    _rebind(ledger, rec, job, e.members, added, 1, e.occurred_at_ms)
    ledger.awaiting_start.add(e.allocation_id)
    ledger.expected.clear(e.allocation_id)  # the end is set again once the new ones start
    if len(e.members) >= job.spec.replicas:
        ledger.sched.growable.discard(e.allocation_id)
    return None


def _rebind(
    ledger: LedgerState,
    rec: AllocationRecord,
    job: JobRecord,
    new: tuple[MemberPlacement, ...],
    changed: tuple[MemberPlacement, ...],
    sign: int,
    at_ms: int,
) -> None:
    """`rec` runs as `new` members from `at_ms`: booked in the fleet (atomically, `_rebook`),
    the `changed` members added to (`sign` 1, a grow) or taken from (-1, a shrink) its
    tenant's use and spread groups, and indexed on their nodes (a shrink may leave some)."""
    _rebook(ledger, rec, new)
    per_member = rec.gpu_milli // len(rec.members)
    tenants.book(
        ledger, rec.tenant, changed, per_member, job.preemptible, sign, at_ms, job.spec.submitter
    )
    members.spread(ledger, job, changed, sign)
    if sign < 0:
        members.unindex(ledger, rec, at_ms)
    rec.members = new
    rec.node_names = tuple(sorted({m.node for m in new}))
    members.index(ledger, rec)
    rec.gpu_milli = per_member * len(new)
    rec.resized_ms = at_ms


def _rebook(ledger: LedgerState, rec: AllocationRecord, new: tuple[MemberPlacement, ...]) -> None:
    """Book `rec`'s allocation in the fleet as `new` members instead of its own, atomically:
    on a conflict the old booking is restored and `Refused` raised."""
    old = ledger.fleet.allocation(rec.allocation_id)
    ledger.fleet.release(rec.allocation_id)
    try:
        ledger.fleet.allocate(rec.allocation_id, rec.tenant, to_placement(new), old.request)
    except (PlacementConflict, ValueError) as err:
        ledger.fleet.allocate(rec.allocation_id, rec.tenant, old.placement, old.request)
        raise Refused(FoldRefusal.PlacementConflict, f"{rec.allocation_id}: {err}") from err
