"""Pending reasons, one per row of `services.domain.policy.pending.PENDING`: given a fleet and
admitted work, when the scheduler decides, then the blocked job's `PendingReasonChanged`
carries that code and a quantitative message. `test_every_pending_reason_has_a_test` keeps
the table and the tests in step."""

from __future__ import annotations

import inspect
import re
import sys

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.policy.pending import CAPACITY_REASONS, PENDING, PREEMPTION_MAY_HELP
from gpuledger.services.placement.reasons import UNPLACEABLE, gang_incomplete
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.stages import OWNER
from tests.services.given import cluster, fold, given, of_type, stamped, submitted

QUIET = {
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
}


def scheduled(cfg, *waves):
    """Each wave of jobs is submitted, admitted and scheduled in turn (wave i at i ms);
    returns the ledger and the scheduler's events of the last wave."""
    ledger = given(*cfg)
    out: list[ev.Event] = []
    for at, wave in enumerate(waves):
        fold(ledger, [submitted(at_ms=at, **j) for j in wave])
        fold(ledger, Admission().decide(ledger, at))
        out = Scheduler().decide(ledger, at)
        fold(ledger, out)
    return ledger, out


def why(out, job_id):
    (e,) = [e for e in of_type(out, ev.PendingReasonChanged) if e.job_id == job_id]
    return e


def fleet(*nodes, tenants=({"name": "a", "guaranteed": 8},), **policy):
    return cluster(*nodes, tenants=list(tenants), policy={**QUIET, **policy})


N8 = {"name": "n1", "gpus": 8}


