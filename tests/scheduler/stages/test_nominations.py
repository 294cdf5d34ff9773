"""Stage `nominations`: given capacity freed by preemption for a beneficiary, when another job
is tried, then the nominated nodes are excluded for it but not for the beneficiary."""

from gpuledger import events as ev
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import nominations
from tests.scheduler.stages.helpers import round_at
from tests.services.given import fold, of_type
from tests.services.test_pending import N8, fleet, scheduled


def test_nominated_nodes_are_kept_for_their_beneficiary():
    ledger, _ = scheduled(
        fleet(N8),
        [{"id": "low", "tenant": "a", "gpus": 8}],
        [{"id": "high", "tenant": "a", "gpus": 8, "class": "interactive"}],
        [{"id": "other", "tenant": "a", "gpus": 1}],
    )
    (req,) = of_type(Preemption().decide(ledger, 5), ev.PreemptionRequested)
    fold(ledger, [req])
    rnd = round_at(ledger, 6)
    assert nominations.exclude(rnd, ledger.jobs["other"], Limits(need=1000)) == {"n1"}
    assert nominations.exclude(rnd, ledger.jobs["high"], Limits(need=8000)) == frozenset()
