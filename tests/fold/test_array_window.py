"""Arrays held as one record with counters (services/domain/fold/arrays.py, issue 44): given
an admitted array of 100,000 tasks, the fold holds a window of task records, not one each;
placing and ending tasks releases the next ones in the queue's order; the tenant's counts
include the unreleased ones; a request naming one unreleased task releases it; cancelling
the array cancels every task, counted."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold import arrays
from tests.fold.story import admitted, given, node, placed, submitted, when

BIG = 100_000


def big_array(count: int = BIG, **array):
    """Two 8-GPU nodes and an admitted array of one-GPU tasks."""
    spec = ev.ArraySpec(count=count, **array)
    return given(node("n1"), node("n2"), submitted("big", gpus=1, array=spec), admitted("big"))


def task_records(ledger) -> list[str]:
    return sorted(j for j, r in ledger.jobs.items() if r.array_parent == "big")


def ended(job_id: str, at: int = 1) -> ev.GangCompleted:
    return ev.GangCompleted(
        job_id=job_id, allocation_id=f"{job_id}#1", producer="scheduler/0", occurred_at_ms=at
    )


def test_an_admitted_array_of_100000_tasks_holds_a_window_of_records():
    ledger = big_array()
    window = arrays.window_size(ledger, ledger.jobs["big"])
    # 16 GPUs hold 16 one-GPU tasks at once
    assert window == 16
    assert len(task_records(ledger)) == len(ledger.pending) == window
    parent = ledger.jobs["big"]
    assert parent.window is not None and parent.window.unreleased == BIG - window
    assert parent.message == f"{BIG} tasks: 0 running, {BIG} pending"
    # the tenant's queued jobs and pending capacity count every task, released or not
    assert ledger.live_jobs("org/a") == BIG
    assert ledger.quota.pending_gpu_milli == {"org/a": BIG * 1000}


def test_tasks_are_released_in_the_queues_order_the_index_as_text():
    ledger = big_array()
    window = arrays.window_size(ledger, ledger.jobs["big"])
    expected = sorted(range(BIG), key=str)[:window]  # 0, 1, 10, 100, 1000, 10000, 10001 ...
    assert task_records(ledger) == sorted(f"big@{i}" for i in expected)
    assert ledger.released_tasks == [f"big@{i}" for i in expected]


def test_placing_and_ending_tasks_releases_the_next_ones_in_order():
    ledger = big_array()
    window = arrays.window_size(ledger, ledger.jobs["big"])
    order = sorted(range(BIG), key=str)
    # when the first task in order is placed, one more is released behind the window
    when(ledger, placed("big@0", ("n1", (0,))))
    assert ledger.released_tasks == [f"big@{order[window]}"]
    assert len(ledger.pending) == window
    # when it ends, nothing more is needed: the window still waits whole
    when(ledger, ended("big@0"))
    assert ledger.released_tasks == [] and len(ledger.pending) == window
    parent = ledger.jobs["big"]
    assert parent.window.unreleased == BIG - window - 1
    assert parent.message == f"{BIG} tasks: 0 running, {BIG - 1} pending, 1 completed"
    assert ledger.live_jobs("org/a") == BIG - 1


def test_max_running_bounds_the_window_and_a_small_array_is_released_whole():
    ledger = big_array(max_running=10)
    assert len(task_records(ledger)) == 10
    ledger = big_array(count=arrays.RELEASE_WHOLE, max_running=10)
    assert len(task_records(ledger)) == arrays.RELEASE_WHOLE
    assert ledger.jobs["big"].window is None and ledger.open_arrays == set()


def test_tasks_on_shares_of_a_gpu_keep_twice_what_could_run():
    spec = ev.ArraySpec(count=BIG)
    job = ev.JobSpec(
        job_id="big", tenant="org/a", resources=ev.Resources(gpu_milli=500), array=spec
    )
    ledger = given(node("n1"), node("n2"), ev.JobSubmitted(event_id="s", job=job))
    when(ledger, admitted("big"))
    assert len(task_records(ledger)) == arrays.WINDOW_SLACK * 32


def test_under_the_slurm_profile_tasks_are_released_in_numeric_order():
    policy = ev.PolicyConfigured(policy=ev.Policy(profile="slurm"))
    spec = ev.ArraySpec(count=BIG)
    ledger = given(
        policy, node("n1"), node("n2"), submitted("big", gpus=1, array=spec), admitted("big")
    )
    window = arrays.window_size(ledger, ledger.jobs["big"])
    assert ledger.released_tasks == [f"big@{i}" for i in range(window)]


def test_a_request_naming_an_unreleased_task_releases_it_first():
    ledger = big_array()
    assert "big@99999" not in ledger.jobs
    when(ledger, ev.JobHeld(job_id="big@99999", tenant="org/a", actor="alice"))
    held = ledger.jobs["big@99999"]
    assert held.hold is not None and held.state == "pending"
    # when the array is cancelled, the released and unreleased tasks are all cancelled
    when(ledger, ev.JobCancelled(job_id="big", tenant="org/a"))
    parent = ledger.jobs["big"]
    window = arrays.window_size(ledger, parent)
    assert parent.state == "cancelled" and parent.window.unreleased == 0
    assert parent.window.dropped == BIG - window - 1  # cancelled as a count, no record each
    assert parent.tasks_ended == {"cancelled": BIG}
    assert parent.message == f"{BIG} tasks: 0 running, 0 pending, {BIG} cancelled"
    assert ledger.pending == set() and ledger.open_arrays == set()
    assert ledger.live_jobs("org/a") == 0 and ledger.quota.pending_gpu_milli == {"org/a": 0}
    # no task was created for the cancel
    assert len(task_records(ledger)) == window + 1


def test_cancelling_an_array_with_a_running_task_ends_it_after_that_task():
    ledger = big_array()
    when(ledger, placed("big@0", ("n1", (0,))), ev.JobCancelled(job_id="big", tenant="org/a"))
    parent = ledger.jobs["big"]
    assert parent.tasks_ended == {"cancelled": BIG - 1} and parent.state == "running"
    assert ledger.agents.cancelling == {"big@0#1"}
    when(
        ledger,
        ev.GangEvicted(
            job_id="big@0", allocation_id="big@0#1", reason="Cancelled",
            producer="scheduler/0", occurred_at_ms=2,
        ),
    )  # fmt: skip
    assert parent.state == "cancelled" and parent.tasks_ended == {"cancelled": BIG}


def test_a_dependency_may_name_a_task_not_released_yet():
    ledger = big_array()
    # the tenant's name for it has a key, and a reader sees it pending as it will be
    assert "big@99999" not in ledger.jobs
    assert ledger.job_key("org/a", "big@99999") == "big@99999"
    waiting = ledger.job_record("big@99999")
    assert waiting is not None and waiting.state == "pending" and waiting.attempts == 0
    assert ledger.job_key("org/b", "big@99999") is None  # another tenant's: no answer
    assert ledger.job_key("org/a", f"big@{BIG}") is None  # past its last index
    # when the array is cancelled, the unreleased task reads as cancelled then
    when(ledger, ev.JobCancelled(job_id="big", tenant="org/a", occurred_at_ms=5))
    dropped = ledger.job_record("big@99999")
    assert dropped is not None and dropped.state == "cancelled" and dropped.finished_ms == 5
    assert "big@99999" not in ledger.jobs


def test_held_tasks_do_not_fill_the_window_the_next_ones_are_released_in_their_stead():
    ledger = big_array()
    waiting = sorted(ledger.pending)
    # when the tenant holds every released task
    for task in waiting:
        when(ledger, ev.JobHeld(job_id=task, tenant="org/a", actor="alice"))
    # then as many more are released, placeable before the held ones as they would have been
    assert len(ledger.pending) == 2 * len(waiting)
    assert ledger.jobs["big"].window.aside == len(waiting)
    # when one is released from its hold and another cancelled, the count follows
    when(ledger, ev.JobReleased(job_id=waiting[0], tenant="org/a", actor="alice"))
    when(ledger, ev.JobCancelled(job_id=waiting[1], tenant="org/a"))
    assert ledger.jobs["big"].window.aside == len(waiting) - 2
