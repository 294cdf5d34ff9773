"""What preemption's decide reads, step by step, so its quiet set is derived, not hand-kept.

The decide (`services.preemption.decider.Preemption`) goes through these steps for each job
blocked on capacity, in queue order; the victim rules (`rules.GROUNDS`, `rules.EXCLUSIONS`)
declare their own reads. `UNITS` is the whole table: `unaffected_by` and
`quiet_until_wakeup` of the service follow from it (`services.domain.tooling.reads`), and
the meta-test tests/services/test_preemption_reads.py checks that every unit declares.
"""

from __future__ import annotations

from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, NODE_SET, Step, of
from gpuledger.services.preemption.rules import EXCLUSIONS, GROUNDS, SLURM_GROUNDS

_FLEET = of(ADMITTED_JOBS, "allocations", NODE_SET, "mig", "tenants")
"""The trial view of the fleet: nodes, allocations, MIG layouts, the jobs on them."""

STEPS: tuple[Step, ...] = (
    Step(
        "blocked",
        "the pending jobs blocked on capacity (their scheduler reasons), in queue order; "
        "the order follows decayed usage and aging, so the clock",
        of(ADMITTED_JOBS, "tenants", CLOCK),
    ),
    Step(
        "outlook",
        "capacity already being released, nominations (they expire) and idle capacity",
        of(_FLEET, CLOCK),
    ),
    Step(
        "regeometry",
        "an idle GPU re-partitioned for a MIG job (a rate limit per node and window)",
        of(_FLEET, CLOCK),
    ),
    Step(
        "drain",
        "the operator's drains: runs on cordoned nodes moved off, at once with --force or "
        "past the drain's deadline, and on a maintenance window's nodes at its start "
        "(services/preemption/drain.py)",
        of(_FLEET, CLOCK),
    ),
    Step("policy", "preemption, scope, defragmentation on or off", of("tenants")),
    Step("backfill", "backfilled work leaving a reservation that can land", of(_FLEET, CLOCK)),
    Step("consolidation", "moves out of a fragmented job's way", of(_FLEET, CLOCK)),
    Step("measure", "whether the victims raise the standing (guarantees, priorities)", _FLEET),
    Step(
        "declines",
        "a refusal is said once per reason: the job's last decline",
        of(ADMITTED_JOBS),
    ),
)

UNITS = (*STEPS, *GROUNDS, *SLURM_GROUNDS, *EXCLUSIONS)
"""Every unit of the decide that declares what it reads."""
