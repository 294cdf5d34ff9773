"""Stage `releasing`: given a job whose victims were asked to checkpoint and exit, when it is
tried before they left, then it is `WaitingForPreemptedWorkloads` with their deadlines, and
the victims are what the stage lists."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.stages import releasing
from tests.services.given import fold, of_type
from tests.services.test_pending import N8, fleet, scheduled, why


def test_a_job_waits_for_the_victims_still_leaving_for_it():
    ledger, _ = scheduled(
        fleet(N8),
        [{"id": "low", "tenant": "a", "gpus": 8}],
        [{"id": "high", "tenant": "a", "gpus": 8, "class": "interactive"}],
    )
    (req,) = of_type(Preemption().decide(ledger, 5), ev.PreemptionRequested)
    fold(ledger, [req])
    assert [r.job_id for r in releasing.releasing(ledger, ledger.jobs["high"])] == ["low"]
    e = why(Scheduler().decide(ledger, 6), "high")
    assert e.reason == PendingReason.WaitingForPreemptedWorkloads
    assert e.details["preempted_for_it"] == ["low"]
