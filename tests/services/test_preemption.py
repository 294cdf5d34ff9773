"""Preemption policy, one rule at a time: given running work and a blocked job, when the
preemption service decides, then the victim a rule protects is excluded with that rule's
code (in `PreemptionDeclined` details) and eligible victims are offered in the order the
keys of `services.preemption.rules.ORDER` say.

One test per exclusion rule, per ground and per order key; `test_every_rule_has_a_test`
keeps it that way."""

from __future__ import annotations

import sys

from gpuledger import events as ev
from gpuledger.events.reasons import DeclineReason, ExclusionReason, PreemptionReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.preemption import rules
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.preemption.victims import Exclusion, candidates
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, exit_all, fold, given, of_type, stamped, submitted

QUIET = {
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
}
"""Every time-based protection off: each test switches on only the rule it is about."""
NODE = {"name_prefix": "n", "count": 1, "gpus": 8, "model": "H100-80GB"}
CLASSES = [{"name": "urgent", "value": 200}, {"name": "scavenger", "value": 10}]


def fleet(tenants=({"name": "a", "guaranteed": 8},), nodes=1, **policy):
    return cluster(
        {**NODE, "count": nodes}, tenants=list(tenants), classes=CLASSES, policy={**QUIET, **policy}
    )


def step(ledger, at, *deciders):
    """Run each decider at `at` and fold what it decides; returns the events."""
    out = []
    for d in deciders:
        new = d.decide(ledger, at)
        fold(ledger, new)
        out += new
    return out


def start(ledger, at, job_id=None):
    """Every member of allocations awaiting start (of `job_id`, if given) starts at `at`."""
    for alloc_id in sorted(ledger.awaiting_start):
        rec = ledger.allocations[alloc_id]
        if job_id is None or rec.job_id == job_id:
            fold(
                ledger,
                [
                    stamped(
                        ev.MemberStarted,
                        f"start-{alloc_id}-{m.rank}",
                        at,
                        job_id=rec.job_id,
                        allocation_id=alloc_id,
                        rank=m.rank,
                        node=m.node,
                    )
                    for m in rec.members
                ],
            )


def running(cfg, *jobs, at=0):
    """Given the fleet `cfg`, the jobs are admitted, placed and started at `at`."""
    ledger = given(*cfg, *jobs)
    step(ledger, at, Admission(), Scheduler())
    start(ledger, at)
    return ledger


def blocked(ledger, at, **job):
    """A job arrives at `at`, is admitted and left pending by the scheduler, then the
    preemption service decides: its output."""
    fold(ledger, [submitted(at_ms=at, **job)])
    step(ledger, at, Admission(), Scheduler())
    assert ledger.jobs[job["id"]].state == "pending", "the job must be blocked"
    return Preemption().decide(ledger, at)


def declined(out):
    (d,) = of_type(out, ev.PreemptionDeclined)
    return d


def excluded(d):
    return [(x["job"], x["reason"]) for x in d.details["excluded"]]


# ---------------------------------------------------------------- grounds


def test_priority_a_lower_priority_job_of_the_tenant_is_evicted():
    ledger = running(fleet(), submitted(id="low", tenant="a", gpus=8))
    (req,) = of_type(
        blocked(ledger, 10, id="high", tenant="a", gpus=8, **{"class": "interactive"}),
        ev.PreemptionRequested,
    )
    assert (req.job_id, req.beneficiary, req.reason) == ("low", "high", PreemptionReason.Priority)