def test_resources_no_node_has_the_free_gpus():
    _, out = scheduled(
        fleet(N8),
        [{"id": "big", "tenant": "a", "gpus": 8}],
        [{"id": "j", "tenant": "a", "gpus": 4}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.Resources
    assert e.message.startswith("needs 4 GPUs") and "0/1 nodes" in e.message


def test_gang_incomplete_fewer_members_than_min_members_fit():
    _, out = scheduled(
        fleet(
            {"name_prefix": "n", "count": 2, "gpus": 8}, tenants=[{"name": "a", "guaranteed": 24}]
        ),
        [{"id": "big", "tenant": "a", "gpus": 8}],
        [{"id": "j", "tenant": "a", "gpus": 8, "replicas": 2}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.GangIncomplete and "only 1 of 2 members fit" in e.message


def test_topology_unsatisfiable_free_gpus_are_split_across_cliques():
    node = {"name": "n1", "gpus": 8, "cliques": 2}
    _, out = scheduled(
        fleet(node),
        [{"id": "x", "tenant": "a", "gpus": 3}],
        [{"id": "y", "tenant": "a", "gpus": 3}],
        [{"id": "j", "tenant": "a", "gpus": 2}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.TopologyUnsatisfiable
    assert "needs 2 GPUs in one NVLink clique; largest free clique has 1" in e.message


def test_mig_placement_unavailable_no_gpu_has_a_free_slot():
    node = {"name": "n1", "gpus": 1, "model": "A100-80GB", "sharing": "mig"}
    jobs = [{"id": f"m{i}", "tenant": "a", "mig": "3g.40gb"} for i in range(2)]
    _, out = scheduled(fleet(node), jobs, [{"id": "j", "tenant": "a", "mig": "3g.40gb"}])
    e = why(out, "j")
    assert (
        e.reason == PendingReason.MIGPlacementUnavailable
        and "MIG 3g.40gb: no GPU with a free" in e.message
    )


def test_isolation_conflict_an_mps_gpu_held_by_another_tenant():
    node = {"name": "n1", "gpus": 1, "sharing": "mps"}
    tenants = [{"name": "a", "guaranteed": 1}, {"name": "b", "guaranteed": 0}]
    _, out = scheduled(
        fleet(node, tenants=tenants),
        [{"id": "x", "tenant": "a", "gpu": "300m"}],
        [{"id": "j", "tenant": "b", "gpu": "100m"}],
    )
    e = why(out, "j")
    assert (
        e.reason == PendingReason.IsolationConflict
        and "mps GPUs busy with other tenants" in e.message
    )


def test_unschedulable_the_fleet_shrank_below_what_the_job_needs():
    ledger = given(*fleet(N8), submitted(id="j", tenant="a", gpus=8))
    fold(ledger, Admission().decide(ledger, 0))  # admitted while n1 had 8 GPUs
    smaller = next(e for e in fleet({"name": "n1", "gpus": 4}) if isinstance(e, ev.NodeRegistered))
    fold(ledger, [stamped(ev.NodeRegistered, "re-register", 10, node=smaller.node, simulated=True)])
    e = why(Scheduler().decide(ledger, 10), "j")
    assert (
        e.reason == PendingReason.Unschedulable and "no node can ever host this member" in e.message
    )


def test_exceeds_limit_the_tenant_would_pass_its_limit():
    tenants = [{"name": "a", "guaranteed": 4, "limit": 6}]
    _, out = scheduled(
        fleet(N8, tenants=tenants),
        [{"id": "x", "tenant": "a", "gpus": 4}],
        [{"id": "j", "tenant": "a", "gpus": 4}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.ExceedsLimit
    assert e.message == "tenant a uses 4 of its 6-GPU limit, job needs 4"


def test_exceeds_limit_the_tenant_would_pass_its_borrowing_limit():
    tenants = [{"name": "a", "guaranteed": 2, "borrowing_limit": 3}]
    _, out = scheduled(
        fleet(N8, tenants=tenants),
        [{"id": "x", "tenant": "a", "gpus": 4}],
        [{"id": "j", "tenant": "a", "gpus": 2}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.ExceedsLimit
    assert e.message == (
        "tenant a borrows 2 of its 3-GPU borrowing_limit (uses 4, guaranteed 2), job needs 2"
    )


def test_lending_limit_the_free_gpus_are_a_guarantee_its_tenant_does_not_lend():
    tenants = [{"name": "a", "guaranteed": 2}, {"name": "b", "guaranteed": 4, "lending_limit": 1}]
    _, out = scheduled(
        fleet(N8, tenants=tenants),
        [{"id": "x", "tenant": "a", "gpus": 4}],
        [{"id": "j", "tenant": "a", "gpus": 2}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.LendingLimit
    assert e.message == (
        "tenant a would borrow; 3 of the 4 free GPUs are unused guarantee not lent: b keeps 3 "
        "(lends 1 of 4 guaranteed, uses 0); job needs 2"
    )
    assert (e.details["free_gpu_milli"], e.details["held_gpu_milli"]) == (4000, 3000)


def test_non_preemptible_over_quota_only_guaranteed_capacity_for_non_preemptible_work():
    tenants = [{"name": "a", "guaranteed": 4}]
    _, out = scheduled(
        fleet(N8, tenants=tenants),
        [{"id": "x", "tenant": "a", "gpus": 4, "class": "build"}],
        [{"id": "j", "tenant": "a", "gpus": 2, "class": "build"}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.NonPreemptibleOverQuota
    assert "runs 4 non-preemptible of 4 guaranteed GPUs, job needs 2" in e.message


def test_quota_scheduled_non_preemptible_work_that_fits_a_guarantee_a_schedule_gives_later():
    from gpuledger.services.domain.inputs.configfile import config_events

    day = {
        "name": "day",
        "cron": "0 8 * * *",
        "timezone": "UTC",
        "tenants": [{"name": "a", "guaranteed": 4}],
    }
    night = {**day, "name": "night", "cron": "0 20 * * *"}
    night["tenants"] = [{"name": "a", "guaranteed": 0}]
    schedules = config_events(
        {"tenants": [{"name": "a", "guaranteed": 0}], "schedules": [day, night]}
    )
    # 00:00 on the simulator's first day: the night (0 guaranteed) is in force
    _, out = scheduled(
        [*fleet(N8, tenants=[{"name": "a", "guaranteed": 0}]), *schedules],
        [{"id": "j", "tenant": "a", "gpus": 2, "class": "build"}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.QuotaScheduled
    assert e.message == "tenant a is guaranteed 0 now, 4 from 08:00 UTC; job needs 2"
    assert e.details["starts_at_ms"] == 8 * 3_600_000


def test_reserved_the_only_room_is_reserved_for_a_starving_gang():
    from tests.scheduler.stages.test_reservation import starving_gang

    e = why(Scheduler().decide(starving_gang(), 100_000), "small")
    assert e.reason == PendingReason.Reserved
    assert "is reserved for gang" in e.message and "run past it" in e.message


def victims_leaving():
    """`high` waits for `low`, asked to checkpoint and exit for it at 5 ms."""
    ledger, _ = scheduled(
        fleet(N8),
        [{"id": "low", "tenant": "a", "gpus": 8}],
        [{"id": "high", "tenant": "a", "gpus": 8, "class": "interactive"}],
    )
    (req,) = of_type(Preemption().decide(ledger, 5), ev.PreemptionRequested)
    fold(ledger, [req])
    return ledger


def test_waiting_for_preempted_workloads_victims_are_still_checkpointing():
    e = why(Scheduler().decide(victims_leaving(), 6), "high")
    assert e.reason == PendingReason.WaitingForPreemptedWorkloads
    assert e.message.startswith("waiting for low to checkpoint and exit (deadline t+30s)")


def test_waiting_for_consolidation_a_small_job_migrates_out_of_its_way():
    nodes = ({"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4})
    ledger, _ = scheduled(
        fleet(*nodes, consolidation=True),
        [{"id": f"s{i}", "tenant": "a", "gpus": 1} for i in range(1, 9)],
    )
    # one job ends on each node: 1 + 1 GPUs free, none of the nodes has 2
    ends = [
        min(a for a in ledger.active if ledger.allocations[a].nodes() == (n,)) for n in ("n1", "n2")
    ]
    fold(
        ledger,
        [stamped(ev.GangCompleted, a, at=2, job_id=a.split("#")[0], allocation_id=a) for a in ends],
    )
    fold(ledger, [submitted(at_ms=3, id="wide", tenant="a", gpus=2)])
    fold(ledger, Admission().decide(ledger, 3))
    fold(ledger, Scheduler().decide(ledger, 3))
    assert ledger.jobs["wide"].reason == PendingReason.TopologyUnsatisfiable
    out = Preemption().decide(ledger, 5)
    (planned,) = of_type(out, ev.ConsolidationPlanned)
    fold(ledger, out)
    e = why(Scheduler().decide(ledger, 6), "wide")
    assert e.reason == PendingReason.WaitingForConsolidation
    (move,) = planned.moves
    assert e.message.startswith(
        f"waiting for a consolidation: {move.job_id} migrating off "
        f"{move.from_nodes[0]} to {move.to_nodes[0]}"
    )


def test_waiting_for_mig_reconfiguration_an_idle_gpu_changes_layout_for_it():
    layout = ["1g.10gb"] * 7
    ledger, out = scheduled(
        fleet(
            {"name": "m1", "gpus": 1, "sharing": "mig", "mig_layout": layout}, mig_regeometry=True
        ),
        [{"id": "big", "tenant": "a", "mig": "3g.40gb"}],
    )
    assert why(out, "big").reason == PendingReason.MIGPlacementUnavailable
    (req,) = of_type(Preemption().decide(ledger, 5), ev.MigReconfigurationRequested)
    fold(ledger, [req])
    e = why(Scheduler().decide(ledger, 6), "big")
    assert e.reason == PendingReason.WaitingForMigReconfiguration
    assert e.message.startswith("waiting for GPU 0 of m1 to be re-partitioned for 3g.40gb")


def test_dependency_a_job_waits_for_the_job_it_depends_on_and_says_its_state():
    ledger, out = scheduled(
        fleet(N8),
        [{"id": "prep", "tenant": "a", "gpus": 2}],
        [{"id": "train", "tenant": "a", "gpus": 2, "depends_on": [{"job": "prep"}]}],
    )
    e = why(out, "train")  # capacity is free: only the dependency holds it
    assert e.reason == PendingReason.Dependency
    assert e.message == "waits for prep to succeed (prep is running)"
    assert e.details["waiting_for"] == [{"job": "prep", "on": "succeeded", "state": "running"}]
    assert not of_type(out, ev.GangPlaced)


def test_dependency_never_satisfied_pends_under_the_pend_policy_and_is_withdrawn_by_default():
    for policy, expected in (("pend", ev.PendingReasonChanged), (None, ev.JobWithdrawn)):
        extra = {"dependency_never_satisfied": policy} if policy else {}
        ledger, _ = scheduled(
            fleet(N8, **extra),
            [{"id": "big", "tenant": "a", "gpus": 8}],
            [{"id": "prep", "tenant": "a", "gpus": 2}],  # waits for big's GPUs
            [{"id": "after", "tenant": "a", "gpus": 2, "depends_on": [{"job": "prep"}]}],
        )
        fold(ledger, [stamped(ev.JobCancelled, "c-prep", 5, job_id="prep", tenant="a")])
        out = Scheduler().decide(ledger, 6)
        (e,) = [x for x in of_type(out, expected) if x.job_id == "after"]
        assert e.reason == PendingReason.DependencyNeverSatisfied
        assert e.message == (
            "waits for prep to succeed, which can no longer happen (prep is cancelled)"
        )


def test_array_task_limit_tasks_beyond_max_running_wait():
    _, out = scheduled(
        fleet(N8),
        [{"id": "sweep", "tenant": "a", "gpus": 1, "array": {"count": 5, "max_running": 2}}],
    )
    placed = sorted(e.job_id for e in of_type(out, ev.GangPlaced))
    assert placed == ["sweep@0", "sweep@1"]  # 6 GPUs stay free: the cap holds the rest
    e = why(out, "sweep@2")
    assert e.reason == PendingReason.ArrayTaskLimit
    assert e.message == "array sweep runs at most 2 tasks at once (max_running)"


def test_user_limit_a_users_jobs_beyond_her_running_jobs_wait():
    team = {"name": "a", "guaranteed": 8, "users": {"default": {"running_jobs": 1}}}
    _, out = scheduled(
        fleet(N8, tenants=[team]),
        [{"id": f"s{i}", "tenant": "a", "user": "alice", "gpus": 1} for i in range(2)],
    )
    assert sorted(e.job_id for e in of_type(out, ev.GangPlaced)) == ["s0"]
    e = why(out, "s1")
    assert e.reason == PendingReason.UserLimit
    assert e.message == "user alice of tenant a runs 1 jobs; at most 1 at once (running_jobs)"


def test_held_a_held_job_waits_with_who_holds_it_even_with_free_gpus():
    ledger, _ = scheduled(fleet(N8), [{"id": "big", "tenant": "a", "gpus": 8}])
    fold(ledger, [submitted(at_ms=1, id="train", tenant="a", gpus=2)])
    fold(ledger, [stamped(ev.JobHeld, "h", 1, job_id="train", tenant="a", reason="data")])
    fold(ledger, Admission().decide(ledger, 1))
    fold(ledger, [stamped(ev.JobCancelled, "c-big", 2, job_id="big", tenant="a")])
    out = Scheduler().decide(ledger, 3)
    e = why(out, "train")  # nothing else keeps it out
    assert (e.reason, e.message) == (PendingReason.Held, "held by tenant: data")
    assert not [p for p in of_type(out, ev.GangPlaced) if p.job_id == "train"]


def test_node_cordoned_a_job_that_fits_only_on_a_cordoned_node_says_which():
    ledger, _ = scheduled(fleet(N8))
    fold(ledger, [ev.NodeCordoned(node="n1", reason="firmware update")])
    fold(ledger, [submitted(at_ms=1, id="j", tenant="a", gpus=2)])
    fold(ledger, Admission().decide(ledger, 1))
    e = why(Scheduler().decide(ledger, 2), "j")
    assert (e.reason, e.message) == (
        PendingReason.NodeCordoned,
        "fits only on cordoned nodes: n1 (firmware update)",
    )


def test_maintenance_a_job_whose_run_would_reach_a_window_says_which():
    ledger, _ = scheduled(fleet(N8))
    fold(
        ledger,
        [
            ev.MaintenanceScheduled(
                window_id="fw", nodes=("n1",), start_ms=3_600_000, end_ms=7_200_000
            )
        ],
    )
    fold(ledger, [submitted(at_ms=1, id="j", tenant="a", gpus=2)])
    fold(ledger, Admission().decide(ledger, 1))
    e = why(Scheduler().decide(ledger, 2), "j")
    assert (e.reason, e.message) == (
        PendingReason.Maintenance,
        "fits only on nodes of maintenance window fw (n1, t+1h to t+2h): the job has no time limit or duration hint",
    )
    assert e.details["maintenance"] == ["fw"]


def test_priority_under_the_slurm_profile_a_job_behind_a_waiting_one_waits_for_backfill():
    # Slurm's main scheduler between backfill cycles (stage `main_scheduler`)
    _, out = scheduled(
        fleet(N8, profile="slurm", slurm={"backfill_interval_s": 4}),
        [{"id": "big", "tenant": "a", "gpus": 6}],
        [{"id": "head", "tenant": "a", "gpus": 4}, {"id": "j", "tenant": "a", "gpus": 2}],
    )
    assert why(out, "head").reason == PendingReason.Resources
    e = why(out, "j")  # 2 GPUs are free, but `head` is ahead of it at 1 ms, no backfill instant
    assert (e.reason, e.message) == (
        PendingReason.Priority,
        "a job ahead of it in partition (default) waits for capacity: Slurm's main scheduler "
        "starts no later job there; its backfill tries every 4s",
    )
    assert e.details["backfill_interval_s"] == 4


def _snake(code: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", code).lower()


def test_every_pending_reason_has_a_row_and_a_test():
    names = {n for n in dir(sys.modules[__name__]) if n.startswith("test_")}
    assert {r.code for r in PENDING} == set(PendingReason)
    for r in PENDING:
        assert any(n.startswith(f"test_{_snake(r.code)}_") for n in names), r.code
        assert r.doc
    placement_rules = " ".join(
        inspect.getdoc(rule) or "" for rule in (*UNPLACEABLE, gang_incomplete)
    )
    for r in PENDING:  # found by exactly one stage of the scheduler, or by placement
        assert (r.code in OWNER) != (f"`{r.code}`" in placement_rules), r.code


def test_the_derived_sets_are_what_reservations_and_preemption_act_on():
    assert PREEMPTION_MAY_HELP == {
        "Resources",
        "GangIncomplete",
        "TopologyUnsatisfiable",
        "MIGPlacementUnavailable",
        "IsolationConflict",
        "Priority",  # Slurm's main scheduler: preemption plans for it as Slurm's would
    }
    assert CAPACITY_REASONS == PREEMPTION_MAY_HELP | {
        "Reserved",
        "WaitingForPreemptedWorkloads",
        "WaitingForConsolidation",
        "WaitingForMigReconfiguration",
    }
