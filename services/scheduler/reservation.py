"""Reservations for starving gangs (backfill).

A job that has waited longer than `policy.reservation_after_s` for capacity gets a
reservation of the capacity it can reach soonest: running allocations are ordered by their
expected end (start + remaining duration hint; unknown durations never end), and the shortest
prefix whose release makes the job placeable gives both the expected start (the end of the
last of them) and the reserved nodes (where the job would then go). Jobs behind it in the
queue may use reserved nodes only when their own duration hint ends before the expected
start (backfill). One reservation at a time: the first starving job in queue order.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.domain.ledger import AllocationRecord, JobRecord, Ledger
from services.placement import Placement

CAPACITY_REASONS = frozenset(
    {"Resources", "GangIncomplete", "TopologyUnsatisfiable", "MIGPlacementUnavailable",
     "IsolationConflict", "Reserved", "WaitingForPreemptedWorkloads"}
)


@dataclass(frozen=True)
class Reservation:
    job_id: str
    nodes: frozenset[str]
    expected_start_ms: int
    waiting_for: tuple[str, ...]
    """Jobs whose expected end frees the reserved capacity."""

    def describe(self) -> dict:
        return {"job": self.job_id, "nodes": sorted(self.nodes),
                "expected_start_s": self.expected_start_ms / 1000,
                "waiting_for": list(self.waiting_for)}


def expected_end_ms(rec: AllocationRecord, job: JobRecord) -> int | None:
    if job.spec.duration_s is None:
        return None
    started = min(rec.started.values(), default=rec.placed_ms)
    return started + max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)


def starving(state: Ledger, job: JobRecord, now_ms: int) -> bool:
    after = state.config.policy.reservation_after_s
    return after > 0 and now_ms - job.pending_since_ms >= after * 1000


def reserve(state: Ledger, job: JobRecord, now_ms: int, exclude: frozenset[str]) -> Reservation | None:
    ending: list[tuple[int, str, str]] = []
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        end = expected_end_ms(rec, state.jobs[rec.job_id])
        if end is not None:
            ending.append((max(end, now_ms), alloc_id, rec.job_id))
    ending.sort()
    request = state.gang_request(job)
    policy = state.config.policy.placement_policy

    def attempt(k: int):
        return state.fleet.place(request, policy, exclude=exclude,
                                 assume_released=[a for _, a, _ in ending[:k]], explain=False)

    if not ending or not isinstance(attempt(len(ending)), Placement):
        return None
    lo, hi = 1, len(ending)
    while lo < hi:
        mid = (lo + hi) // 2
        if isinstance(attempt(mid), Placement):
            hi = mid
        else:
            lo = mid + 1
    placed = attempt(lo)
    assert isinstance(placed, Placement)
    nodes = frozenset(m.node for m in placed.members)
    waiting = tuple(sorted({j for _, a, j in ending[:lo] if state.allocations[a].nodes()
                            and set(state.allocations[a].nodes()) & nodes}))
    return Reservation(job.job_id, nodes, ending[lo - 1][0], waiting)


def may_backfill(job: JobRecord, now_ms: int, reservation: Reservation) -> bool:
    """Whether `job` would end (by its duration hint) before the reserved start."""
    if job.spec.duration_s is None:
        return False
    return now_ms + job.spec.duration_s * 1000 - job.progress_ms <= reservation.expected_start_ms
