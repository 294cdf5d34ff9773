"""Preemptible backfill on a reservation: given a starving gang with a reservation, when a
preemptible job arrives that would run past the reserved start, then it is placed on the
reserved node marked `backfill_for` the gang, and evicted (`Backfill`) by the preemption
service as soon as that lets the gang land — not before."""

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, exited, fold, given, of_type, started, submitted

HOUR = 3_600_000


def reserved(policy):
    ledger = given(
        *cluster(
            {"name": "n1", "gpus": 8},
            tenants=[{"name": "t", "guaranteed": 8}],
            policy={"reservation_after_s": 60, **policy},
        ),
        submitted(id="long", tenant="t", gpus=6, duration="1h"),
        submitted(id="gang", tenant="t", gpus=8, duration="1h", at_ms=1),
    )
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, Scheduler().decide(ledger, 0))
    fold(
        ledger,
        [started("long")],
    )
    fold(ledger, [submitted(id="small", tenant="t", gpus=2, duration="3h", at_ms=100_000)])
    fold(ledger, Admission().decide(ledger, 100_000))
    return ledger


def test_a_preemptible_job_backfills_the_reservation_and_leaves_when_the_gang_can_land():
    ledger = reserved({})
    out = Scheduler().decide(ledger, 100_000)
    (placed,) = of_type(out, ev.GangPlaced)
    assert (placed.job_id, placed.backfill_for) == ("small", "gang")
    (why,) = [e for e in of_type(out, ev.PendingReasonChanged) if e.job_id == "gang"]
    assert "reserved n1 from t+1h" in why.message
    fold(ledger, out)
    assert ledger.backfills == {"gang": {"small#1"}}
    # while `long` runs, evicting the backfill would not let the gang land: no request
    assert of_type(Preemption().decide(ledger, 100_000), ev.PreemptionRequested) == []
    fold(
        ledger,
        [exited("long", HOUR)],
    )
    fold(ledger, Scheduler().decide(ledger, HOUR))  # GangCompleted
    fold(ledger, Scheduler().decide(ledger, HOUR))  # the gang still does not fit
    (req,) = of_type(Preemption().decide(ledger, HOUR), ev.PreemptionRequested)
    assert (req.job_id, req.beneficiary, req.reason) == ("small", "gang", "Backfill")
    assert "small ran as preemptible backfill on its reservation of n1" in req.message
    assert "frees 2 GPUs" in req.message and req.details["victims"][0]["reason"] == "Backfill"


def test_without_preemption_the_job_waits_with_reserved_instead():
    ledger = reserved({"preemption": False})
    out = Scheduler().decide(ledger, 100_000)
    assert of_type(out, ev.GangPlaced) == []
    (held,) = [e for e in of_type(out, ev.PendingReasonChanged) if e.job_id == "small"]
    assert held.reason == "Reserved" and "run past it" in held.message
