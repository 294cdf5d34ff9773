"""The `slurm` queue-order and preemption profile (`policy.profile: slurm`, issue 41): given a
cluster with two overlapping Slurm partitions (`low`, tier 1, preemptable; `high`, tier 10,
`PreemptMode=OFF`), when the scheduler orders the queue and the preemption service decides,
then pending jobs go by partition tier, then Slurm's multifactor job priority (or submit
order under `priority/basic`), and a higher tier's blocked job preempts lower-tier running
jobs (or, under `preempt/qos`, the QOS its QOS lists), protected only by the site's
`PreemptExemptTime` and what a variant turns on."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.events.reasons import DeclineReason, ExclusionReason, PreemptionReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.policy import slurm_priority
from gpuledger.services.domain.policy.queue import ordered_pending
from gpuledger.services.preemption import rules
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type, submitted
from tests.services.test_preemption import start, step

LOW = {"partition.low": "true"}
HIGH = {"partition.high": "true"}
NODE = {"name": "n1", "gpus": 4, "cpu": 16, "labels": {**LOW, **HIGH}}
CLASSES = [
    {"name": "normal", "value": 50},
    {"name": "big", "value": 100},
    {"name": "scav", "value": 10},
]
SITE = {
    "multifactor": False,
    "preempt": "partition_prio",
    "partitions": {"low": {"tier": 1}, "high": {"tier": 10, "preemptable": False}},
    "default_partition": "low",
    "qos": {"normal": {"priority": 0}},
}
IMPORTED = {  # what an import of such a site records: gpuledger's protections off
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
    "profile": "slurm",
}


def site(tenants=({"name": "a"}, {"name": "b"}), nodes=(NODE,), **policy):
    slurm = {**SITE, **policy.pop("slurm", {})}
    return cluster(
        *nodes,
        tenants=list(tenants),
        classes=CLASSES,
        policy={**IMPORTED, "slurm": slurm, **policy},
    )


def queued(cfg, *jobs, at=0):
    ledger = given(*cfg)
    fold(ledger, [submitted(at_ms=i, **j) for i, j in enumerate(jobs)])
    fold(ledger, Admission().decide(ledger, at))
    return ledger


def order(ledger, at):
    return [j.job_id for j in ordered_pending(ledger, at)]


# ---------------------------------------------------------------- queue order


def test_a_higher_tier_goes_first_then_submit_order_under_basic():
    ledger = queued(
        site(),
        {"id": "early-low", "tenant": "a", "gpus": 1, "class": "big", "node_selector": LOW},
        {"id": "late-low", "tenant": "a", "gpus": 1, "class": "scav", "node_selector": LOW},
        {"id": "late-high", "tenant": "b", "gpus": 1, "class": "scav", "node_selector": HIGH},
        {"id": "default", "tenant": "b", "gpus": 1, "class": "big"},  # no selector: low
    )
    # class values do not matter under priority/basic: tier, then first come first served
    assert order(ledger, 10) == ["late-high", "early-low", "late-low", "default"]


def test_under_preempt_qos_jobs_that_can_preempt_go_first():
    qos = {"big": {"priority": 1, "preempt": ["scav"]}, "normal": {"priority": 100}}
    cfg = site(slurm={"preempt": "qos", "qos": qos, "multifactor": True,
                      "weights": {"qos": 1000}, "calc_period_s": 1})  # fmt: skip
    ledger = queued(
        cfg,
        {"id": "high-prio", "tenant": "a", "gpus": 1, "class": "normal"},
        {"id": "preemptor", "tenant": "a", "gpus": 1, "class": "big"},
    )
    # a lower job priority, but its QOS may preempt: Slurm evaluates it first
    assert order(ledger, 10) == ["preemptor", "high-prio"]


def test_equal_priorities_and_submit_times_go_by_numeric_job_id():
    ledger = queued(site())
    fold(ledger, [submitted(at_ms=0, id=i, tenant="a", gpus=1) for i in ("15", "4", "27")])
    fold(ledger, Admission().decide(ledger, 0))
    # as Slurm's job ids: 4 before 15 before 27 (as text, 15 would sort first)
    assert order(ledger, 10) == ["4", "15", "27"]
    assert slurm_priority.id_key("4@0") < slurm_priority.id_key("4@1") < slurm_priority.id_key("15")


def test_priorities_are_recomputed_once_per_calc_period():
    # PriorityCalcPeriod=1 (minute): the age factor moves only at the period's start
    cfg = site(slurm={"multifactor": True, "weights": {"age": 1000}, "max_age_s": 600,
                      "calc_period_s": 60})  # fmt: skip
    ledger = queued(cfg, {"id": "j", "tenant": "a", "gpus": 1})
    prof, job = slurm_priority.profile(ledger), ledger.jobs["j"]
    assert slurm_priority.job_priority(ledger, job, 59_000, prof, {}) == 0
    assert slurm_priority.job_priority(ledger, job, 60_000, prof, {}) == 1000 * 100  # 60/600
    assert slurm_priority.job_priority(ledger, job, 119_999, prof, {}) == 1000 * 100


def test_native_order_is_unchanged_without_the_profile():
    cfg = cluster(
        NODE, tenants=[{"name": "a"}], classes=CLASSES, policy=dict(IMPORTED, profile="native")
    )
    ledger = queued(
        cfg,
        {"id": "low-class", "tenant": "a", "gpus": 1, "class": "scav", "node_selector": HIGH},
        {"id": "high-class", "tenant": "a", "gpus": 1, "class": "big", "node_selector": LOW},
    )
    assert order(ledger, 10) == ["high-class", "low-class"]


def test_multifactor_priority_is_the_weighted_sum_of_its_factors():
    # given QOS priorities 0 / 100 and weights qos 1000, age 100 (max age 100 s),
    # jobsize 10 (the larger of a job's node and CPU fractions: one of two nodes, half)
    cfg = site(
        nodes=(NODE, {**NODE, "name": "n2"}),
        slurm={
            "multifactor": True,
            "weights": {"qos": 1000, "age": 100, "jobsize": 10},
            "max_age_s": 100,
            "calc_period_s": 1,
            "qos": {"normal": {"priority": 0}, "big": {"priority": 100}},
        },
    )
    ledger = queued(
        cfg,
        {"id": "old", "tenant": "a", "gpus": 2, "cpu": 8, "class": "normal"},
        {"id": "vip", "tenant": "a", "gpus": 1, "cpu": 1, "class": "big"},
    )
    prof = slurm_priority.profile(ledger)
    at = 50_000  # both admitted at 0: half their maximum age
    old, vip = ledger.jobs["old"], ledger.jobs["vip"]
    # then priority (milli-units) = 100 x age + 10 x size + 1000 x qos
    assert slurm_priority.job_priority(ledger, old, at, prof, {}) == 100 * 500 + 10 * 500
    assert slurm_priority.job_priority(ledger, vip, at, prof, {}) == (
        100 * 500 + 10 * 500 + 1000 * 1000
    )
    assert order(ledger, at) == ["vip", "old"]


def test_fair_share_is_two_to_the_minus_usage_over_shares():
    cfg = site(tenants=[{"name": "a", "weight": 3}, {"name": "b", "weight": 1}])
    ledger = given(*cfg)
    # a holds 3/4 of the shares; with half the usage its factor is 2^(-0.5/0.75)
    usage = {"a": 50, "b": 50}
    assert slurm_priority.fairshare_milli(ledger, "a", usage) == 629
    assert slurm_priority.fairshare_milli(ledger, "b", usage) == 250  # 2^(-0.5/0.25)
    assert slurm_priority.fairshare_milli(ledger, "a", {}) == 1000  # nobody used anything


def test_more_fair_share_goes_first_within_a_tier():
    cfg = site(
        tenants=[{"name": "a", "weight": 1}, {"name": "b", "weight": 1}],
        usage_half_life_s=3600,
        slurm={"multifactor": True, "weights": {"fairshare": 1000}, "calc_period_s": 60},
    )
    ledger = queued(
        cfg,
        {"id": "a-run", "tenant": "a", "gpus": 4, "duration": "10m"},
    )
    fold(ledger, Scheduler().decide(ledger, 0))
    start(ledger, 0)
    fold(ledger, [submitted(at_ms=1000, id="a-next", tenant="a", gpus=1)])
    fold(ledger, [submitted(at_ms=2000, id="b-next", tenant="b", gpus=1)])
    fold(ledger, Admission().decide(ledger, 2000))
    # a has used GPUs, b has not: b's later job goes first
    assert order(ledger, 600_000) == ["b-next", "a-next"]


# ---------------------------------------------------------------- preemption


def running_low(cfg, at=0):
    """The node's 4 GPUs held by a `low` job started at `at`; a `high` job then blocked."""
    ledger = queued(cfg, {"id": "victim", "tenant": "a", "gpus": 4, "node_selector": LOW})
    step(ledger, at, Scheduler())
    start(ledger, at)
    fold(ledger, [submitted(at_ms=at + 1, id="urgent", tenant="b", gpus=4, node_selector=HIGH)])
    fold(ledger, Admission().decide(ledger, at + 1))
    step(ledger, at + 2, Scheduler())
    return ledger


