"""Time-decayed past usage breaks queue-order ties between tenants: given two tenants equally
far below their fair share, when the scheduler orders the queue with `usage_half_life_s` set,
then the tenant with less recent usage goes first; the decayed usage is an integer fold of
event times (identical on every refold)."""

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.policy.queue import ordered_pending
from gpuledger.services.domain.policy.usage import advance, decay, step_ms
from gpuledger.services.quota.decider import Quota
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, exited, fold, given, of_type, stamped, started, submitted

HOUR = 3_600_000


def test_usage_one_half_life_old_counts_half_and_folding_in_pieces_changes_nothing():
    s = step_ms(3600)
    used = advance(0, 0, 8000, HOUR, s)  # 8 GPUs for an hour
    assert 0.97 < used / (8000 * HOUR / 2 / 0.6931471805599453) < 1.0  # the continuous integral
    assert advance(used, HOUR, 0, 2 * HOUR, s) == used // 2 == decay(used, 16)
    whole = advance(0, 0, 1000, 5 * HOUR // 3, s)
    assert whole == advance(advance(0, 0, 1000, HOUR // 3, s), HOUR // 3, 1000, 5 * HOUR // 3, s)
    assert decay(used, 16 * 200) == 0


def history(half_life_s):
    """Tenant a ran 8 GPUs from 0 to 1 h; then a and b each queue an 8-GPU job (a's first)."""
    ledger = given(
        *cluster(
            {"name": "n1", "gpus": 8},
            tenants=[{"name": "a", "guaranteed": 4}, {"name": "b", "guaranteed": 4}],
            policy={"usage_half_life_s": half_life_s},
        ),
        submitted(id="a-old", tenant="a", gpus=8),
    )
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, Scheduler().decide(ledger, 0))
    fold(
        ledger,
        [
            started("a-old"),
            exited("a-old", HOUR),
        ],
    )
    fold(ledger, Scheduler().decide(ledger, HOUR))
    assert ledger.jobs["a-old"].state == "completed"
    fold(
        ledger,
        [
            submitted(id="a-new", tenant="a", gpus=8, at_ms=HOUR + 1),
            submitted(id="b-new", tenant="b", gpus=8, at_ms=HOUR + 2),
        ],
    )
    fold(ledger, Admission().decide(ledger, HOUR + 2))
    fold(ledger, Quota().decide(ledger, HOUR + 2))
    shares = ledger.fair_shares
    assert shares["a"].fair_share_gpu_milli == shares["b"].fair_share_gpu_milli == 4000
    return ledger


def test_the_tenant_with_less_recent_usage_goes_first_when_both_are_equally_below_fair_share():
    ledger = history(3600)
    assert ledger.usage_at("b", HOUR + 2) == 0
    assert ledger.usage_at("a", 2 * HOUR) == ledger.usage_at("a", HOUR) // 2 > 0
    assert [j.job_id for j in ordered_pending(ledger, HOUR + 2)] == ["b-new", "a-new"]
    (placed,) = of_type(Scheduler().decide(ledger, HOUR + 2), ev.GangPlaced)
    assert placed.job_id == "b-new"


def test_without_a_half_life_submit_time_breaks_the_tie():
    ledger = history(0)
    assert ledger.usage_at("a", HOUR + 2) == 0 and ledger.quota.decayed_usage == {}
    (placed,) = of_type(Scheduler().decide(ledger, HOUR + 2), ev.GangPlaced)
    assert placed.job_id == "a-new"


def test_decayed_usage_never_outranks_the_distance_below_fair_share():
    ledger = history(3600)
    # b now holds 8 GPUs (above its share of 4): a's job goes first despite a's past usage
    fold(
        ledger,
        [
            stamped(
                ev.GangPlaced,
                "bx",
                HOUR + 2,
                job_id="b-new",
                allocation_id="b-new#1",
                tenant="b",
                members=(ev.MemberPlacement(rank=0, node="n1", gpus=tuple(range(8))),),
            )
        ],
    )
    fold(ledger, [submitted(id="b-more", tenant="b", gpus=8, at_ms=HOUR + 3)])
    fold(ledger, Admission().decide(ledger, HOUR + 3))
    assert [j.job_id for j in ordered_pending(ledger, HOUR + 3)] == ["a-new", "b-more"]


def test_switching_the_half_life_on_mid_log_starts_everyone_at_zero_and_off_forgets():
    ledger = history(0)
    fold(
        ledger,
        [stamped(ev.PolicyConfigured, "p1", HOUR + 10, policy=ev.Policy(usage_half_life_s=600))],
    )
    assert ledger.quota.decayed_usage == {"a": (0, HOUR + 10)}  # b never ran: 0 until it does
    assert ledger.usage_at("a", 2 * HOUR) == ledger.usage_at("b", 2 * HOUR) == 0
    fold(ledger, [stamped(ev.PolicyConfigured, "p2", HOUR + 20, policy=ev.Policy())])
    assert ledger.quota.decayed_usage == {}
