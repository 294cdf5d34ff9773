"""Stage `model_guarantee`: given a tenant guaranteed 2 A100s, when a second non-preemptible
2-GPU A100-only job is tried, then the A100 node is excluded for it and, since only that
keeps it out, it is told `NonPreemptibleOverQuota` per model; preemptible work is not
bound; an elastic step past a model's guarantee is capped; a non-preemptible bind adds to the model's non-preemptible use."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import model_guarantee
from tests.scheduler.stages.helpers import round_at
from tests.services.given import of_type, submitted
from tests.services.test_model_guarantees import decided

A100 = ["A100-80GB"]
INFERENCE = {"class": "inference"}


def test_non_preemptible_work_past_a_models_guarantee_is_kept_off_that_model():
    ledger, out = decided(
        submitted(id="i1", tenant="serve", gpus=2, models=A100, **INFERENCE),
        submitted(id="i2", tenant="serve", gpus=2, models=A100, at_ms=1, **INFERENCE),
    )
    (wait,) = [e for e in of_type(out, ev.PendingReasonChanged) if e.job_id == "i2"]
    assert wait.reason == PendingReason.NonPreemptibleOverQuota
    assert "runs 2 non-preemptible of 2 guaranteed A100-80GB GPUs" in wait.message
    # replay the decide's bookkeeping: i1's bind uses the A100 guarantee up
    rnd = round_at(ledger, 0)
    (i1,) = [p for p in of_type(out, ev.GangPlaced) if p.job_id == "i1"]
    model_guarantee.book(rnd, ledger.jobs["i1"], i1.members)
    assert rnd.fixed_model[("serve", "A100-80GB")] == 2000
    lim = Limits(need=2000)
    assert model_guarantee.exclude(rnd, ledger.jobs["i2"], lim) == {"a100"}
    assert lim.over_models == [("A100-80GB", 2000, 2000)]
    # an elastic step past the guarantee of a model still open is capped (2 GPUs a member)
    open_lim = Limits(need=1000)
    assert model_guarantee.cap(round_at(ledger, 0), ledger.jobs["i2"], open_lim, 2) is False
    assert model_guarantee.cap(round_at(ledger, 0), ledger.jobs["i2"], open_lim, 1) is True


def test_preemptible_work_is_not_bound_by_a_models_guarantee():
    ledger, _ = decided(submitted(id="p", tenant="serve", gpus=4, models=A100))
    rnd = round_at(ledger, 0)
    assert model_guarantee.exclude(rnd, ledger.jobs["p"], Limits(need=4000)) == frozenset()
