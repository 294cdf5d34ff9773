"""Pending reasons as data: every reason the scheduler can give a waiting job, who finds it,
and what the other services do about it.

`PENDING` has one `PendingRule` per code of `events.reasons.PendingReason`. Two sets are
derived from it and read by the services, so a reason's consequences are stated once:

- `CAPACITY_REASONS` (`waits_for_capacity`): the job waits for capacity, so waiting counts
  towards starvation and may earn a reservation (`services.scheduler.reservation`);
- `PREEMPTION_MAY_HELP` (`preemption_may_help`): the preemption service plans victims for
  the job (`services.preemption.decider`).

Who finds each reason is stated once, by its owner: a stage of the scheduler's table
(`services.scheduler.stages.STAGES`, the stage's `reasons`; checked before placement by the
gates `dependencies`, `array_cap` and `quota`, refined after a failed placement by
`reservation`, `releasing` and `regeometry`), or a rule of the placement engine
(`services.placement.reasons.UNPLACEABLE`, one named rule per code, first answer wins).
`tests/scheduler/test_stage_table.py` checks that every code has exactly one owner.

Adding a pending reason = one unit + one test: add the code to `PendingReason`, one row
here (its flags decide whether reservations and preemption act on it), the code to the
`reasons` of the stage that finds it (docs/deciders.md), and one given/when/then test
(tests/services/test_pending.py) asserting the code and its quantitative message.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.events.reasons import PendingReason


@dataclass(frozen=True)
class PendingRule:
    """One reason a job may be pending."""

    code: PendingReason
    waits_for_capacity: bool
    """Waiting counts towards starvation (reservations)."""
    preemption_may_help: bool
    """The preemption service plans victims for the job."""
    doc: str
    """When the reason is given, and what the message quantifies."""


PENDING: tuple[PendingRule, ...] = (
    PendingRule(
        PendingReason.ExceedsLimit,
        False,
        False,
        "the tenant or an ancestor would exceed its `limit` (uses X of its Y-GPU limit) or "
        "its `borrowing_limit` (borrows X of its Y-GPU borrowing_limit)",
    ),
    PendingRule(
        PendingReason.LendingLimit,
        False,
        False,
        "the job would borrow, and the free capacity is unused guarantee that other tenants "
        "do not lend (`lending_limit`): X of the Y free GPUs are not lent, naming who keeps them",
    ),
    PendingRule(
        PendingReason.NonPreemptibleOverQuota,
        False,
        False,
        "non-preemptible work may only use guaranteed quota (tenant-wide, or per GPU "
        "model where `guaranteed_by_model` is set): runs X non-preemptible of Y",
    ),
    PendingRule(
        PendingReason.QuotaScheduled,
        False,
        False,
        "non-preemptible work beyond its tenant's guarantee now, within a guarantee a "
        "schedule puts in force later (or a stretch in which a schedule makes its class "
        "preemptible): guaranteed X now, Y from HH:MM ZONE; it starts at that fire time",
    ),
    PendingRule(
        PendingReason.Unschedulable,
        False,
        False,
        "no node can ever host a member, even empty: per-node histogram",
    ),
    PendingRule(
        PendingReason.TopologyUnsatisfiable,
        True,
        True,
        "enough free GPUs, but not inside one NVLink clique: largest free clique",
    ),
    PendingRule(
        PendingReason.MIGPlacementUnavailable,
        True,
        True,
        "no GPU has a free slot for the MIG profile",
    ),
    PendingRule(
        PendingReason.IsolationConflict,
        True,
        True,
        "mps GPUs held by other tenants, or timeslice GPUs the class may not use",
    ),
    PendingRule(
        PendingReason.Resources,
        True,
        True,
        "not enough free capacity of the kind asked for: per-node histogram",
    ),
    PendingRule(
        PendingReason.GangIncomplete,
        True,
        True,
        "some members fit but fewer than min_members: nothing is bound",
    ),
    PendingRule(
        PendingReason.Reserved,
        True,
        False,
        "it would fit only on capacity reserved for a starving gang",
    ),
    PendingRule(
        PendingReason.WaitingForPreemptedWorkloads,
        True,
        False,
        "victims evicted for it are still checkpointing: their deadlines",
    ),
    PendingRule(
        PendingReason.WaitingForConsolidation,
        True,
        False,
        "allocations are migrating out of its way (policy `consolidation`): who moves "
        "from where to where, their checkpoint deadlines, the nodes that will hold it",
    ),
    PendingRule(
        PendingReason.WaitingForMigReconfiguration,
        True,
        False,
        "an idle MIG GPU is being given a layout with its profile (policy "
        "`mig_regeometry`): node, GPU, the layout asked for",
    ),
    PendingRule(
        PendingReason.Dependency,
        False,
        False,
        "a job it depends on (`depends_on`) has not done what it waits for: each such job, "
        "what it must do and its state now (checked before quota and placement)",
    ),
    PendingRule(
        PendingReason.UserLimit,
        False,
        False,
        "its user is at a per-user limit of its tenant (`users:`; Slurm `MaxJobsPerUser`, "
        "`MaxTRESPerUser`): the user, the limit and the use now (checked before quota)",
    ),
    PendingRule(
        PendingReason.ArrayTaskLimit,
        False,
        False,
        "its array job already runs `max_running` tasks (Slurm `JobArrayTaskLimit`): the "
        "array and its cap",
    ),
    PendingRule(
        PendingReason.DependencyNeverSatisfied,
        False,
        False,
        "a dependency can no longer be met and the policy `dependency_never_satisfied` is "
        "`pend` (under `cancel`, the default, the job is withdrawn instead): which one, and "
        "how the job it names ended",
    ),
    PendingRule(
        PendingReason.Held,
        False,
        False,
        "held by its tenant or the operator (`gpuledger hold`) until released: who holds it "
        "and why (checked first; a held job is no demand for fair share, reclaim or "
        "reservations)",
    ),
    PendingRule(
        PendingReason.NodeCordoned,
        False,
        False,
        "it would fit only on nodes the operator cordoned (`gpuledger node cordon`): which "
        "nodes, and why the first is cordoned",
    ),
    PendingRule(
        PendingReason.Maintenance,
        False,
        False,
        "it would fit only on nodes of a maintenance window (`gpuledger node maintenance`) "
        "its run would reach: which window, its nodes and span, and whether it is in force, "
        "the job has no time limit, or its time limit would reach into it",
    ),
    PendingRule(
        PendingReason.Priority,
        True,
        True,
        "the `slurm` profile between backfill cycles (`policy.slurm.backfill_interval_s`): "
        "a job ahead of it in its partition waits for capacity, so Slurm's main scheduler "
        "starts no later job of the partition nor on its nodes; which partition, and how "
        "often the backfill scheduler tries (stage `main_scheduler`)",
    ),
)

BY_CODE: dict[str, PendingRule] = {r.code: r for r in PENDING}
CAPACITY_REASONS = frozenset(r.code for r in PENDING if r.waits_for_capacity)
PREEMPTION_MAY_HELP = frozenset(r.code for r in PENDING if r.preemption_may_help)
