"""Stage `reservation`: given capacity reserved for a starving gang, when a job that would run
past the reservation is tried, then it is kept off the reserved nodes and, since it would
fit there, told `Reserved` with the gang and its expected start; with no reservation in the
decide, the stage excludes nothing."""

from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import reservation
from tests.scheduler.stages.helpers import round_at
from tests.services.given import fold, given, submitted
from tests.services.test_pending import N8, fleet, why


def starving_gang():
    ledger = given(
        *fleet(
            N8, tenants=[{"name": "t", "guaranteed": 8}], reservation_after_s=60, preemption=False
        ),
        submitted(id="long", tenant="t", gpus=6, duration="1h"),
        submitted(id="gang", tenant="t", gpus=8, duration="1h", at_ms=1),
    )
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, Scheduler().decide(ledger, 0))
    fold(ledger, [submitted(id="small", tenant="t", gpus=2, duration="3h", at_ms=100_000)])
    fold(ledger, Admission().decide(ledger, 100_000))
    return ledger


def test_a_job_running_past_the_reservation_is_kept_off_it_and_told_reserved():
    ledger = starving_gang()
    e = why(Scheduler().decide(ledger, 100_000), "small")
    assert e.reason == PendingReason.Reserved
    assert "capacity on n1 is reserved for gang" in e.message and "run past it" in e.message
    assert "reservation" in e.details


def test_without_a_reservation_nothing_is_excluded():
    ledger = starving_gang()
    rnd = round_at(ledger, 100_000)  # a fresh round: the gang has not reserved yet
    lim = Limits(need=2000)
    assert reservation.exclude(rnd, ledger.jobs["small"], lim) == frozenset()
    assert lim.held_back is False
