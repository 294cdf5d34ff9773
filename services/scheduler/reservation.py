"""Reservations for starving gangs (backfill).

A job that has waited longer than `policy.reservation_after_s` for capacity gets a
reservation of the capacity it can reach soonest: running allocations are ordered by their
expected end (start + remaining duration hint; unknown durations never end), and the shortest
prefix whose release makes the job placeable gives both the expected start (the end of the
last of them) and the reserved nodes (where the job would then go). Jobs behind it in the
queue may use reserved nodes only when their own duration hint ends before the expected
start (backfill), or when they are preemptible (and preemption is on): such a gang is placed
off the reserved nodes when it can be, else on them, marked `backfill_for` the reserving job,
and it is evicted (`Backfill`, by the preemption service) as soon as evicting backfilled work
makes the reserving job placeable. Backfilled work never delays the reservation: it counts as
released at once. While the reservation is *landing* (placeable by evicting backfilled work
now) nothing new backfills it. One reservation at a time: the first starving job in queue
order.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.placement import Placement


@dataclass(frozen=True)
class Reservation:
    job_id: str
    nodes: frozenset[str]
    expected_start_ms: int
    waiting_for: tuple[str, ...]
    """Jobs whose expected end frees the reserved capacity."""
    backfilled: tuple[str, ...] = ()
    """Jobs running as preemptible backfill on the reservation (evicted when it lands)."""
    landing: bool = False
    """Evicting the backfilled jobs makes the reserving job placeable now."""

    def describe(self) -> dict:
        return {
            "job": self.job_id,
            "nodes": sorted(self.nodes),
            "expected_start_s": self.expected_start_ms / 1000,
            "waiting_for": list(self.waiting_for),
            "backfilled": list(self.backfilled),
            "landing": self.landing,
        }


def _grace_ms(job: JobRecord, config) -> int:
    if config is None:
        return 0
    return config.grace_ms(job.spec.checkpoint.grace_s, job.spec.priority_class)


def expected_end_ms(rec: AllocationRecord, job: JobRecord, config=None) -> int | None:
    """When the run ends at the latest: its time limit where it has one (a bound the
    scheduler enforces: the start of the run plus the limit, plus the grace once the limit
    was reached), else its duration hint; None when neither is known."""
    if rec.time_limit is not None:
        return rec.time_limit.deadline_ms
    if job.time_limit_s is not None:
        started = max(rec.started.values(), default=rec.placed_ms)
        return started + job.time_limit_s * 1000 + _grace_ms(job, config)
    if job.spec.duration_s is None:
        return None
    started = min(rec.started.values(), default=rec.placed_ms)
    return started + max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)


def starving(state: Ledger, job: JobRecord, now_ms: int) -> bool:
    """The job has waited `policy.reservation_after_s` for capacity (a job with dependencies:
    since they were met, `dependencies.queued_since_ms`)."""
    after = state.config.policy.reservation_after_s
    if after <= 0:
        return False
    since = deps.queued_since_ms(state, job) if job.spec.depends_on else job.pending_since_ms
    return since is not None and now_ms - since >= after * 1000


def reserve(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    exclude: frozenset[str],
    fleet=None,
    placed_now: tuple[tuple[str, JobRecord], ...] = (),
) -> Reservation | None:
    """The reservation of a starving `job`, measured on `fleet` (the decider's trial view;
    default the folded fleet, only read). `placed_now`: allocations booked on `fleet` in this
    decide (id, job), each expected to end by its time limit (else its duration) from now."""
    fleet = state.fleet if fleet is None else fleet
    backfill = sorted(a for a in state.backfills.get(job.job_id, ()) if a in state.active)
    ending: list[tuple[int, str, str]] = []
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        if rec.backfill_for == job.job_id:
            ending.append((now_ms, alloc_id, rec.job_id))  # evicted on demand: never a delay
            continue
        end = expected_end_ms(rec, state.jobs[rec.job_id], state.config)
        if end is not None:
            ending.append((max(end, now_ms), alloc_id, rec.job_id))
    for alloc_id, placed in placed_now:
        end = run_end_ms(placed, now_ms, state.config)
        if end is not None:
            ending.append((end, alloc_id, placed.job_id))
    ending.sort()
    request = state.gang_request(job)
    policy = state.config.policy.placement_policy

    def attempt(k: int):
        return fleet.place(
            request,
            policy,
            exclude=exclude,
            assume_released=[a for _, a, _ in ending[:k]],
            explain=False,
        )

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
    waiting = tuple(
        sorted(
            {
                j
                for _, a, j in ending[:lo]
                if a not in backfill
                and (a not in state.allocations or set(state.allocations[a].nodes()) & nodes)
            }
        )
    )
    backfilled = tuple(sorted({state.allocations[a].job_id for a in backfill}))
    landing = bool(backfill) and isinstance(
        fleet.place(request, policy, exclude=exclude, assume_released=backfill, explain=False),
        Placement,
    )
    return Reservation(job.job_id, nodes, ending[lo - 1][0], waiting, backfilled, landing)


def may_backfill_preemptibly(state: Ledger, job: JobRecord, reservation: Reservation) -> bool:
    """Whether `job` may run on the reserved nodes as backfill that is evicted when the
    reservation lands: preemptible (preemption on), no disruption budget, and not landing."""
    return (
        state.config.policy.preemption
        and job.preemptible
        and not job.spec.min_available
        and not (job.service is not None and state.jobs[job.service].spec.min_available)
        and not reservation.landing
    )


def run_end_ms(job: JobRecord, now_ms: int, config=None) -> int | None:
    """When `job`, started now, ends at the latest: by its time limit where it has one (it is
    stopped then), else by its duration hint; None when neither is known."""
    if job.time_limit_s is not None:
        return now_ms + job.time_limit_s * 1000 + _grace_ms(job, config)
    if job.spec.duration_s is None:
        return None
    return now_ms + job.spec.duration_s * 1000 - job.progress_ms


def may_backfill(job: JobRecord, now_ms: int, reservation: Reservation, config=None) -> bool:
    """Whether `job` would end before the reserved start (`run_end_ms`)."""
    end = run_end_ms(job, now_ms, config)
    return end is not None and end <= reservation.expected_start_ms
