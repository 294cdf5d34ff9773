"""Stage `cordon`: given a node the operator cordoned, when the scheduler decides, then new
work goes to the other nodes, what runs on the cordoned node runs on, and a job that fits only
there is told `NodeCordoned` (which node, and why); once uncordoned it is placed there."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.stages import cordon
from tests.scheduler.stages.helpers import limits, round_at
from tests.services.given import fold
from tests.services.test_pending import fleet, scheduled

TWO = {"name_prefix": "n", "count": 2, "gpus": 8}


def test_new_work_avoids_a_cordoned_node_and_a_job_that_fits_only_there_is_told_so():
    # given n1 runs an 8-GPU job and the operator cordons n2
    ledger, _ = scheduled(
        fleet(TWO, tenants=({"name": "a", "guaranteed": 16},)),
        [{"id": "big", "tenant": "a", "gpus": 8}],
    )
    fold(ledger, [ev.NodeCordoned(node="n2", reason="firmware")])
    # when another 8-GPU job comes
    fold(
        ledger,
        [
            ev.JobSubmitted(
                event_id="s", job=ev.JobSpec(job_id="j", tenant="a", resources=ev.Resources(gpus=8))
            )
        ],
    )
    fold(ledger, Admission().decide(ledger, 1))
    assert cordon.exclude(
        round_at(ledger, 2), ledger.jobs["j"], limits(round_at(ledger, 2), "j")
    ) == {"n2"}
    out = Scheduler().decide(ledger, 2)
    fold(ledger, out)
    # then it is not placed on n2, and is told the cordon is why
    assert not [e for e in out if isinstance(e, ev.GangPlaced)]
    j = ledger.jobs["j"]
    assert (j.reason, j.message) == (
        PendingReason.NodeCordoned,
        "fits only on cordoned nodes: n2 (firmware)",
    )
    # and big runs on
    assert ledger.jobs["big"].state == "running"
    # when n2 is uncordoned, j is placed there
    fold(ledger, [ev.NodeUncordoned(node="n2")])
    out = Scheduler().decide(ledger, 3)
    (placed,) = [e for e in out if isinstance(e, ev.GangPlaced)]
    assert placed.job_id == "j" and {m.node for m in placed.members} == {"n2"}


def test_a_job_that_fits_only_on_nodes_being_drained_is_told_which_and_the_cordoned_ones():
    # given n1 runs an 8-GPU job, the operator cordons n2 and drains n1
    ledger, _ = scheduled(
        fleet(
            {"name_prefix": "n", "count": 3, "gpus": 8}, tenants=({"name": "a", "guaranteed": 24},)
        ),
        [{"id": "big", "tenant": "a", "gpus": 8}, {"id": "other", "tenant": "a", "gpus": 8}],
    )
    fold(
        ledger,
        [
            ev.NodeCordoned(node="n2", reason="cables"),
            ev.NodeCordoned(node="n3", reason="firmware", drain=True),
        ],
    )
    # when another 8-GPU job comes (n1 full, n2 cordoned, n3 being drained)
    job = ev.JobSpec(job_id="j", tenant="a", resources=ev.Resources(gpus=8))
    fold(ledger, [ev.JobSubmitted(event_id="s", job=job)])
    fold(ledger, Admission().decide(ledger, 1))
    fold(ledger, Scheduler().decide(ledger, 2))
    # then it waits, told which nodes are cordoned and which are being drained, and why
    j = ledger.jobs["j"]
    assert (j.reason, j.message) == (
        PendingReason.NodeCordoned,
        "fits only on cordoned nodes: n2 (cables); and on nodes being drained: n3 (firmware)",
    )
    assert j.details["cordoned"] == ["n2", "n3"] and j.details["being_drained"] == ["n3"]
