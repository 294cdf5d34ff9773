"""Stage `main_scheduler`: Slurm's two schedulers, under the `slurm` profile with a backfill
interval (`policy.slurm.backfill_interval_s`, the site's `bf_interval`; 0, the default and
the native profile's: off, every pass backfills).

slurmctld (22.05) starts a pending job in one of two passes. Its main scheduler runs as soon
as a job ends (the epilog-complete message), about a second after a submission (its
background loop) and every `sched_interval`; it tries jobs in priority order and, at the
first job of a partition that does not fit, starts no later job of that partition nor on
that partition's nodes. Its backfill scheduler, every `bf_interval` seconds, starts any
later job that fits. So a pass here is a main pass unless its instant is a backfill instant,
a whole multiple of the interval since the epoch (assumed: the controller's start sets the
phase, which no dump records): once a job waits for capacity, the later jobs of its
partition are kept out with `Priority` (Slurm's reason) and its partition's nodes are
excluded for the later jobs of other partitions; while a job waits for `Priority`, the
stage asks to be woken at the next backfill instant, where the pass places as the native
one does, with backfill's plan: each job that waits for capacity plans where and when it
would start by the time limits of what runs (`reservation.reserve`: whole nodes, as
Slurm 22.05's backfill reserves them), and a later job goes on those nodes only if its own
time limit ends strictly before that start (a job placed in the same pass with the same
limit does not: in Slurm it would have started a cycle later). Not modelled: the second a
submission waits for the background loop, the periodic main pass (in a replay capacity
frees only at events, where the main pass runs anyway, so it would start nothing more), a
plan's end (a planned node stays closed to longer jobs after the planned start) and
backfill's limits (`bf_max_job_test`, `bf_window`).
"""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.policy.pending import CAPACITY_REASONS
from gpuledger.services.domain.policy.slurm_priority import partition_of, profile
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, NODE_SET, of
from gpuledger.services.scheduler.reservation import reserve, run_end_ms
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def interval_ms(state: Ledger) -> int:
    """The backfill interval in force, in ms; 0: every pass backfills (native, or off)."""
    site = profile(state)
    return site.backfill_interval_s * 1000 if site is not None else 0


def main_pass(state: Ledger, now_ms: int) -> bool:
    """Whether a pass at `now_ms` is the main scheduler's (not a backfill instant)."""
    every = interval_ms(state)
    return every > 0 and now_ms % every != 0


def gate(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """`Priority` for a job of a partition blocked earlier in this main pass."""
    if not rnd.blocked_partitions:
        return None
    site = profile(rnd.state)
    assert site is not None  # partitions are blocked only under the profile
    part = partition_of(job, site)
    first = rnd.blocked_partitions.get(part)
    if first is None:
        return None
    every = site.backfill_interval_s
    return rnd.pending(
        job,
        PendingReason.Priority,
        f"a job ahead of it in partition {part or '(default)'} waits for capacity: Slurm's "
        f"main scheduler starts no later job there; its backfill tries every {every}s",
        {"partition": part, "backfill_interval_s": every, "queue_position": lim.position},
    )


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The nodes of the partitions blocked earlier in this main pass, and in a backfill pass
    those planned for an earlier job whose planned start the job's time limit passes."""
    if not rnd.backfill_plans:
        return rnd.blocked_nodes
    end = run_end_ms(job, rnd.now_ms, rnd.state.config)
    planned = [p.nodes for p in rnd.backfill_plans if end is None or end >= p.expected_start_ms]
    return rnd.blocked_nodes.union(*planned) if planned else rnd.blocked_nodes


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """`Priority` when only the blocked partitions' nodes keep the job out; in a main pass,
    a job that waits for capacity blocks its partition (Slurm's `fail_by_part`)."""
    main = main_pass(rnd.state, rnd.now_ms)
    if rnd.binds(job, lim, why, STAGE.name):
        why.reason = PendingReason.Priority
        why.message = (
            "it would fit only on nodes of a partition whose first waiting job Slurm's "
            "main scheduler could not start"
            if main
            else "it would fit only on nodes Slurm's backfill plans for a job ahead of it, "
            "and its time limit ends after that job's planned start"
        )
    if why.reason not in CAPACITY_REASONS or not interval_ms(rnd.state):
        return
    if not main:
        plan = reserve(
            rnd.state,
            job,
            rnd.now_ms,
            lim.without(STAGE.name),
            rnd.trial,
            placed_now=tuple(rnd.booked_now),
        )
        if plan is not None:
            rnd.backfill_plans.append(plan)
        return
    site = profile(rnd.state)
    assert site is not None
    part = partition_of(job, site)
    if part in rnd.blocked_partitions:
        return
    rnd.blocked_partitions[part] = job.job_id
    rnd.blocked_nodes = rnd.blocked_nodes | frozenset(
        name
        for name, node in rnd.state.nodes.items()
        if _in_partition(node.info.labels, part, site.default_partition)
    )


def _in_partition(labels: dict[str, str], part: str, default: str) -> bool:
    """Whether a node with `labels` is in partition `part` (docs/node-labels.md); a node
    that names no partition is in the default one."""
    if labels.get("partition") == part or labels.get(f"partition.{part}") == "true":
        return True
    named = "partition" in labels or any(k.startswith("partition.") for k in labels)
    return not named and part == default


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """A placement of this backfill pass runs, for the plans of later jobs, until its time
    limit (its allocation, as `place._bind` names it)."""
    if interval_ms(rnd.state) and not main_pass(rnd.state, rnd.now_ms):
        rnd.booked_now.append((f"{job.job_id}#{job.attempts + 1}", job))


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """The next backfill instant, while a job waits for `Priority`."""
    every = interval_ms(state)
    if not every or not any(state.jobs[j].reason == PendingReason.Priority for j in state.pending):
        return []
    return [(now_ms // every + 1) * every]


STAGE = Stage(
    "main_scheduler",
    __doc__ or "",
    reasons=(PendingReason.Priority,),
    gate=gate,
    exclude=exclude,
    explain=explain,
    book=book,
    wakeup=wakeup,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants", CLOCK),
)
