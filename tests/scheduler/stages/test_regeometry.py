"""Stage `regeometry`: given an idle MIG GPU being re-partitioned for a job, when the job is
tried, then it is `WaitingForMigReconfiguration` with the node, the GPU and the layout."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import fold, of_type
from tests.services.test_pending import fleet, scheduled, why


def test_a_job_waits_for_the_layout_changed_for_it():
    node = {"name": "m1", "gpus": 1, "sharing": "mig", "mig_layout": ["1g.10gb"] * 7}
    ledger, _ = scheduled(
        fleet(node, mig_regeometry=True), [{"id": "big", "tenant": "a", "mig": "3g.40gb"}]
    )
    (req,) = of_type(Preemption().decide(ledger, 5), ev.MigReconfigurationRequested)
    fold(ledger, [req])
    e = why(Scheduler().decide(ledger, 6), "big")
    assert e.reason == PendingReason.WaitingForMigReconfiguration
    assert e.details["mig_reconfiguration"]["node"] == "m1"
    assert e.details["mig_reconfiguration"]["layout"] == list(req.layout)
