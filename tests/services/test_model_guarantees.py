"""Per-GPU-model guarantees bind non-preemptible work: given a tenant guaranteed 2 A100s
(of 8 GPUs overall), when its non-preemptible jobs ask for GPUs, then at most 2 A100s go to
them — the rest go to other models or wait with `NonPreemptibleOverQuota` — while
preemptible work is not bound by the per-model guarantee."""

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, exited, fold, given, of_type, started, submitted

NODES = (
    {"name": "a100", "gpus": 4, "model": "A100-80GB"},
    {"name": "h100", "gpus": 4, "model": "H100-80GB"},
)
TENANTS = [{"name": "serve", "guaranteed": 8, "guaranteed_by_model": {"A100-80GB": 2}}]


def decided(*jobs):
    ledger = given(*cluster(*NODES, tenants=TENANTS), *jobs)
    fold(ledger, Admission().decide(ledger, 0))
    out = Scheduler().decide(ledger, 0)
    return ledger, out


def test_the_configuration_carries_per_model_guarantees_in_milli_gpus():
    (conf,) = [e for e in cluster(*NODES, tenants=TENANTS) if isinstance(e, ev.TenantConfigured)]
    assert conf.guaranteed_by_model == {"A100-80GB": 2000}


def test_non_preemptible_work_on_a_model_stays_within_that_models_guarantee():
    ledger, out = decided(
        submitted(id="i1", tenant="serve", gpus=2, models=["A100-80GB"], **{"class": "inference"}),
        submitted(
            id="i2", tenant="serve", gpus=2, models=["A100-80GB"], at_ms=1, **{"class": "inference"}
        ),
        submitted(id="i3", tenant="serve", gpus=2, at_ms=2, **{"class": "inference"}),
    )
    placed = {p.job_id: {m.node for m in p.members} for p in of_type(out, ev.GangPlaced)}
    assert placed == {"i1": {"a100"}, "i3": {"h100"}}  # i3 may use any model: not the A100s
    (wait,) = [e for e in of_type(out, ev.PendingReasonChanged) if e.job_id == "i2"]
    assert wait.reason == "NonPreemptibleOverQuota"
    assert "runs 2 non-preemptible of 2 guaranteed A100-80GB GPUs, job needs 2" in wait.message
    assert wait.details["models_over_guarantee"] == [
        {"model": "A100-80GB", "non_preemptible_gpus": 2.0, "guaranteed_gpus": 2.0}
    ]
    fold(ledger, out)
    assert ledger.sched.tenant_fixed_by_model == {
        ("serve", "A100-80GB"): 2000,
        ("serve", "H100-80GB"): 2000,
    }
    # when i1 ends, its A100 guarantee is free again and i2 starts
    fold(
        ledger,
        [
            started("i1", node="a100"),
            exited("i1", 10, node="a100"),
        ],
    )
    fold(ledger, Scheduler().decide(ledger, 10))
    assert ledger.sched.tenant_fixed_by_model[("serve", "A100-80GB")] == 0
    (p,) = of_type(Scheduler().decide(ledger, 10), ev.GangPlaced)
    assert p.job_id == "i2"


def test_preemptible_work_is_not_bound_by_per_model_guarantees():
    _, out = decided(submitted(id="t1", tenant="serve", gpus=4, models=["A100-80GB"]))
    (p,) = of_type(out, ev.GangPlaced)
    assert p.job_id == "t1"