def test_a_higher_tier_job_preempts_a_lower_tier_running_job():
    ledger = running_low(site())
    out = step(ledger, 3000, Preemption())
    (req,) = of_type(out, ev.PreemptionRequested)
    assert (req.job_id, req.beneficiary, req.reason) == (
        "victim",
        "urgent",
        PreemptionReason.Priority,
    )


def test_site_preempts_a_lower_tier_never_a_higher_one():
    ledger = running_low(site())
    s = rules.Scene(ledger, ledger.jobs["urgent"], 3000, {}, False, frozenset())
    assert rules.grounds(ledger) == rules.SLURM_GROUNDS
    assert rules.site_preempts(s, ledger.jobs["victim"], True)
    # the other way round: a low job never preempts a high one
    back = rules.Scene(ledger, ledger.jobs["victim"], 3000, {}, False, frozenset())
    assert not rules.site_preempts(back, ledger.jobs["urgent"], True)


def test_a_partition_with_preempt_mode_off_is_never_preempted():
    cfg = site(
        slurm={"partitions": {"low": {"tier": 1, "preemptable": False}, "high": {"tier": 10}}}
    )
    ledger = running_low(cfg)
    out = step(ledger, 3000, Preemption())
    assert not of_type(out, ev.PreemptionRequested)
    (d,) = of_type(out, ev.PreemptionDeclined)
    assert d.reason == DeclineReason.NoVictims


