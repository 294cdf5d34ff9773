"""Stage `reserve`: given a gang that has waited longer than `reservation_after_s` for
capacity, when it is tried and does not fit, then it reserves the nodes that free up soonest
(its message says which, from when), and a job waiting that long is a wake-up."""

from gpuledger.events.reasons import PendingReason
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.stages import reserve
from tests.scheduler.stages.test_reservation import starving_gang
from tests.services.test_pending import why


def test_a_starving_gang_reserves_what_frees_up_soonest():
    ledger = starving_gang()
    e = why(Scheduler().decide(ledger, 100_000), "gang")
    assert e.reason == PendingReason.Resources
    assert "; reserved n1 from " in e.message
    assert e.details["reservation"]


def test_the_instant_a_job_starts_to_starve_is_a_wake_up():
    ledger = starving_gang()
    assert 100_000 + 60_000 in reserve.wakeup(ledger, 100_000)  # `small`, submitted at 100 s
