"""Stage `model_limits`: given a tenant at its `borrowing_limit_by_model` for H100s, when an
H100-only job of it is tried, then the H100 node is excluded and it is told `ExceedsLimit`
for that model, while a job that may use any model goes to the A100s."""

from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import model_limits
from tests.scheduler.stages.helpers import round_at
from tests.services.given import fold
from tests.services.test_model_lending_limits import (
    H100,
    RESEARCH,
    fleet,
    placed_nodes,
    reason,
)
from tests.services.test_preemption import running, step, submitted


def test_a_model_past_its_borrowing_limit_is_closed_to_the_tenant():
    ledger = running(fleet(RESEARCH), submitted(id="own", tenant="research", gpus=4, models=H100))
    fold(ledger, [submitted(at_ms=5, id="more", tenant="research", gpus=2, models=H100)])
    fold(ledger, [submitted(at_ms=6, id="any", tenant="research", gpus=2)])
    fold(ledger, Admission().decide(ledger, 10))
    rnd = round_at(ledger, 10)
    lim = Limits(need=2000)
    assert model_limits.exclude(rnd, ledger.jobs["more"], lim) == {"h100"}
    assert [b[0] for b in lim.model_blocks.values()] == [PendingReason.ExceedsLimit]
    assert model_limits.cap(rnd, ledger.jobs["more"], lim, 1) is True
    out = step(ledger, 10, Scheduler())
    assert reason(out, "more")[0] == PendingReason.ExceedsLimit
    assert placed_nodes(out, "any") == {"a100"}
