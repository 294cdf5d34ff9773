"""Lending and borrowing limits per GPU model: given tenants with per-model guarantees
(`guaranteed_by_model`) and `borrowing_limit_by_model` / `lending_limit_by_model`, when the
quota, scheduler and preemption services decide, then a tenant never uses more of a model
than its guarantee for it plus its per-model borrowing limit, others never take the part of
a tenant's unused guarantee for a model it does not lend, fair shares say the same, work
goes to another allowed model instead, preemption evicts nothing to get past either, and
`check` refuses a per-model limit without a per-model guarantee in one line."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.configfile import config_events, parse
from gpuledger.services.domain.inputs.schema import InputError
from gpuledger.services.domain.policy.quota import fair_shares
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, of_type
from tests.services.test_preemption import QUIET, blocked, running, step, submitted

NODES = (
    {"name": "h100", "gpus": 8, "model": "H100-80GB"},
    {"name": "a100", "gpus": 8, "model": "A100-80GB"},
)
H100 = ["H100-80GB"]


def fleet(*tenants, **policy):
    return cluster(
        *NODES,
        tenants=list(tenants),
        classes=[{"name": "urgent", "value": 200}],
        policy={**QUIET, **policy},
    )


def placed_nodes(out, job_id):
    for e in of_type(out, ev.GangPlaced):
        if e.job_id == job_id:
            return {m.node for m in e.members}
    return None


def reason(out, job_id):
    for e in of_type(out, ev.PendingReasonChanged):
        if e.job_id == job_id:
            return e.reason, e.message
    return None


PROD = {
    "name": "prod",
    "guaranteed": 8,
    "guaranteed_by_model": {"H100-80GB": 8},
    "lending_limit_by_model": {"H100-80GB": 2},
}
RESEARCH = {
    "name": "research",
    "guaranteed": 4,
    "guaranteed_by_model": {"H100-80GB": 2},
    "borrowing_limit_by_model": {"H100-80GB": 2},
}

# ---------------------------------------------------------------- placement


def test_a_tenant_never_uses_more_of_a_model_than_its_guarantee_plus_its_limit_for_it():
    ledger = running(fleet(RESEARCH), submitted(id="own", tenant="research", gpus=4, models=H100))
    fold(ledger, [submitted(at_ms=5, id="more", tenant="research", gpus=2, models=H100)])
    fold(ledger, [submitted(at_ms=6, id="any", tenant="research", gpus=2)])
    out = step(ledger, 10, Admission(), Scheduler())
    # research uses 4 H100 = 2 guaranteed + 2 borrowed: a job that must run on H100 waits
    assert reason(out, "more") == (
        PendingReason.ExceedsLimit,
        "tenant research borrows 2 of its 2-GPU borrowing_limit_by_model for H100-80GB "
        "(uses 4 H100-80GB, guaranteed 2), job needs 2",
    )
    # a job that may use any model goes to the A100s instead
    assert placed_nodes(out, "any") == {"a100"}


def test_others_never_take_the_unused_guarantee_for_a_model_a_tenant_does_not_lend():
    ledger = running(
        fleet(PROD, {"name": "scratch", "guaranteed": 0}),
        submitted(id="s1", tenant="scratch", gpus=2, models=H100),
    )
    fold(ledger, [submitted(at_ms=5, id="s2", tenant="scratch", gpus=1, models=H100)])
    fold(ledger, [submitted(at_ms=6, id="s3", tenant="scratch", gpus=4)])
    out = step(ledger, 10, Admission(), Scheduler())
    # prod lends 2 of its 8 idle H100s: scratch has them; the other 6 stay free for prod
    assert reason(out, "s2") == (
        PendingReason.LendingLimit,
        "tenant scratch would borrow H100-80GB GPUs; 6 of the 6 free H100-80GB GPUs are unused "
        "guarantee not lent: prod keeps 6 (lends 2 of 8 guaranteed H100-80GB, uses 0); "
        "job needs 1",
    )
    assert placed_nodes(out, "s3") == {"a100"}  # the A100s are nobody's per-model guarantee


def test_a_tenant_within_its_own_guarantee_for_the_model_is_not_held_back():
    ledger = running(
        fleet(PROD, RESEARCH), submitted(id="r0", tenant="research", gpus=2, models=["A100-80GB"])
    )
    fold(ledger, [submitted(at_ms=5, id="r1", tenant="research", gpus=2, models=H100)])
    out = step(ledger, 10, Admission(), Scheduler())
    # research is guaranteed 2 H100: prod's hold on its idle H100s does not apply to those
    assert placed_nodes(out, "r1") == {"h100"}


def test_the_owner_uses_what_it_keeps_back():
    ledger = running(fleet(PROD, {"name": "scratch", "guaranteed": 0}))
    fold(ledger, [submitted(at_ms=5, id="p", tenant="prod", gpus=8, models=H100)])
    out = step(ledger, 10, Admission(), Scheduler())
    assert placed_nodes(out, "p") == {"h100"}


def test_preemption_never_evicts_work_to_let_a_job_past_a_per_model_limit():
    ledger = running(
        fleet(RESEARCH, {"name": "other", "guaranteed": 12}),
        submitted(id="own", tenant="research", gpus=4, models=H100),
        submitted(id="o-h", tenant="other", gpus=4, models=H100),
        submitted(id="fill", tenant="research", gpus=8, models=["A100-80GB"]),
    )
    out = blocked(ledger, 10, id="urgent", tenant="research", gpus=2, **{"class": "urgent"})
    # research's smaller H100 job would go first in victim order, but H100 is closed to
    # research by its per-model borrowing limit (it uses 4 = 2 + 2): the A100 job goes
    (req,) = of_type(out, ev.PreemptionRequested)
    assert req.job_id == "fill"


def test_an_elastic_gang_grows_only_as_far_as_per_model_limits_allow():
    ledger = running(
        fleet(RESEARCH),
        submitted(id="hold", tenant="research", gpus=1, replicas=8, models=H100, duration="10m"),
    )
    assert ledger.jobs["hold"].state == "pending"  # 8 H100 > 2 + 2: never placed whole
    fold(
        ledger,
        [
            submitted(
                at_ms=5, id="el", tenant="research", gpus=1, replicas=6, min_members=2,
                models=H100,
            )
        ],
    )  # fmt: skip
    out = step(ledger, 10, Admission(), Scheduler())
    (placed,) = [e for e in of_type(out, ev.GangPlaced) if e.job_id == "el"]
    assert len(placed.members) == 4  # 2 guaranteed + 2 borrowed H100, not 6


# ---------------------------------------------------------------- fair share


def conf(name, guaranteed, by_model, borrowing=None, lending=None):
    return ev.TenantConfigured(
        tenant=name,
        guaranteed_gpu_milli=guaranteed * 1000,
        guaranteed_by_model={m: v * 1000 for m, v in by_model.items()},
        borrowing_limit_by_model=UNSET
        if borrowing is None
        else {m: v * 1000 for m, v in borrowing.items()},
        lending_limit_by_model=UNSET
        if lending is None
        else {m: v * 1000 for m, v in lending.items()},
    )


def test_fair_share_keeps_an_idle_unlent_per_model_guarantee_out_of_the_surplus():
    tenants = {
        "prod": conf("prod", 8, {"H100-80GB": 8}, lending={"H100-80GB": 2}),
        "scratch": conf("scratch", 0, {}),
    }
    models = {"H100-80GB": 8000, "A100-80GB": 8000}

    def share(prod_uses, prod_wants):
        out = fair_shares(
            tenants,
            16_000,
            {},
            {"prod": prod_wants * 1000, "scratch": 16_000},
            {("prod", "H100-80GB"): prod_uses * 1000},
            models,
        )
        return out["scratch"].fair_share_gpu_milli / 1000

    assert share(0, 0) == 10  # prod keeps 6 of its 8 idle H100s
    assert share(4, 4) == 10  # 4 used, 2 lent, 2 kept
    assert share(0, 8) == 8  # prod wants all 8: it keeps nothing idle, shares its guarantee


def test_fair_share_caps_a_tenant_whose_every_model_has_a_per_model_borrowing_limit():
    models = {"H100-80GB": 8000, "A100-80GB": 8000}
    capped = conf(
        "r", 4, {"H100-80GB": 2, "A100-80GB": 2}, borrowing={"H100-80GB": 1, "A100-80GB": 2}
    )
    out = fair_shares({"r": capped}, 16_000, {}, {"r": 16_000}, {}, models)
    assert out["r"].fair_share_gpu_milli == 7000  # (2 + 1) + (2 + 2)
    half = conf("r", 4, {"H100-80GB": 2}, borrowing={"H100-80GB": 1})
    out = fair_shares({"r": half}, 16_000, {}, {"r": 16_000}, {}, models)
    assert out["r"].fair_share_gpu_milli == 16_000  # the A100s are not capped


# ---------------------------------------------------------------- configuration


def test_configuration_carries_per_model_limits_in_milli_gpus_and_encodes_as_before_without():
    (t,) = config_events({"tenants": [PROD]})
    assert t.lending_limit_by_model == {"H100-80GB": 2000}
    assert t.borrowing_limit_by_model is UNSET
    (plain,) = config_events({"tenants": [{"name": "b", "guaranteed": 4}]})
    assert b'"guaranteed_by_model":{}}' in ev.encode(plain)


@pytest.mark.parametrize(
    ("tenant", "problem"),
    [
        (
            {"name": "a", "guaranteed": 4, "lending_limit_by_model": {"H100-80GB": 1}},
            "tenants[0].lending_limit_by_model.H100-80GB: per-model limits apply where "
            "guarantees are per model: add H100-80GB to guaranteed_by_model",
        ),
        (
            {
                "name": "a",
                "guaranteed_by_model": {"H100-80GB": 2},
                "borrowing_limit_by_model": {"A100-80GB": 1},
            },
            "tenants[0].borrowing_limit_by_model.A100-80GB: per-model limits apply where "
            "guarantees are per model: add A100-80GB to guaranteed_by_model (it has H100-80GB)",
        ),
        (
            {
                "name": "a",
                "guaranteed_by_model": {"H100-80GB": 2},
                "lending_limit_by_model": {"h100-80gb": 3},
            },
            "tenants[0].lending_limit_by_model.h100-80gb: 3 GPUs is more than the tenant's "
            "guarantee for h100-80gb (2); a tenant lends at most its unused guarantee",
        ),
        (
            {"name": "a", "borrowing_limit_by_model": {"H100-80GB": -1}},
            "tenants[0].borrowing_limit_by_model",
        ),
    ],
)
def test_check_refuses_a_bad_per_model_limit_with_one_line_naming_it(tenant, problem):
    with pytest.raises(InputError) as err:
        parse({"tenants": [tenant]})
    lines = [p for p in err.value.problems if "tenants[0]" in p]
    assert any(problem in line for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_a_schedule_changing_the_guarantee_keeps_per_model_limits():
    from gpuledger.events import TenantChange
    from gpuledger.services.domain.policy.schedules import changed_tenant

    (base,) = config_events({"tenants": [PROD]})
    after = changed_tenant(base, TenantChange(tenant="prod", guaranteed_gpu_milli=6000))
    assert after.lending_limit_by_model == {"H100-80GB": 2000}
    assert after.borrowing_limit_by_model is UNSET


LAB = {
    "name": "lab",
    "guaranteed": 2,
    "guaranteed_by_model": {"A100-80GB": 2},
    "borrowing_limit_by_model": {"A100-80GB": 0},
}


def test_a_job_is_told_about_the_limit_of_the_model_it_may_use_not_of_others():
    # given lab at its A100 limit (its 2 guaranteed, borrows none) on the 2 H100s prod lends
    ledger = running(
        fleet(PROD, LAB),
        submitted(id="r0", tenant="lab", gpus=2, models=["A100-80GB"]),
        submitted(id="s1", tenant="lab", gpus=2, models=H100),
    )
    # when an H100-only and an A100-only job of lab wait
    fold(ledger, [submitted(at_ms=5, id="h", tenant="lab", gpus=1, models=H100)])
    fold(ledger, [submitted(at_ms=6, id="a", tenant="lab", gpus=1, models=["A100-80GB"])])
    out = step(ledger, 10, Admission(), Scheduler())
    # then each is told about its own model only, whatever order the models are checked in
    h_reason, h_message = reason(out, "h")
    assert h_reason == PendingReason.LendingLimit
    assert "H100-80GB" in h_message and "A100-80GB" not in h_message
    a_reason, a_message = reason(out, "a")
    assert a_reason == PendingReason.ExceedsLimit
    assert "borrowing_limit_by_model for A100-80GB" in a_message and "H100" not in a_message