def test_preempt_exempt_time_protects_a_young_run_until_it_lapses():
    ledger = running_low(site(min_runtime_s=60))  # PreemptExemptTime=00:01:00
    out = step(ledger, 3000, Preemption())
    (d,) = of_type(out, ev.PreemptionDeclined)
    (x,) = d.details["excluded"]
    assert x["reason"] == ExclusionReason.MinRuntime and "of the 60s minimum" in x["message"]
    later = step(ledger, 61_000, Preemption())
    assert [e.job_id for e in of_type(later, ev.PreemptionRequested)] == ["victim"]


def test_under_preempt_qos_the_qos_preempt_list_decides():
    qos = {"big": {"priority": 100, "preempt": ["scav"]}, "scav": {"priority": 1}}
    cfg = site(slurm={"preempt": "qos", "qos": qos})
    ledger = queued(cfg, {"id": "victim", "tenant": "a", "gpus": 4, "class": "scav"})
    step(ledger, 0, Scheduler())
    start(ledger, 0)
    fold(ledger, [submitted(at_ms=1, id="vip", tenant="b", gpus=4, **{"class": "big"})])
    fold(ledger, Admission().decide(ledger, 1))
    step(ledger, 2, Scheduler())
    out = step(ledger, 3000, Preemption())
    assert [(e.job_id, e.beneficiary) for e in of_type(out, ev.PreemptionRequested)] == [
        ("victim", "vip")
    ]


def test_guarantees_do_not_protect_under_the_profile():
    # a's guarantee covers its job: natively `WithinGuarantee` would protect it
    ledger = running_low(site(tenants=[{"name": "a", "guaranteed": 4}, {"name": "b"}]))
    out = step(ledger, 3000, Preemption())
    assert [e.job_id for e in of_type(out, ev.PreemptionRequested)] == ["victim"]
