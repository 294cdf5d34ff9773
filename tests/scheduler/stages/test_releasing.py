"""Stage `releasing`: given a job whose victims were asked to checkpoint and exit, when it is
tried before they left, then it is `WaitingForPreemptedWorkloads` with their deadlines, and
the victims are what the stage lists."""

from gpuledger.events.reasons import PendingReason
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.stages import releasing
from tests.services.test_pending import victims_leaving, why


def test_a_job_waits_for_the_victims_still_leaving_for_it():
    ledger = victims_leaving()
    assert [r.job_id for r in releasing.releasing(ledger, ledger.jobs["high"])] == ["low"]
    e = why(Scheduler().decide(ledger, 6), "high")
    assert e.reason == PendingReason.WaitingForPreemptedWorkloads
    assert e.details["preempted_for_it"] == ["low"]
