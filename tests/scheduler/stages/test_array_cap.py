"""Stage `array_cap`: given an array with `max_running`, when its tasks are tried in one
decide, then tasks beyond the cap wait with `ArrayTaskLimit` (tasks placed in this decide
counted by the stage's bookkeeping)."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import array_cap
from tests.scheduler.stages.helpers import round_at
from tests.services.test_pending import N8, fleet, scheduled


def test_tasks_placed_in_this_decide_count_towards_the_cap():
    ledger, out = scheduled(
        fleet(N8),
        [{"id": "sweep", "tenant": "a", "gpus": 1, "array": {"count": 5, "max_running": 2}}],
    )
    assert sorted(e.job_id for e in out if isinstance(e, ev.GangPlaced)) == ["sweep@0", "sweep@1"]
    rnd = round_at(ledger, 5)
    task = ledger.jobs["sweep@2"]
    assert task.reason == PendingReason.ArrayTaskLimit
    # the two placed tasks now run (folded): the cap still holds without any bookkeeping
    assert array_cap.gate(rnd, task, Limits(need=1000)) == []  # reason unchanged: no event


def test_bookkeeping_counts_a_bound_task_of_its_array():
    ledger, _ = scheduled(
        fleet(N8),
        [{"id": "sweep", "tenant": "a", "gpus": 1, "array": {"count": 5, "max_running": 2}}],
    )
    rnd = round_at(ledger, 5)
    array_cap.book(rnd, ledger.jobs["sweep@2"], ())
    assert rnd.array_placed == {"sweep": 1}