def test_reclaim_a_borrowing_tenant_gives_back_capacity_whatever_the_priorities():
    cfg = fleet(tenants=[{"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 0}])
    ledger = running(cfg, submitted(id="borrower", tenant="b", gpus=8, **{"class": "urgent"}))
    (req,) = of_type(blocked(ledger, 10, id="owner", tenant="a", gpus=8), ev.PreemptionRequested)
    assert (req.job_id, req.reason) == ("borrower", PreemptionReason.Reclaim)


# ---------------------------------------------------------------- exclusions


def test_non_preemptible_work_is_never_evicted():
    ledger = running(fleet(), submitted(id="builder", tenant="a", gpus=8, **{"class": "build"}))
    d = declined(blocked(ledger, 10, id="hot", tenant="a", gpus=8, **{"class": "urgent"}))
    assert d.reason == DeclineReason.NoVictims
    assert excluded(d) == [("builder", ExclusionReason.NonPreemptible)]
    assert "class build is not preemptible" in d.details["excluded"][0]["message"]


LIMITED = {"duration": "1h", "time_limit": "10m", "checkpoint": {"interval": "1m", "grace": "2m"}}
"""A run stopped at its 10-minute time limit; an eviction would give it 2 minutes."""


def test_ends_at_time_limit_a_run_reaching_its_limit_within_the_grace_is_not_evicted():
    ledger = running(fleet(), submitted(id="ending", tenant="a", gpus=8, **LIMITED))
    d = declined(blocked(ledger, 540_000, id="high", tenant="a", gpus=8, **{"class": "urgent"}))
    # at 9 min its limit (10 min) comes before an eviction's deadline (9 + 2 min)
    assert d.reason == DeclineReason.EndsAtTimeLimit
    assert excluded(d) == [("ending", ExclusionReason.EndsAtTimeLimit)]
    assert "reaches its 10m time limit at t+10m" in d.details["excluded"][0]["message"]
    assert "within the 2m grace an eviction would give it" in d.message


def test_ends_at_time_limit_a_run_far_from_its_limit_is_evicted_as_before():
    ledger = running(fleet(), submitted(id="ending", tenant="a", gpus=8, **LIMITED))
    out = blocked(ledger, 420_000, id="high", tenant="a", gpus=8, **{"class": "urgent"})
    (req,) = of_type(out, ev.PreemptionRequested)  # at 7 min: 3 min left > 2 min grace
    assert (req.job_id, req.reason) == ("ending", PreemptionReason.Priority)


def test_ends_at_time_limit_a_run_already_stopping_at_its_limit_is_not_evicted():
    ledger = running(fleet(), submitted(id="ending", tenant="a", gpus=8, **LIMITED))
    (reached,) = of_type(step(ledger, 600_000, Scheduler()), ev.TimeLimitReached)
    d = declined(blocked(ledger, 610_000, id="high", tenant="a", gpus=8, **{"class": "urgent"}))
    assert excluded(d) == [("ending", ExclusionReason.EndsAtTimeLimit)]
    assert (
        "already stopping at its 10m time limit: its GPUs are free by t+12m"
        in d.details["excluded"][0]["message"]
    )
    assert reached.deadline_ms == 720_000


def test_ends_at_time_limit_victim_selection_takes_the_run_that_would_not_end_by_itself():
    """Two 4-GPU runs of the same priority: the one ending at its limit has less work at risk
    (it checkpointed more recently) and would go first by the victim order; it is spared and
    the other is evicted."""
    ledger = running(
        fleet(),
        submitted(id="ending", tenant="a", gpus=4, **LIMITED),
        submitted(id="open", tenant="a", gpus=4, duration="1h",
                  checkpoint={"interval": "1h", "grace": "2m"}),
    )  # fmt: skip
    out = blocked(ledger, 540_000, id="high", tenant="a", gpus=4, **{"class": "urgent"})
    (req,) = of_type(out, ev.PreemptionRequested)
    assert req.job_id == "open"
    assert ("ending", ExclusionReason.EndsAtTimeLimit) in [
        (x["job"], x["reason"]) for x in req.details["excluded"]
    ]


def test_aged_a_job_aging_lifted_to_the_blocked_jobs_class_is_not_evicted_by_it():
    cfg = fleet(aging_after_wait_s=100)
    ledger = given(*cfg, submitted(id="patient", tenant="a", gpus=8))
    step(ledger, 0, Admission())
    step(ledger, 120_000, Scheduler())  # placed after 120 s queued: one step, train -> interactive
    start(ledger, 120_000)
    d = declined(
        blocked(ledger, 130_000, id="next", tenant="a", gpus=8, **{"class": "interactive"})
    )
    assert excluded(d) == [("patient", ExclusionReason.Aged)]
    assert "aged from priority 50 to 75" in d.details["excluded"][0]["message"]


def test_preemption_loop_a_job_never_evicts_the_job_that_evicted_it_within_the_hour():
    tenants = [{"name": "a", "guaranteed": 0}, {"name": "b", "guaranteed": 0}]
    ledger = running(fleet(tenants=tenants), submitted(id="first", tenant="a", gpus=8))
    # b's interactive job evicts a's borrowing train job across tenants (scope cluster)
    (req,) = of_type(
        blocked(ledger, 10, id="second", tenant="b", gpus=8, **{"class": "interactive"}),
        ev.PreemptionRequested,
    )
    fold(ledger, [req])
    exit_all(ledger, "first", "preempted", 20)
    step(ledger, 20, Scheduler())  # evicted and requeued
    step(ledger, 30, Scheduler())  # second lands
    start(ledger, 30, "second")
    assert ledger.jobs["second"].state == "running" and ledger.jobs["first"].state == "pending"
    # a's guarantee is raised: "first" could now reclaim from borrowing b
    for e in fleet(tenants=[{"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 0}]):
        if isinstance(e, ev.TenantConfigured):
            fold(ledger, [e])
    step(ledger, 40, Scheduler())
    d = declined(Preemption().decide(ledger, 40))
    assert excluded(d) == [("second", ExclusionReason.PreemptionLoop)]
    assert (
        "second evicted first within the last hour"
        in d.message + d.details["excluded"][0]["message"]
    )


def test_min_runtime_work_younger_than_the_minimum_keeps_running_until_it_lapses():
    ledger = running(fleet(min_runtime_s=300), submitted(id="young", tenant="a", gpus=8))
    d = declined(blocked(ledger, 60_000, id="high", tenant="a", gpus=8, **{"class": "interactive"}))
    assert d.reason == DeclineReason.MinRuntime  # room exists, only behind a lapsing rule
    assert excluded(d) == [("young", ExclusionReason.MinRuntime)]
    assert d.details["excluded"][0]["eligible_at_s"] == 300.0
    assert "ran 60s of the 300s minimum" in d.message


def test_min_runtime_does_not_protect_a_borrower_that_started_while_the_reclaimer_waited():
    """Given b (guaranteed 0) running two 4-GPU jobs since 0 and a (guaranteed 8) waiting
    since 10 s for the whole node (both victims protected until 300 s), when one of b's jobs
    ends at 100 s and b's next 4-GPU job takes its place, then at 300 s a reclaims both: the
    newcomer started borrowing while a waited, so its minimum runtime (until 400 s) does not
    count against a — the reclaim bound counts only work that ran before a arrived."""
    tenants = [{"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 0}]
    ledger = running(
        fleet(tenants=tenants, min_runtime_s=300),
        submitted(id="old1", tenant="b", gpus=4),
        submitted(id="old2", tenant="b", gpus=4),
    )
    d = declined(blocked(ledger, 10_000, id="owner", tenant="a", gpus=8))
    assert d.reason == DeclineReason.MinRuntime
    exit_all(ledger, "old1", "completed", 100_000)
    fold(ledger, [submitted(at_ms=100_000, id="late", tenant="b", gpus=4)])
    step(ledger, 100_000, Admission(), Scheduler())  # admits late, settles old1
    step(ledger, 100_000, Scheduler())  # a's 8 GPUs do not fit in 4; b's next job does
    start(ledger, 100_000, "late")
    assert ledger.jobs["late"].state == "running" and ledger.jobs["owner"].state == "pending"
    reqs = of_type(Preemption().decide(ledger, 300_000), ev.PreemptionRequested)
    assert sorted((r.job_id, r.reason) for r in reqs) == [
        ("late", PreemptionReason.Reclaim),
        ("old2", PreemptionReason.Reclaim),
    ]


def test_eviction_budget_a_job_evicted_as_often_as_the_budget_allows_is_spared():
    ledger = running(fleet(eviction_budget_per_hour=1), submitted(id="low", tenant="a", gpus=8))
    (req,) = of_type(
        blocked(ledger, 1000, id="hi1", tenant="a", gpus=8, **{"class": "interactive"}),
        ev.PreemptionRequested,
    )
    fold(ledger, [req])
    exit_all(ledger, "low", "preempted", 2000)
    step(ledger, 2000, Scheduler())
    step(ledger, 3000, Scheduler())
    start(ledger, 3000, "hi1")
    exit_all(ledger, "hi1", "completed", 4000)
    step(ledger, 4000, Scheduler())
    step(ledger, 5000, Scheduler())  # low runs again
    start(ledger, 5000, "low")
    assert ledger.jobs["low"].state == "running"
    d = declined(blocked(ledger, 6000, id="hi2", tenant="a", gpus=8, **{"class": "interactive"}))
    assert d.reason == DeclineReason.EvictionBudget
    assert excluded(d) == [("low", ExclusionReason.EvictionBudget)]
    assert d.details["excluded"][0]["eligible_at_s"] == (1000 + 3_600_000) / 1000
    assert "already evicted 1 times in the last hour (budget 1)" in d.message


def test_disruption_budget_a_service_never_drops_below_min_available():
    ledger = running(fleet(), submitted(id="svc", tenant="a", gpus=4, replicas=2, min_available=2))
    d = declined(blocked(ledger, 10, id="high", tenant="a", gpus=8, **{"class": "interactive"}))
    assert excluded(d) == [("svc", ExclusionReason.DisruptionBudget)]
    assert "keeps at least 2 of 2 members" in d.details["excluded"][0]["message"]


def test_disruption_budget_a_gang_with_min_available_is_never_evicted_whole():
    """The reported bug: 4 members, min_available 3, evicted whole to free 2 GPUs (evicting
    one member evicts the gang, so it would run 0 of 4)."""
    ledger = running(fleet(), submitted(id="svc", tenant="a", gpus=2, replicas=4, min_available=3))
    d = declined(blocked(ledger, 10, id="hot", tenant="a", gpus=2, **{"class": "urgent"}))
    assert excluded(d) == [("svc", ExclusionReason.DisruptionBudget)]
    assert "evicting the gang would leave 0 of 4 members" in d.details["excluded"][0]["message"]


def test_disruption_budget_a_service_loses_at_most_running_minus_min_available_replicas():
    """Given a preemptible 4-replica service (2 GPUs each, min_available 3) filling 8 GPUs,
    when an urgent 2-GPU job and then a second one are blocked, then one replica is evicted
    for the first and the second is declined with `DisruptionBudget` (the replica being
    preempted counts against the budget)."""
    ledger = running(
        fleet(),
        submitted(id="svc", tenant="a", gpus=2, replicas=4, min_available=3, kind="service"),
    )
    assert [r.state for r in ledger.replicas_of("svc")] == ["running"] * 4
    out = blocked(ledger, 10, id="hot", tenant="a", gpus=2, **{"class": "urgent"})
    (req,) = of_type(out, ev.PreemptionRequested)
    assert req.job_id.startswith("svc~")
    assert [x["job"] for x in req.details["excluded"]] and all(
        x["reason"] == ExclusionReason.DisruptionBudget for x in req.details["excluded"]
    )
    fold(ledger, out)
    d = declined(blocked(ledger, 20, id="hot2", tenant="a", gpus=2, **{"class": "urgent"}))
    assert sorted(r for _, r in excluded(d)) == [ExclusionReason.DisruptionBudget] * 3
    assert (
        "service svc runs 4 replicas (1 being preempted), min_available 3: at most 1 may be down "
        "at once" in d.details["excluded"][0]["message"]
    )


def test_within_guarantee_priority_never_takes_another_tenants_guarantee():
    tenants = [{"name": "a", "guaranteed": 0}, {"name": "b", "guaranteed": 8}]
    ledger = running(fleet(tenants=tenants), submitted(id="owned", tenant="b", gpus=8))
    d = declined(blocked(ledger, 10, id="high", tenant="a", gpus=8, **{"class": "interactive"}))
    assert d.reason == DeclineReason.NoVictims
    assert excluded(d) == [("owned", ExclusionReason.WithinGuarantee)]
    assert "tenant b uses 8 of 8 guaranteed GPUs" in d.details["excluded"][0]["message"]


def test_within_guarantee_priority_takes_only_what_another_tenant_borrows():
    """Given tenant a (guaranteed 4) running six 1-GPU jobs on an 8-GPU node (borrowing 2),
    when b's higher-priority job needs 4 GPUs, then two of a's jobs are evicted (a keeps its
    4); when it needs 5, then nothing is: a third victim would take a below its guarantee,
    and a, back within it, would reclaim from b at once (the loop hypothesis found)."""
    tenants = [{"name": "a", "guaranteed": 4}, {"name": "b", "guaranteed": 0}]
    six = [submitted(id=f"a{i}", tenant="a", gpus=1) for i in range(6)]
    ledger = running(fleet(tenants=tenants), *six)
    reqs = of_type(
        blocked(ledger, 10, id="hi4", tenant="b", gpus=4, **{"class": "interactive"}),
        ev.PreemptionRequested,
    )
    assert sorted(r.job_id for r in reqs) == ["a0", "a1"]  # all alike: allocation id order
    assert {r.reason for r in reqs} == {PreemptionReason.Priority}
    assert [(x["job"], x["reason"]) for x in reqs[0].details["excluded"]] == [
        (f"a{i}", ExclusionReason.WithinGuarantee) for i in range(2, 6)
    ]

    ledger = running(fleet(tenants=tenants), *six)
    d = declined(blocked(ledger, 10, id="hi5", tenant="b", gpus=5, **{"class": "interactive"}))
    assert d.reason == DeclineReason.NoVictims
    assert [r for _, r in excluded(d)] == [ExclusionReason.WithinGuarantee] * 4
    assert (
        "tenant a uses 6 of 4 guaranteed GPUs (0 being released); evicting its 1 GPUs would "
        "take it below its guarantee: priority may take 0 more"
    ) in d.details["excluded"][0]["message"]


def test_the_first_rule_that_holds_is_the_reason_given():
    """A young non-preemptible job is reported NonPreemptible (it never lapses), not MinRuntime."""
    ledger = running(
        fleet(min_runtime_s=300), submitted(id="builder", tenant="a", gpus=8, **{"class": "build"})
    )
    d = declined(blocked(ledger, 10, id="hot", tenant="a", gpus=8, **{"class": "urgent"}))
    assert (d.reason, excluded(d)) == (
        DeclineReason.NoVictims,
        [("builder", ExclusionReason.NonPreemptible)],
    )


# ---------------------------------------------------------------- the measure (WouldCycle)


def test_would_cycle_a_reclaim_that_costs_the_borrower_what_it_gives_is_declined():
    """Given b (guaranteed 6) running two 4-GPU train jobs on the 8-GPU node (borrowing 2),
    when a (guaranteed 2) needs 2 GPUs at the same priority, then evicting a whole 4-GPU job
    would give a 2 guaranteed GPUs and take 2 of b's (guaranteed GPUs in use 6 -> 6) while
    less would run at priority 50 (8 -> 6): the standing would not rise, so it is declined
    `WouldCycle`, with the measure in its message and details."""
    tenants = [{"name": "a", "guaranteed": 2}, {"name": "b", "guaranteed": 6}]
    ledger = running(
        fleet(tenants=tenants),
        submitted(id="b1", tenant="b", gpus=4),
        submitted(id="b2", tenant="b", gpus=4),
    )
    d = declined(blocked(ledger, 10, id="a1", tenant="a", gpus=2))
    assert d.reason == DeclineReason.WouldCycle
    assert "guaranteed GPUs in use 6 -> 6 (tenant b 6 -> 4)" in d.message
    assert "then GPUs running at priority 50: 8 -> 6" in d.message
    measure = d.details["measure"]
    assert measure["improves"] is False
    assert measure["by_tenant"] == {"a": {"before": 0, "after": 2}, "b": {"before": 6, "after": 4}}


def test_would_cycle_the_same_reclaim_goes_ahead_when_it_gives_more_than_it_takes():
    """As above, but a needs 4 GPUs: a gains 4 guaranteed GPUs, b loses 2 (6 -> 8 in use):
    the standing rises, and the borrower's job is evicted (`Reclaim`)."""
    tenants = [{"name": "a", "guaranteed": 4}, {"name": "b", "guaranteed": 6}]
    ledger = running(
        fleet(tenants=tenants),
        submitted(id="b1", tenant="b", gpus=4),
        submitted(id="b2", tenant="b", gpus=4),
    )
    (req,) = of_type(blocked(ledger, 10, id="a1", tenant="a", gpus=4), ev.PreemptionRequested)
    assert (req.beneficiary, req.reason) == ("a1", PreemptionReason.Reclaim)


def test_would_cycle_a_tenant_reordering_its_own_work_keeps_its_guarantee():
    """Given a (guaranteed 8) running one 8-GPU job, when its 1-GPU interactive job arrives,
    then the 8-GPU job is evicted (`Priority`) although a then runs 1 GPU of its 8: the
    evicted job is credited to a's guarantee while its evictor runs, and more runs at a higher
    priority, so the standing rises."""
    ledger = running(fleet(), submitted(id="low", tenant="a", gpus=8))
    (req,) = of_type(
        blocked(ledger, 10, id="high", tenant="a", gpus=1, **{"class": "interactive"}),
        ev.PreemptionRequested,
    )
    assert (req.job_id, req.reason) == ("low", PreemptionReason.Priority)


# ---------------------------------------------------------------- order


def order(ledger, job_id, at):
    excl: list[Exclusion] = []
    out = [c.victim.job_id for c in candidates(ledger, ledger.jobs[job_id], at, excl)]
    assert excl == []
    return out


def pending_high(ledger, at, tenant="a"):
    fold(ledger, [submitted(at_ms=at, id="high", tenant=tenant, gpus=8, **{"class": "urgent"})])
    step(ledger, at, Admission())
    return ledger


def test_order_borrowing_first():
    cfg = fleet(tenants=[{"name": "a", "guaranteed": 16}, {"name": "b", "guaranteed": 0}], nodes=2)
    ledger = pending_high(
        running(cfg, submitted(id="x", tenant="a", gpus=8), submitted(id="y", tenant="b", gpus=8)),
        0,
    )
    assert order(ledger, "high", 0) == ["y", "x"]


def test_order_lowest_priority():
    ledger = pending_high(
        running(
            fleet(nodes=2),
            submitted(id="x", tenant="a", gpus=8),
            submitted(id="y", tenant="a", gpus=8, **{"class": "scavenger"}),
        ),
        0,
    )
    assert order(ledger, "high", 0) == ["y", "x"]


def test_order_least_work_at_risk():
    ledger = running(
        fleet(nodes=2),
        submitted(id="x", tenant="a", gpus=8),
        submitted(id="y", tenant="a", gpus=8, checkpoint={"interval": 60}),
    )
    pending_high(ledger, 90_000)  # x risks 90 s of work, y 30 s since its checkpoint
    assert order(ledger, "high", 90_000) == ["y", "x"]


def test_order_smallest_gang():
    ledger = pending_high(
        running(
            fleet(nodes=2),
            submitted(id="x", tenant="a", gpus=8),
            submitted(id="y", tenant="a", gpus=4),
        ),
        0,
    )
    assert order(ledger, "high", 0) == ["y", "x"]


def test_order_most_recently_started():
    cfg = fleet(nodes=2)
    ledger = given(
        *cfg,
        submitted(id="x", tenant="a", gpus=8, checkpoint={"interval": 10}),
        submitted(id="y", tenant="a", gpus=8, checkpoint={"interval": 10}),
    )
    step(ledger, 0, Admission(), Scheduler())
    start(ledger, 0, "x")
    start(ledger, 10_000, "y")
    pending_high(ledger, 20_000)  # both just checkpointed: nothing at risk
    assert order(ledger, "high", 20_000) == ["y", "x"]


def test_order_allocation_id_breaks_every_tie():
    ledger = pending_high(
        running(
            fleet(nodes=2),
            submitted(id="y", tenant="a", gpus=8),
            submitted(id="x", tenant="a", gpus=8),
        ),
        0,
    )
    assert order(ledger, "high", 0) == ["x", "y"]


# ---------------------------------------------------------------- the tables


def test_every_rule_has_a_test():
    """Adding a rule = one unit + one test: each ground, exclusion and order key is named by
    a test of this module."""
    names = {n for n in dir(sys.modules[__name__]) if n.startswith("test_")}
    for g in rules.GROUNDS:
        assert any(n.startswith(f"test_{g.holds.__name__}_") for n in names), g.reason
    for r in rules.EXCLUSIONS:
        assert any(n.startswith(f"test_{r.name}_") for n in names), r.code
    for k in rules.ORDER:
        assert f"test_order_{k.name}" in names or any(
            n.startswith(f"test_order_{k.name}") for n in names
        ), k.name


def test_every_rule_says_what_it_protects_and_codes_are_unique():
    assert all(r.doc for r in rules.EXCLUSIONS) and all(g.doc for g in rules.GROUNDS)
    assert all(k.doc for k in rules.ORDER)
    codes = [r.code for r in rules.EXCLUSIONS]
    assert len(codes) == len(set(codes)) and set(codes) == set(ExclusionReason)
    assert rules.EXCLUSIONS[-1].code == ExclusionReason.WithinGuarantee  # relocation reads it last
    assert rules.LAPSING == {ExclusionReason.MinRuntime, ExclusionReason.EvictionBudget}


def test_a_decline_that_comes_back_after_another_is_a_new_decision():
    # given (the `deep` property's seed 52436): j7 of tenant b is declined NoVictims at 30 s,
    # MinRuntime at 31 s (j5 could make room but ran 1 s of 300), and NoVictims again at 61 s
    # when j5 has ended, its pending reason unchanged all along
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate
    from tests.properties.test_pure_decider_properties import document

    def job(at_s, tenant, duration_s, **shape):
        return {"at_s": at_s, "tenant": tenant, "class": "best-effort", "shape": shape,
                "duration_s": duration_s}  # fmt: skip

    jobs = [
        *(job(0, "a", 30, gpu="250m") for _ in range(5)),
        job(31, "a", 30, gpus=1, replicas=3),
        job(30, "a", 45, gpus=1, replicas=2),
        job(30, "b", 30, gpu="250m"),
    ]
    policy = {"preemption_scope": "tenant", "min_runtime_s": 300}
    # when it is simulated in checking mode (every decide skipped as quiet is asked anyway)
    sim = simulate(from_document(document(jobs, policy, [], (None, None))), check=True)
    # then the decline at 61 s is published: its id is not the 30 s decline's
    declines = [(e.occurred_at_ms, e.reason) for _, _, e in sim.log
                if isinstance(e, ev.PreemptionDeclined) and e.job_id == "j7"]  # fmt: skip
    assert declines[:3] == [(30_000, "NoVictims"), (31_000, "MinRuntime"), (61_000, "NoVictims")]
