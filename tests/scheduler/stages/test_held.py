"""Stage `held`: given a pending job its tenant holds, when the scheduler decides, then the job
is kept out with `Held` (who holds it and why in the message) while a later job of the same
tenant is placed; a job that is not held passes the gate."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import STAGES, held
from tests.scheduler.stages.helpers import round_at
from tests.services.given import fold
from tests.services.test_pending import N8, fleet, scheduled


def test_a_held_job_is_kept_out_with_who_holds_it_and_a_later_job_is_placed():
    # given a 2-GPU job pending behind a full node, held by its tenant
    ledger, _ = scheduled(
        fleet(N8),
        [{"id": "big", "tenant": "a", "gpus": 8}],
        [{"id": "train", "tenant": "a", "gpus": 8}],
    )
    fold(ledger, [ev.JobHeld(job_id="train", tenant="a", reason="dataset not there yet")])
    # when the scheduler decides
    out = Scheduler().decide(ledger, 10)
    fold(ledger, out)
    # then it is told Held, with who holds it and why
    (why,) = [e for e in out if isinstance(e, ev.PendingReasonChanged)]
    assert (why.job_id, why.reason) == ("train", PendingReason.Held)
    assert why.message == "held by tenant: dataset not there yet"
    assert why.details["actor"] == "tenant"
    # and asked again, it is kept out without repeating itself
    assert held.gate(round_at(ledger, 20), ledger.jobs["train"], Limits(need=8000)) == []


def test_a_held_job_is_not_placed_on_a_free_node_and_a_job_not_held_passes():
    # given two pending 2-GPU jobs, the first held, before any decide
    ledger, _ = scheduled(fleet(N8))
    fold(
        ledger,
        [
            ev.JobSubmitted(
                event_id="s-x", job=ev.JobSpec(job_id=j, tenant="a", resources=ev.Resources(gpus=2))
            )
            for j in ("first", "second")
        ],
    )
    fold(ledger, [ev.JobHeld(job_id="first", tenant="a", actor="operator")])
    fold(ledger, Admission().decide(ledger, 1))
    # when the scheduler decides on an empty node
    assert held.gate(round_at(ledger, 2), ledger.jobs["second"], Limits(need=2000)) is None
    out = Scheduler().decide(ledger, 2)
    # then only the job not held is placed; the held one is told who holds it
    assert [e.job_id for e in out if isinstance(e, ev.GangPlaced)] == ["second"]
    (why,) = [e for e in out if isinstance(e, ev.PendingReasonChanged)]
    assert (why.job_id, why.reason, why.message) == ("first", "Held", "held by operator")


def test_held_is_the_first_stage_of_the_table():
    assert STAGES[0] is held.STAGE
