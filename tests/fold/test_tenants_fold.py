"""The tenants fold (services/domain/fold/tenants.py): configuration, fair shares, and each
tenant's capacity in use, in all, per model and non-preemptible."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold import tenants
from tests.fold.story import admitted, given, node, placed, submitted, when


def test_the_tenants_fold_handles_the_configuration_events():
    assert {ev.TenantConfigured, ev.PolicyConfigured, ev.FairShareUpdated} <= set(
        tenants.FOLD.handlers
    )


def test_non_preemptible_work_counts_as_fixed_use_per_model_and_is_given_back():
    # given a non-preemptible job of 8 GPUs
    ledger = given(node(), submitted("a"), admitted("a", preemptible=False))
    # when it is placed
    when(ledger, placed("a"))
    # then its tenant's use, per model and fixed, counts it
    assert ledger.tenant_gpu_milli == {"org/a": 8000}
    assert ledger.sched.tenant_fixed_gpu_milli == {"org/a": 8000}
    assert ledger.sched.tenant_fixed_by_model == {("org/a", "H100-80GB"): 8000}
    # when it fails
    when(
        ledger,
        ev.GangFailed(
            job_id="a", allocation_id="a#1", reason="Crash", message="boom", producer="scheduler/0"
        ),
    )
    # then its tenant uses nothing
    assert ledger.sched.tenant_fixed_gpu_milli == {"org/a": 0}
    assert ledger.sched.tenant_fixed_by_model == {("org/a", "H100-80GB"): 0}
    assert ledger.jobs["a"].state == "failed" and ledger.jobs["a"].message == "boom"


def test_decayed_usage_accrues_at_the_rate_in_use():
    # given usage decay on (a half-life of an hour) and a job of 8 GPUs running from 0
    policy = ev.PolicyConfigured(policy=ev.Policy(usage_half_life_s=3600))
    ledger = given(node(), policy, submitted("a"), admitted("a"), placed("a", at=0))
    # when a minute has passed, then its tenant has used about 8 GPU-minutes
    used = ledger.usage_at("org/a", 60_000)
    assert 8000 * 60_000 * 0.99 < used <= 8000 * 60_000
    assert ledger.usage_at("org/b", 60_000) == 0


def test_a_fair_share_update_replaces_the_shares():
    share = ev.TenantShare(
        tenant="org/a",
        guaranteed_gpu_milli=0,
        fair_share_gpu_milli=500,
        allocated_gpu_milli=0,
        demand_gpu_milli=0,
    )
    ledger = given(ev.FairShareUpdated(shares=(share,), producer="quota/0"))
    assert ledger.fair_shares == {"org/a": share}
