"""Array jobs in the jobs fold: an array runs as its tasks (`<array>@<index>`), each a job of
its own; the array's state and message follow its tasks' (`task_changed`, after every event
about a task).

Held as one record with counters (issue 44): an admitted array's tasks are pending from its
admission, but only a window of them has a record and sits in the queue; the rest is a count
on the array (`JobRecord.window`: unreleased). After every folded event (`refill_open`) an
array whose released tasks waiting number fewer than `window_size` (more than could start in
one decide) releases its next ones, in the queue's own order among them
(services/domain/fold/task_order.py), each created as it would have been at admission. So
memory and the queue grow with what can run, not with what is queued, and every decision is
the one made when every task was a record (tests/replay/test_array_window_scenarios.py). A
request naming one unreleased task (cancel, hold, top `<array>@<i>`) releases it first
(`release_named`). An unreleased task has no pending reason of its own.

Part of the jobs aggregate (`jobs.FOLD`). Invariants: an array's `tasks_up` counts its placed
tasks, `tasks_ended` its ended tasks by final state (unreleased ones cancelled with the array
included); `count = unreleased + released`; `aside` its released tasks that `waits_apart`; its unreleased tasks count in the tenant's
`queued_jobs` and `quota.pending_gpu_milli` as released pending ones do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpuledger import events as ev
from gpuledger.events import JobSpec
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.events.reasons import JobState
from gpuledger.services.domain.fold import queue, task_order
from gpuledger.services.domain.fold.records import (
    TERMINAL,
    UP,
    ArrayWindow,
    JobRecord,
    child_record,
)

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState


RELEASE_WHOLE = 64
"""An array of at most this many tasks has every task released at its admission (as every
array had before windows: its tasks' pending reasons included)."""
WINDOW_SLACK = 2
"""How many times what the fleet could hold of an array's tasks at once it keeps released
when a task asks a share of a GPU or a MIG instance (counted in milli-GPUs rounded up, so
the count is not exact); tasks of whole GPUs: exactly that."""
WINDOW_UNBOUNDED = 1024
"""The window of an array whose tasks ask no GPU and that sets no `max_running`."""


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
    """The admitted array's tasks, pending from `at_ms`: counted on the array, the first
    window of them released (`refill`)."""
    arr = parent.spec.array
    assert isinstance(arr, ev.ArraySpec)  # called for array parents only
    lo, hi = arr.first, arr.first + arr.count - 1
    parent.window = ArrayWindow(arr.count, task_order.first(lo, hi, True), lo)
    queue.count_unreleased(ledger, parent, arr.count)
    ledger.open_arrays.add(parent.job_id)
    refill(ledger, parent)
    array_state(parent, at_ms)


def window_size(ledger: LedgerState, parent: JobRecord) -> int:
    """How many of the array's tasks wait released at least (while it has unreleased ones):
    as many as could start in one decide, so the scheduler never passes over a task the
    window holds back. `max_running` bounds that; so does the fleet (every known GPU, over
    what one task takes; `WINDOW_SLACK` times that for shares and MIG instances); a task
    asking no GPU and no `max_running`: `WINDOW_UNBOUNDED`. An array of `RELEASE_WHOLE`
    tasks or fewer: all of them."""
    arr = parent.spec.array
    assert isinstance(arr, ev.ArraySpec)  # called for array parents only
    if arr.count <= RELEASE_WHOLE:
        return arr.count
    per_task = parent.gpu_milli()
    if per_task > 0:
        version = ledger.nodes_version
        if ledger.fleet_gpus[0] != version:
            ledger.fleet_gpus = (version, ledger.fleet.capacity_gpus())
        fits = ledger.fleet_gpus[1] * 1000 // per_task
        if not parent.spec.resources.gpus:  # a share or a MIG instance: not exact
            fits *= WINDOW_SLACK
    else:
        fits = WINDOW_UNBOUNDED
    if arr.max_running:
        fits = min(fits, arr.max_running)
    return max(1, fits)


def refill(ledger: LedgerState, parent: JobRecord) -> None:
    """Release the array's next tasks in queue order until `window_size` of them wait (or
    none is left unreleased)."""
    w = parent.window
    if w is None or w.unreleased == 0 or parent.cancel_requested:
        return
    arr = parent.spec.array
    assert isinstance(arr, ev.ArraySpec)  # called for array parents only
    waiting = arr.count - w.unreleased - parent.tasks_up - sum(parent.tasks_ended.values())
    waiting -= w.aside  # held or lowered: the next ones would be placed before them
    want = window_size(ledger, parent)
    if waiting >= want:
        return
    text = ledger.config.policy.profile != "slurm"  # the queue's tie order (task_order)
    lo, hi = arr.first, arr.first + arr.count - 1
    while waiting < want and w.unreleased > 0:
        index = w.next_text if text else w.next_number
        while index is not None and task_id(parent.job_id, index) in ledger.jobs:
            index = task_order.after(index, lo, hi, text)  # released early: skipped
        if index is None:  # cannot happen: `unreleased` counts what the order has left
            break
        release(ledger, parent, index)
        nxt = task_order.after(index, lo, hi, text)
        if text:
            w.next_text = nxt
        else:
            w.next_number = nxt
        waiting += 1


def waits_apart(ledger: LedgerState, task: JobRecord) -> bool:
    """Whether a pending task waits apart from its array's others, so that tasks not
    released yet would be placed before it: it is held, or its priority was lowered below
    the array's."""
    parent = ledger.jobs.get(task.array_parent or "")
    return (
        parent is not None
        and task.state == JobState.pending
        and (task.hold is not None or task.priority < parent.priority)
    )


def apart_changed(ledger: LedgerState, task: JobRecord, was: bool) -> None:
    """After an event about `task` (apart before: `was`): its array's `aside` count."""
    parent = ledger.jobs.get(task.array_parent or "")
    w = parent.window if parent is not None else None
    now = waits_apart(ledger, task)
    if w is not None and now != was:
        w.aside += 1 if now else -1


def forget_released(ledger: LedgerState) -> None:
    """A new event is folded: the tasks the last one released are no longer news."""
    ledger.released_tasks.clear()


def refill_open(ledger: LedgerState) -> None:
    """After every folded event: each array with unreleased tasks tops its window up."""
    for array_id in sorted(ledger.open_arrays):
        refill(ledger, ledger.jobs[array_id])


def release(ledger: LedgerState, parent: JobRecord, index: int) -> None:
    """Create and queue task `index`, as it would have been at the array's admission (its
    times, class and limits are the array's): it leaves the array's unreleased count."""
    w = parent.window
    assert w is not None and parent.admitted_ms is not None  # an admitted, open array
    tid = task_id(parent.job_id, index)
    ledger.jobs[tid] = child_record(
        parent,
        task_spec(parent.spec, index),
        parent.admitted_ms,
        array_parent=parent.job_id,
        time_limit_s=parent.time_limit_s,
    )
    w.unreleased -= 1
    queue.count_unreleased(ledger, parent, -1)
    queue.enqueue(ledger, tid)
    ledger.released_tasks.append(tid)
    if w.unreleased == 0:
        parent.window = None
        ledger.open_arrays.discard(parent.job_id)


def release_named(ledger: LedgerState, key: str) -> None:
    """A request or event names task `key` (`<array key>@<i>`) not released yet: it is
    released now, out of order (a hold, cancel or move of that one task applies to it)."""
    parent, i = _unrecorded(ledger, key)
    if parent is not None and parent.window.unreleased and not parent.cancel_requested:  # type: ignore[union-attr]  # set by _unrecorded
        release(ledger, parent, i)


def stand_in(ledger: LedgerState, key: str) -> JobRecord | None:
    """What task `key` is while it has no record (None: it has one, or is no task): pending
    as it would be once released, or cancelled when its array dropped it unreleased. A copy
    for readers (a dependency on it, `why`): the fold never stores it."""
    parent, i = _unrecorded(ledger, key)
    if parent is None or parent.admitted_ms is None:
        return None
    rec = child_record(
        parent,
        task_spec(parent.spec, i),
        parent.admitted_ms,
        array_parent=parent.job_id,
        time_limit_s=parent.time_limit_s,
    )
    dropped = parent.window.dropped_ms  # type: ignore[union-attr]  # set by _unrecorded
    if dropped is not None:
        rec.state, rec.finished_ms = JobState.cancelled, dropped
        rec.cancel_requested, rec.reason = True, parent.reason
    return rec


def _unrecorded(ledger: LedgerState, key: str) -> tuple[JobRecord | None, int]:
    """(its array, its index) when `key` names a task of an array with a window that has
    no record: unreleased, or dropped; else (None, 0)."""
    head, sep, index = key.rpartition(ARRAY_SEPARATOR)
    parent = ledger.jobs.get(head) if sep and index.isdigit() else None
    if parent is None or parent.window is None or key in ledger.jobs:
        return None, 0
    arr = parent.spec.array
    assert isinstance(arr, ev.ArraySpec)  # only arrays have a window
    i = int(index)
    if str(i) != index or not arr.first <= i < arr.first + arr.count:
        return None, 0
    return parent, i


def cancel_tasks(ledger: LedgerState, parent: JobRecord, reason: str, at_ms: int) -> None:
    """An admitted array is cancelled: its tasks stop (an unplaced one now, an unreleased
    one as a count); it ends after."""
    for task in tasks_of(ledger, parent.job_id):
        if task.state in TERMINAL or task.cancel_requested:
            continue
        unplaced = task.allocation_id is None
        queue.cancel(ledger, task, reason, at_ms)
        if unplaced:
            parent.tasks_ended["cancelled"] = parent.tasks_ended.get("cancelled", 0) + 1
    w = parent.window
    if w is not None and w.unreleased:
        parent.tasks_ended["cancelled"] = parent.tasks_ended.get("cancelled", 0) + w.unreleased
        queue.count_unreleased(ledger, parent, -w.unreleased)
        w.unreleased, w.dropped, w.dropped_ms = 0, w.unreleased, at_ms
        ledger.open_arrays.discard(parent.job_id)
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
