"""Lending and borrowing limits (Kueue `lendingLimit` / `borrowingLimit`): given tenants with
`borrowing_limit` and `lending_limit`, when the quota, scheduler and preemption services
decide, then a tenant never uses more than its guarantee plus its borrowing limit, others
never borrow the part of a tenant's unused guarantee it does not lend, fair shares say the
same, and preemption never evicts work to let a job past either limit."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from gpuledger import events as ev
from gpuledger.events import TenantConfigured
from gpuledger.events.reasons import PendingReason, PreemptionReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.configfile import config_events, parse
from gpuledger.services.domain.inputs.schema import InputError
from gpuledger.services.domain.policy.quota import borrowing_limit, fair_shares, lending_limit
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type
from tests.services.test_preemption import QUIET, blocked, running, step, submitted

NODES = {"name_prefix": "n", "count": 2, "gpus": 8, "model": "H100-80GB"}


def fleet(*tenants, **policy):
    return cluster(
        NODES,
        tenants=list(tenants),
        classes=[{"name": "urgent", "value": 200}],
        policy={**QUIET, **policy},
    )


def conf(name, guaranteed, borrowing=None, lending=None, limit=None, weight=1):
    return TenantConfigured(
        tenant=name,
        guaranteed_gpu_milli=guaranteed * 1000,
        limit_gpu_milli=None if limit is None else limit * 1000,
        over_quota_weight=weight,
        borrowing_limit_gpu_milli=UNSET if borrowing is None else borrowing * 1000,
        lending_limit_gpu_milli=UNSET if lending is None else lending * 1000,
    )


def shares(tree, capacity, demand):
    tenants = {t.tenant: t for t in tree}
    out = fair_shares(tenants, capacity * 1000, {}, {t: d * 1000 for t, d in demand.items()})
    return {t: s.fair_share_gpu_milli / 1000 for t, s in out.items()}


def placed_or_reason(out, job_id):
    for e in out:
        if isinstance(e, ev.GangPlaced) and e.job_id == job_id:
            return "placed"
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == job_id:
            return e.reason
    return None


# ---------------------------------------------------------------- fair share


def test_fair_share_stops_at_the_guarantee_plus_the_borrowing_limit():
    # given a borrows at most 2 above its 4 guaranteed; b is idle
    tree = [conf("a", 4, borrowing=2), conf("b", 8), conf("c", 0)]
    # when a and c want everything, then a's share is 6 and c takes the rest
    assert shares(tree, 16, {"a": 16, "b": 0, "c": 16}) == {"a": 6, "b": 0, "c": 10}


def test_fair_share_keeps_the_unlent_part_of_an_idle_guarantee_out_of_the_surplus():
    # given b lends at most 2 of its 8 guaranteed and uses none of it
    tree = [conf("a", 4), conf("b", 8, lending=2)]
    # then a gets its 4 plus the 2 lent plus the 4 nobody is guaranteed: 10, not 16
    assert shares(tree, 16, {"a": 16, "b": 0}) == {"a": 10, "b": 0}
    # and once b uses 5 of its guarantee, only 1 unused GPU stays unlent
    assert shares(tree, 16, {"a": 16, "b": 5}) == {"a": 10, "b": 5}
    assert shares(tree, 16, {"a": 16, "b": 7}) == {"a": 9, "b": 7}


def test_fair_share_without_limits_is_unchanged():
    tree = [conf("a", 4), conf("b", 8)]
    assert shares(tree, 16, {"a": 16, "b": 0}) == {"a": 16, "b": 0}


# ---------------------------------------------------------------- placement


def test_a_tenant_never_borrows_more_than_its_borrowing_limit():
    # given a (4 guaranteed, borrowing_limit 2) runs 4 on its guarantee; 12 GPUs are free
    cfg = fleet(
        {"name": "a", "guaranteed": 4, "borrowing_limit": 2}, {"name": "b", "guaranteed": 8}
    )
    ledger = running(cfg, submitted(id="own", tenant="a", gpus=4))
    # when it submits 3 more GPUs (borrowing 3) and then 2 (borrowing 2)
    fold(ledger, [submitted(at_ms=5, id="three", tenant="a", gpus=3)])
    fold(ledger, [submitted(at_ms=6, id="two", tenant="a", gpus=2)])
    out = step(ledger, 10, Admission(), Scheduler())
    # then the 3-GPU job waits with ExceedsLimit naming the borrowing limit; the 2-GPU runs
    (pending,) = of_type(out, ev.PendingReasonChanged)
    assert (pending.job_id, pending.reason) == ("three", PendingReason.ExceedsLimit)
    assert pending.message == (
        "tenant a borrows 0 of its 2-GPU borrowing_limit (uses 4, guaranteed 4), job needs 3"
    )
    (placed,) = of_type(out, ev.GangPlaced)
    assert (placed.job_id, placed.borrowing) == ("two", True)
    assert ledger.jobs["three"].reason == PendingReason.ExceedsLimit


def test_others_never_borrow_the_unused_guarantee_a_tenant_does_not_lend():
    # given b is guaranteed 8 and lends at most 2 of it; b runs nothing; a runs its own 8
    cfg = fleet({"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 8, "lending_limit": 2})
    ledger = running(cfg, submitted(id="own", tenant="a", gpus=8))
    # when a wants to borrow 4 more, then it waits: 6 of the 8 free GPUs are not lent
    fold(ledger, [submitted(at_ms=5, id="four", tenant="a", gpus=4)])
    out = step(ledger, 10, Admission(), Scheduler())
    (pending,) = of_type(out, ev.PendingReasonChanged)
    assert pending.reason == PendingReason.LendingLimit
    assert pending.message == (
        "tenant a would borrow; 6 of the 8 free GPUs are unused guarantee not lent: b keeps 6 "
        "(lends 2 of 8 guaranteed, uses 0); job needs 4"
    )
    assert pending.details["held_by"] == {"b": 6000}
    # and 2 GPUs (what b lends) may be borrowed
    fold(ledger, [submitted(at_ms=11, id="two", tenant="a", gpus=2)])
    out = step(ledger, 12, Admission(), Scheduler())
    assert placed_or_reason(out, "two") == "placed"
    assert ledger.jobs["four"].state == "pending"


def test_a_tenant_under_its_guarantee_is_not_held_back_by_others_lending_limits():
    # given b keeps all of its unused guarantee (lending_limit 0); a is guaranteed 8
    cfg = fleet({"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 8, "lending_limit": 0})
    ledger = given(*cfg, submitted(id="mine", tenant="a", gpus=8))
    out = step(ledger, 10, Admission(), Scheduler())
    # then a's work within its own guarantee is placed, not borrowing
    (placed,) = of_type(out, ev.GangPlaced)
    assert (placed.job_id, placed.borrowing) == ("mine", False)


def test_a_child_borrows_from_its_parents_guarantee_whatever_the_parents_lending_limit():
    # given org lends nothing outside (lending_limit 0 of 12) and org/x is guaranteed 2
    cfg = fleet(
        {"name": "org", "guaranteed": 12, "lending_limit": 0},
        {"name": "org/x", "guaranteed": 2},
        {"name": "c", "guaranteed": 4},
    )
    ledger = given(*cfg, submitted(id="x", tenant="org/x", gpus=6))
    fold(ledger, [submitted(at_ms=1, id="c-own", tenant="c", gpus=4)])
    fold(ledger, [submitted(at_ms=2, id="c-more", tenant="c", gpus=1)])
    out = step(ledger, 10, Admission(), Scheduler())
    # then org/x borrows 4 inside org; c runs its guarantee but may not borrow org's 6 idle
    assert placed_or_reason(out, "x") == "placed"
    assert placed_or_reason(out, "c-own") == "placed"
    assert placed_or_reason(out, "c-more") == PendingReason.LendingLimit
    assert ledger.jobs["c-more"].details["held_by"] == {"org": 6000}


# ---------------------------------------------------------------- preemption and reclaim


def test_preemption_never_evicts_work_to_let_a_job_past_its_borrowing_limit():
    # given b's low-priority work fills its node; a (0 guaranteed, borrowing_limit 4) runs 4
    cfg = fleet(
        {"name": "a", "guaranteed": 0, "borrowing_limit": 4}, {"name": "b", "guaranteed": 16}
    )
    ledger = running(
        cfg, submitted(id="a-run", tenant="a", gpus=4), submitted(id="b-run", tenant="b", gpus=8)
    )
    # when an urgent job of a would borrow 4 more
    out = blocked(ledger, 10, id="urgent", tenant="a", gpus=4, **{"class": "urgent"})
    # then it waits with ExceedsLimit and preemption evicts nothing for it
    assert ledger.jobs["urgent"].reason == PendingReason.ExceedsLimit
    assert of_type(out, ev.PreemptionRequested) == []


def test_a_tenant_with_a_lending_limit_reclaims_what_it_lent():
    # given b lends 2 of its 8 and a borrowed exactly those 2 beyond its own 8
    cfg = fleet({"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 8, "lending_limit": 2})
    ledger = running(
        cfg,
        submitted(id="a-own", tenant="a", gpus=8),
        submitted(at_ms=1, id="a-lent", tenant="a", gpus=2),
    )
    assert ledger.allocations[ledger.jobs["a-lent"].allocation_id].borrowing
    # when b needs all its 8 guaranteed GPUs
    out = blocked(ledger, 10, id="b-all", tenant="b", gpus=8)
    # then the borrower gives them back (Reclaim), whatever the priorities
    (req,) = of_type(out, ev.PreemptionRequested)
    assert (req.job_id, req.reason) == ("a-lent", PreemptionReason.Reclaim)


# ---------------------------------------------------------------- configuration


def test_configuration_carries_both_limits_in_milli_gpus():
    (t,) = config_events(
        {
            "tenants": [
                {"name": "a", "guaranteed": 4, "borrowing_limit": "1500m", "lending_limit": 1}
            ]
        }
    )
    assert (t.borrowing_limit_gpu_milli, t.lending_limit_gpu_milli) == (1500, 1000)
    (plain,) = config_events({"tenants": [{"name": "b", "guaranteed": 4}]})
    assert (borrowing_limit(plain), lending_limit(plain)) == (None, None)
    # a tenant without either limit encodes as before the fields existed
    assert b'limit_gpu_milli":null,"over_quota_weight":1,"guaranteed_by_model":{}}' in (
        ev.encode(plain)
    )


@pytest.mark.parametrize(
    ("tenant", "problem"),
    [
        (
            {"name": "a", "guaranteed": 4, "lending_limit": 6},
            "tenants[0].lending_limit: 6 GPUs is more than the tenant's guarantee (4); "
            "a tenant lends at most its unused guarantee",
        ),
        ({"name": "a", "borrowing_limit": -1}, "tenants[0].borrowing_limit"),
        ({"name": "a", "lending_limit": "lots"}, "tenants[0].lending_limit"),
    ],
)
def test_check_refuses_a_bad_limit_with_one_line_naming_it(tenant, problem):
    with pytest.raises(InputError) as err:
        parse({"tenants": [tenant]})
    (line,) = [p for p in err.value.problems if "tenants[0]" in p]
    assert problem in line and "\n" not in line


def test_a_schedule_changing_the_guarantee_keeps_both_limits():
    from gpuledger.events import TenantChange
    from gpuledger.services.domain.policy.schedules import changed_tenant

    base = conf("a", 4, borrowing=2, lending=1)
    after = changed_tenant(base, TenantChange(tenant="a", guaranteed_gpu_milli=6000))
    assert (after.guaranteed_gpu_milli, borrowing_limit(after), lending_limit(after)) == (
        6000,
        2000,
        1000,
    )
    plain = changed_tenant(conf("b", 4), TenantChange(tenant="b", guaranteed_gpu_milli=2000))
    assert plain.borrowing_limit_gpu_milli is UNSET and plain.lending_limit_gpu_milli is UNSET
