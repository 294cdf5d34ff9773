"""Stage `maintenance`: given a maintenance window on one of two nodes, when the scheduler
decides before it, then a job whose time limit ends before the window may go there, one whose
limit reaches into it (or that has none) goes elsewhere or waits with `Maintenance` naming
the window; while the window is in force nothing starts there; at its end the node returns."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.stages import maintenance
from tests.scheduler.stages.helpers import limits, round_at
from tests.services.given import fold, submitted
from tests.services.test_pending import fleet, scheduled

TWO = {"name_prefix": "n", "count": 2, "gpus": 8}
H = 3_600_000


def given_n1_busy_and_a_window_on_n2():
    ledger, _ = scheduled(
        fleet(TWO, tenants=({"name": "a", "guaranteed": 16},)),
        [{"id": "big", "tenant": "a", "gpus": 8}],
    )
    assert ledger.jobs["big"].state == "running"
    fold(
        ledger,
        [
            ev.MaintenanceScheduled(
                window_id="fw", nodes=("n2",), start_ms=2 * H, end_ms=4 * H, reason="firmware"
            )
        ],
    )
    return ledger


def submit(ledger, job_id, at_ms, **job):
    fold(ledger, [submitted(at_ms=at_ms, id=job_id, tenant="a", gpus=8, **job)])
    fold(ledger, Admission().decide(ledger, at_ms))


def test_only_work_that_ends_before_the_window_starts_on_its_nodes():
    ledger = given_n1_busy_and_a_window_on_n2()
    # when a job with a 1 h limit comes at 30 min: it ends before 2 h, so n2 takes it
    submit(ledger, "short", H // 2, time_limit="1h")
    rnd = round_at(ledger, H // 2)
    assert maintenance.exclude(rnd, ledger.jobs["short"], limits(rnd, "short")) == frozenset()
    out = Scheduler().decide(ledger, H // 2)
    (placed,) = [e for e in out if isinstance(e, ev.GangPlaced)]
    assert placed.job_id == "short" and {m.node for m in placed.members} == {"n2"}


def test_a_job_whose_limit_reaches_the_window_waits_and_is_told_which_window():
    ledger = given_n1_busy_and_a_window_on_n2()
    # when a job with a 2 h limit comes at 30 min (it would run to 2 h 30 min)
    submit(ledger, "long", H // 2, time_limit="2h")
    rnd = round_at(ledger, H // 2)
    assert maintenance.exclude(rnd, ledger.jobs["long"], limits(rnd, "long")) == {"n2"}
    out = Scheduler().decide(ledger, H // 2)
    fold(ledger, out)
    # then it is not placed, and the reason names the window
    assert not [e for e in out if isinstance(e, ev.GangPlaced)]
    j = ledger.jobs["long"]
    assert j.reason == PendingReason.Maintenance
    assert j.message == (
        "fits only on nodes of maintenance window fw (n2, t+2h to t+4h): "
        "its time limit 2h would reach into it (firmware)"
    )


def test_without_a_limit_a_job_waits_for_the_window_to_end_and_then_starts():
    ledger = given_n1_busy_and_a_window_on_n2()
    submit(ledger, "open", 0)
    out = Scheduler().decide(ledger, H)
    fold(ledger, out)
    assert ledger.jobs["open"].message.endswith(
        "the job has no time limit or duration hint (firmware)"
    )
    # during the window it is in force
    out = Scheduler().decide(ledger, 3 * H)
    fold(ledger, out)
    assert ledger.jobs["open"].message.endswith(": in force (firmware)")
    # the scheduler wakes at the window's end, and places it then
    assert maintenance.wakeup(ledger, 3 * H) == [4 * H]
    out = Scheduler().decide(ledger, 4 * H)
    (placed,) = [e for e in out if isinstance(e, ev.GangPlaced)]
    assert placed.job_id == "open" and {m.node for m in placed.members} == {"n2"}


def test_a_cancelled_window_frees_its_nodes_at_once():
    ledger = given_n1_busy_and_a_window_on_n2()
    submit(ledger, "open", 0)
    fold(ledger, Scheduler().decide(ledger, H))
    fold(ledger, [ev.MaintenanceCancelled(window_id="fw", occurred_at_ms=H + 1)])
    out = Scheduler().decide(ledger, H + 1)
    (placed,) = [e for e in out if isinstance(e, ev.GangPlaced)]
    assert placed.job_id == "open"


def test_without_a_limit_a_duration_hint_with_its_margin_bounds_the_run():
    # given a window on n2 from 2 h, and at 30 min a job with a 1 h 20 min hint and no limit
    # (2 h with the 50 % margin: it would run to 2 h 30 min)
    ledger = given_n1_busy_and_a_window_on_n2()
    submit(ledger, "longer", H // 2, duration="80m")
    out = Scheduler().decide(ledger, H // 2)
    fold(ledger, out)
    # then it waits, told its hint and margin reach the window
    assert not [e for e in out if isinstance(e, ev.GangPlaced)]
    assert ledger.jobs["longer"].message == (
        "fits only on nodes of maintenance window fw (n2, t+2h to t+4h): "
        "its duration hint with a 50% margin, 2h, would reach into it (firmware)"
    )
    # when a job with a 1 h hint comes (1 h 30 min with the margin: ends at 2 h)
    submit(ledger, "hinted", H // 2, duration="1h")
    rnd = round_at(ledger, H // 2)
    assert maintenance.exclude(rnd, ledger.jobs["hinted"], limits(rnd, "hinted")) == frozenset()
    out = Scheduler().decide(ledger, H // 2)
    # then n2 takes it
    (placed,) = [e for e in out if isinstance(e, ev.GangPlaced)]
    assert placed.job_id == "hinted" and {m.node for m in placed.members} == {"n2"}
