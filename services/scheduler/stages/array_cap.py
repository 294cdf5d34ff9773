"""Stage `array_cap`: a task whose array job already runs `max_running` tasks (those placed
in this decide included) waits (`ArrayTaskLimit`, Slurm's `JobArrayTaskLimit`). A gate;
every bind of a task counts towards its array's cap for the rest of the decide."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stage import Stage


def gate(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """`ArrayTaskLimit` for a task of an array at its cap; None when it may be placed."""
    if job.array_parent is None:
        return None
    parent = rnd.state.jobs.get(job.array_parent)
    arr = parent.spec.array if parent is not None else None
    if not arr or arr.max_running is None:
        return None
    running = parent.tasks_up + rnd.array_placed.get(parent.job_id, 0)
    if running < arr.max_running:
        return None
    return rnd.pending(
        job,
        PendingReason.ArrayTaskLimit,
        f"array {parent.job_id} runs at most {arr.max_running} tasks at once (max_running)",
        {"array": parent.job_id, "max_running": arr.max_running, "queue_position": lim.position},
    )


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """A task placed in this decide counts towards its array's cap."""
    if job.array_parent is not None:
        rnd.array_placed[job.array_parent] = rnd.array_placed.get(job.array_parent, 0) + 1


STAGE = Stage(
    "array_cap",
    __doc__ or "",
    reasons=(PendingReason.ArrayTaskLimit,),
    gate=gate,
    book=book,
    reads=of(ADMITTED_JOBS, "allocations"),
)
