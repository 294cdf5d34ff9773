"""Recorded outcomes as replay inputs: how an imported run ended is what its replay does.

A trace says how each job ended; the replay under the recorded configuration must end it the
same way, or its counts (and every dependency on them) differ from what happened. One rule for
every importer, from the job's final state and times:

- started and ended `COMPLETED` (or with no state): runs its recorded work and completes;
- started and ended `FAILED`, `NODE_FAIL`, `OUT_OF_MEMORY`, `BOOT_FAIL`, `DEADLINE` or
  `PREEMPTED` (ended by a preemption, not requeued): runs its recorded work and fails
  (`JobSpec.ends: failed`);
- started and ended `TIMEOUT`: runs until its time limit stops it; with no recorded limit (or
  one longer than the run), the run time is the limit as the site enforced it;
- started and ended `CANCELLED` (a user cancel while it ran): runs with no end of its own and
  is cancelled at its recorded end, whatever it is doing then (pending, running, being
  preempted): a cancel is a wall-clock act, not an amount of work;
- never started and ended (cancelled while pending, held, before its `--begin`): never runs
  in the replay: it is cancelled at the instant it is submitted, so its cancel and
  submission are both inputs and no placement comes between them. Except a job that waited
  on a dependency: it is submitted and cancelled at its recorded end as before, and the
  replay resolves the dependency against the replayed outcomes (an `afterok` on a job that
  fails there withdraws it, `DependencyNeverSatisfied`);
- never started, not ended (pending at the dump): submitted with no end; the replay may place
  it (the summary's `never_ran` says so).

`never_ran` counts, per reason, the jobs that never ran in reality, and what the replay does
with them (docs/importers.md says why per importer).
"""

from __future__ import annotations

from dataclasses import dataclass

FAILED_STATES = frozenset(
    {"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
"""Final states replayed as a run that fails after its recorded work."""

NOT_REPLAYED = "ended before it started: cancelled at its submission in the replay"
ON_DEPENDENCY = "ended before it started, waiting on a dependency: the replay's dependency decides"
STILL_PENDING = "pending at the end of the trace: the replay may place it"


@dataclass(frozen=True)
class Replayed:
    """What the replay does with one recorded job."""

    duration_s: int | None
    """Work it runs (None: until stopped)."""
    ends: str | None
    """`failed` when its run fails after the work, None when it completes."""
    cancel_at_ms: int | None
    """When a `JobCancelled` is injected (None: never)."""
    time_limit_s: int | None
    """Its time limit (the recorded one, or the run time of a `TIMEOUT` without one)."""
    never_ran: str | None
    """Why a job that never ran in reality is or is not kept from running (None: it ran)."""


def state_key(state: str) -> str:
    """`CANCELLED by 0` -> `CANCELLED`; '' stays ''."""
    return state.split()[0].upper() if state.strip() else ""


def replayed(
    state: str,
    submit_ms: int,
    start_ms: int | None,
    end_ms: int | None,
    time_limit_s: int | None,
    *,
    waits_on_dependency: bool = False,
) -> Replayed:
    """The replay of a job recorded with final `state` and these times (checked already:
    end >= start, end >= submit)."""
    key = state_key(state)
    if start_ms is not None and end_ms is not None:
        duration = -(-(end_ms - start_ms) // 1000)
        if key == "CANCELLED":
            return Replayed(None, None, end_ms, time_limit_s, None)
        if key == "TIMEOUT" and (time_limit_s is None or time_limit_s > duration):
            time_limit_s = max(1, duration)
        ends = "failed" if key in FAILED_STATES else None
        return Replayed(duration, ends, None, time_limit_s, None)
    if never_runs(start_ms, end_ms, waits_on_dependency):
        return Replayed(None, None, submit_ms, time_limit_s, NOT_REPLAYED)
    if start_ms is None and end_ms is not None:
        return Replayed(None, None, end_ms, time_limit_s, ON_DEPENDENCY)
    return Replayed(None, None, None, time_limit_s, STILL_PENDING if start_ms is None else None)


def never_runs(start_ms: int | None, end_ms: int | None, waits_on_dependency: bool) -> bool:
    """Whether the replay keeps a job from running: it ended before it started, and not
    while waiting on a dependency (which the replay resolves). Such a job is cancelled as it
    is submitted; an array task that never ran is therefore imported as a job of its own
    (an array's tasks exist only once the array is admitted: a cancel at its submission
    would name no job yet)."""
    return start_ms is None and end_ms is not None and not waits_on_dependency
