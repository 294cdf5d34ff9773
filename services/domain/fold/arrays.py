"""Array jobs in the jobs fold: an array runs as its tasks (`<array>@<index>`), each a job of
its own, created and queued when the array is admitted; the array's state and message follow
its tasks' (`task_changed`, after every event about a task).

Part of the jobs aggregate (`jobs.FOLD`). Invariant: an array's `tasks_up` counts its placed
tasks, `tasks_ended` its ended tasks by final state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpuledger import events as ev
from gpuledger.events import JobSpec
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.events.reasons import JobState
from gpuledger.services.domain.fold import queue
from gpuledger.services.domain.fold.records import TERMINAL, UP, JobRecord, child_record

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


def task_id(array_id: str, index: int) -> str:
    """The job id of an array job's task: `<array>@<index>`."""
    return f"{array_id}{ARRAY_SEPARATOR}{index}"


def task_spec(spec: JobSpec, index: int) -> JobSpec:
    """The spec of one task of an array job: the array's shape under the task's id."""
    fields = {f: getattr(spec, f) for f in JobSpec.__struct_fields__}  # also of a read-only view
    fields.update(job_id=task_id(spec.job_id, index), array=msgspec.UNSET)
    arr = spec.array
    if (
        arr
        and arr.durations_s is not msgspec.UNSET
        and 0 <= index - arr.first < len(arr.durations_s)
    ):
        fields.update(duration_s=arr.durations_s[index - arr.first])  # its own (imported)
    return JobSpec(**fields)


def create_tasks(ledger: LedgerState, parent: JobRecord, at_ms: int) -> None:
    """The admitted array's tasks, each pending from `at_ms`."""
    arr = parent.spec.array
    assert isinstance(arr, ev.ArraySpec)  # called for array parents only
    for i in range(arr.first, arr.first + arr.count):
        tid = task_id(parent.job_id, i)
        if tid in ledger.jobs:  # cannot happen: `@` is refused in submitted ids
            continue
        ledger.jobs[tid] = child_record(
            parent,
            task_spec(parent.spec, i),
            at_ms,
            array_parent=parent.job_id,
            time_limit_s=parent.time_limit_s,
        )
        queue.enqueue(ledger, tid)
    array_state(parent, at_ms)


def cancel_tasks(ledger: LedgerState, parent: JobRecord, reason: str, at_ms: int) -> None:
    """An admitted array is cancelled: its tasks stop (an unplaced one now); it ends after."""
    for task in tasks_of(ledger, parent.job_id):
        if task.state in TERMINAL or task.cancel_requested:
            continue
        unplaced = task.allocation_id is None
        queue.cancel(ledger, task, reason, at_ms)
        if unplaced:
            parent.tasks_ended["cancelled"] = parent.tasks_ended.get("cancelled", 0) + 1
    array_state(parent, at_ms)


def task_changed(
    ledger: LedgerState, task: JobRecord, was_up: bool, was_over: bool, at_ms: int
) -> None:
    """An array's counts and state after an event about one of its tasks."""
    parent = ledger.jobs.get(task.array_parent or "")
    if parent is None:
        return
    up = task.state in UP
    if up != was_up:
        parent.tasks_up += 1 if up else -1
        parent.tasks_started = True
    if task.state in TERMINAL and not was_over:
        state = str(task.state)
        parent.tasks_ended[state] = parent.tasks_ended.get(state, 0) + 1
    array_state(parent, at_ms)


def array_state(parent: JobRecord, at_ms: int) -> None:
    """An array job is `pending` until a task is placed, `running` while one is, and ends
    when every task has: `completed` if all completed, `failed` if one failed or timed
    out, else `cancelled`. Its message counts its tasks by state."""
    if parent.state in TERMINAL or parent.state == JobState.submitted:
        return
    assert isinstance(parent.spec.array, ev.ArraySpec)  # called for array parents only
    count = parent.spec.array.count
    ended = parent.tasks_ended
    done = sum(ended.values())
    waiting = count - done - parent.tasks_up
    parts = [f"{parent.tasks_up} running", f"{waiting} pending"] + [
        f"{n} {s}" for s, n in sorted(ended.items())
    ]
    parent.message = f"{count} tasks: " + ", ".join(parts)
    if done >= count:
        if ended.get(JobState.completed, 0) == count:
            parent.state = JobState.completed
        elif ended.get(JobState.failed, 0) or ended.get(JobState.timeout, 0):
            parent.state = JobState.failed
        else:
            parent.state = JobState.cancelled
        parent.finished_ms = at_ms
    else:
        parent.state = JobState.running if parent.tasks_up else JobState.pending


def tasks_of(ledger: LedgerState, array_id: str) -> list[JobRecord]:
    """The task records of an array job, by index."""
    parent = ledger.jobs.get(array_id)
    if parent is None or not parent.spec.array:
        return []
    first, count = parent.spec.array.first, parent.spec.array.count
    ids = (task_id(array_id, first + i) for i in range(count))
    return [r for r in map(ledger.jobs.get, ids) if r is not None and r.array_parent == array_id]
