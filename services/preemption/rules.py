"""Victim policy as data: on what grounds an allocation may be evicted, what protects it, and
in which order candidates are offered.

Three tables, read by `services.preemption.victims`:

- `GROUNDS`: the first ground that holds for an allocation makes it a candidate, with that
  ground as its preemption reason (`Reclaim`, then `Priority`); an allocation with no ground
  is not a candidate at all (and is not reported).
- `EXCLUSIONS`: the first rule that protects a candidate excludes it; the exclusion (code,
  quantitative message, and when it lapses, if it does) is reported in the details of
  `PreemptionRequested` / `PreemptionDeclined`. Order matters only where two rules can hold
  at once: the earlier one is the reason given. `WithinGuarantee` stays last: only work
  protected by nothing else may be moved instead (`victims.relocation`).
- `ORDER`: candidates are sorted by these keys in turn (the last is the allocation id, so the
  order is total).

Under `policy.profile: slurm` the tables are `SLURM_GROUNDS` and `SLURM_EXCLUSIONS`
(`grounds` / `exclusions` pick them): one ground, the site's (`site_preempts`: partition
tier or QOS preempt list), and only the protections a Slurm site has or a variant turns on
(`PreemptExemptTime` as the minimum runtime, the eviction budget when set, non-preemptible
classes and disruption budgets); gpuledger's guarantees, aging, loop and time-limit rules
do not apply there.

Every unit is pure: it reads the `Scene` (the blocked job and facts computed once per plan)
and one `Candidate`, never writes, never reads a clock but the scene's `now_ms`. A ground or
an exclusion declares `reads` (`services.domain.tooling.reads`: the events, and `CLOCK` when
time alone can change its verdict); preemption's quiet set is derived from them
(`services.preemption.steps`). One that declares none is read as reading everything.
Order keys declare nothing: an order ranks the candidates, it never makes a quiet answer
loud.

Adding a rule = one unit + one test: write the function (its docstring says what it
protects), add its code to `events.reasons.ExclusionReason` and one row to the table, and
add one given/when/then test to tests/services/test_preemption.py that builds a cluster where
only the new rule protects a victim and asserts the code in the preemption details.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuledger.events.reasons import ExclusionReason, PreemptionReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy import slurm_priority
from gpuledger.services.domain.policy.queue import NOT_SUFFERED
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, Reads, of
from gpuledger.services.domain.tooling.timefmt import duration, instant

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Scene:
    """What every rule may read: the blocked job and facts computed once per plan."""

    state: Ledger
    job: JobRecord
    now_ms: int
    releasing: dict[str, int]
    """GPU capacity per tenant already being released (not counted as borrowed)."""
    can_reclaim: bool
    """Reclaim is on and the blocked job's tenant stays within its guarantee with the job."""
    evicted_me: frozenset[str]
    """Jobs that evicted the blocked job within the last hour."""
    replicas_up: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per service with a replica among the candidates: (replicas running and not being
    preempted, replicas being preempted), replicas already chosen in this decision counted
    as being preempted."""
    budget_left: dict[str, int] = field(default_factory=dict)
    """Per service: how many more of its replicas may be offered as victims in this plan.
    Starts at `replicas_up - min_available`; `victims.candidates` evaluates candidates in
    victim order and spends one for each replica it offers (the only write, and not by a rule)."""
    borrowed_left: dict[str, int] = field(default_factory=dict)
    """Per other tenant: GPU capacity (milli) it runs above its guarantee that `Priority` may
    still take in this plan. Starts at used - releasing - guaranteed; `victims.candidates`
    spends each cross-tenant `Priority` victim it offers, so the offered set together never
    takes a tenant below its guarantee (spent like `budget_left`, not by a rule)."""

    @property
    def priority(self) -> int:
        """The blocked job's base priority: aging never grants the right to evict."""
        return self.job.priority

    def in_scope(self, victim: JobRecord) -> bool:
        """Whether `Priority` may reach the victim: same tenant, or scope `cluster`."""
        return (
            victim.tenant == self.job.tenant
            or self.state.config.policy.preemption_scope == "cluster"
        )


@dataclass(frozen=True)
class Candidate:
    """An allocation with a ground for eviction, and the facts rules and keys read."""

    rec: AllocationRecord
    victim: JobRecord
    reason: str
    """The ground (`PreemptionReason`)."""
    priority: int
    """The victim's effective priority (raised by aging)."""
    at_risk_gpu_ms: int
    """Work lost if it died now without a new checkpoint."""
    borrowing: bool
    """Its tenant runs above its guarantee (capacity already being released not counted)."""
    started_ms: int
    ranks: tuple[int, ...] | None = None
    """Elastic gangs: only these members (above `min_members`) are taken and the gang
    shrinks; None = the whole gang."""

    def sort_key(self) -> tuple:
        return tuple(k.key(self) for k in ORDER)

    def describe(self) -> dict[str, Any]:
        out = {
            "job": self.victim.job_id,
            "allocation": self.rec.allocation_id,
            "tenant": self.victim.tenant,
            "priority": self.priority,
            "gpus": self.rec.gpu_milli / 1000,
            "borrowing": self.borrowing,
            "at_risk_gpu_s": self.at_risk_gpu_ms / 1000,
            "reason": self.reason,
        }
        if self.ranks is not None:
            n = len(self.rec.members)
            out["gpus"] = self.rec.gpu_milli * len(self.ranks) // n / 1000
            out["shrink"] = {"from": n, "to": n - len(self.ranks), "ranks": list(self.ranks)}
        return out


# ---------------------------------------------------------------- grounds


@dataclass(frozen=True)
class Ground:
    """A reason an allocation may be evicted at all."""

    reason: PreemptionReason
    holds: Callable[[Scene, JobRecord, bool], bool]
    """(scene, victim job, victim's tenant borrowing) -> whether the ground holds."""
    reads: Reads | None = None
    """What can change whether it holds (None: everything)."""

    @property
    def name(self) -> str:
        return self.holds.__name__

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.holds) or ""


def reclaim(s: Scene, victim: JobRecord, borrowing: bool) -> bool:
    """The blocked job's tenant stays within its guarantee and the victim's tenant (another)
    runs above its own: borrowed capacity is taken back, whatever the priorities."""
    return s.can_reclaim and victim.tenant != s.job.tenant and borrowing


def priority(s: Scene, victim: JobRecord, borrowing: bool) -> bool:
    """The victim's base priority is below the blocked job's, within the tenant or
    cluster-wide under scope `cluster` (aging may still protect it: `Aged`)."""
    return victim.priority < s.priority and s.in_scope(victim)


def site_preempts(s: Scene, victim: JobRecord, borrowing: bool) -> bool:
    """`slurm` profile: the victim's partition may be preempted (its `PreemptMode` is not
    `OFF`) and, under `preempt/partition_prio`, its `PriorityTier` is below the blocked job's
    partition's; under `preempt/qos`, the blocked job's QOS lists the victim's in `Preempt`."""
    site = slurm_priority.profile(s.state)
    if site is None:
        return False
    part = site.partitions.get(slurm_priority.partition_of(victim, site))
    if part is not None and not part.preemptable:
        return False
    if site.preempt == "partition_prio":
        return slurm_priority.tier(victim, site) < slurm_priority.tier(s.job, site)
    if site.preempt == "qos":
        qos = site.qos.get(s.job.spec.priority_class)
        return qos is not None and victim.spec.priority_class in qos.preempt
    return False


GROUNDS: tuple[Ground, ...] = (
    Ground(PreemptionReason.Reclaim, reclaim, of(ADMITTED_JOBS, "allocations", "tenants")),
    Ground(PreemptionReason.Priority, priority, of(ADMITTED_JOBS, "tenants")),
)

SLURM_GROUNDS: tuple[Ground, ...] = (
    Ground(PreemptionReason.Priority, site_preempts, of(ADMITTED_JOBS, "allocations", "tenants")),
)
"""The `slurm` profile's only ground: the site's preemption (reason `Priority`)."""


# ---------------------------------------------------------------- exclusions


@dataclass(frozen=True)
class Protected:
    """A rule's verdict: why the candidate may not be evicted, and when that lapses."""

    message: str
    until_ms: int | None = None


@dataclass(frozen=True)
class ExclusionRule:
    """One protection of a candidate victim."""

    code: ExclusionReason
    protects: Callable[[Scene, Candidate], Protected | None]
    """(scene, candidate) -> the verdict when the rule protects it, else None."""
    lapses: bool = False
    """The protection ends with time (its verdict carries `until_ms`)."""
    reads: Reads | None = None
    """What can change whether it protects (None: everything)."""

    @property
    def name(self) -> str:
        return self.protects.__name__

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.protects) or ""


def non_preemptible(s: Scene, c: Candidate) -> Protected | None:
    """Work of a non-preemptible priority class (`build`, `inference`) is never evicted."""
    if c.victim.preemptible:
        return None
    return Protected(f"class {c.victim.spec.priority_class} is not preemptible")


def time_limit_due_ms(state: Ledger, rec: AllocationRecord, victim: JobRecord) -> int | None:
    """When the run reaches its job's time limit (it counts from the start of its last
    member), or None: no limit, or not every member has started yet."""
    if victim.time_limit_s is None or len(rec.started) < len(rec.members):
        return None
    return max(rec.started.values()) + victim.time_limit_s * 1000


def ends_at_time_limit(s: Scene, c: Candidate) -> Protected | None:
    """A run that reaches its time limit before an eviction's deadline (now + the grace an
    eviction would give it) is not evicted, nor one already stopping at its limit: it frees
    its GPUs by itself at most one grace later than an eviction would, and ends there, where
    an eviction would requeue it to run again (its next run starting a fresh limit)."""
    grace = s.state.config.grace_ms(c.victim.spec.checkpoint.grace_s, c.victim.spec.priority_class)
    stopping = c.rec.time_limit
    if stopping is not None:
        return Protected(
            f"already stopping at its {duration((c.victim.time_limit_s or 0) * 1000)} time "
            f"limit: its GPUs are free "
            f"by {instant(stopping.deadline_ms)}"
        )
    due = time_limit_due_ms(s.state, c.rec, c.victim)
    if due is None or due > s.now_ms + grace:
        return None
    return Protected(
        f"reaches its {duration((c.victim.time_limit_s or 0) * 1000)} time limit at "
        f"{instant(due)}, within the {duration(grace)} grace an eviction would give it: it "
        "ends there by itself"
    )


def aged(s: Scene, c: Candidate) -> Protected | None:
    """A job whose aging lifted its effective priority to the blocked job's or above is not
    evicted by `Priority`: two jobs can never take turns evicting each other."""
    if c.reason != PreemptionReason.Priority or c.priority < s.priority:
        return None
    v = c.victim
    return Protected(
        f"aged from priority {v.priority} to {c.priority} "
        f"({len(v.preemptions)} preemptions, {v.waited_ms // 1000}s queued); "
        "aging is kept once a job runs"
    )


def preemption_loop(s: Scene, c: Candidate) -> Protected | None:
    """A job never evicts the job that evicted it within the last hour."""
    if c.victim.job_id not in s.evicted_me:
        return None
    return Protected(f"{c.victim.job_id} evicted {s.job.job_id} within the last hour")


def min_runtime(s: Scene, c: Candidate) -> Protected | None:
    """Work that started less than `policy.min_runtime_s` ago keeps running until then —
    except against `Reclaim` by a job that was already waiting when it started: it started
    borrowing while a tenant within its guarantee waited, so the reclaim bound (docs/deciders.md)
    counts only the minimum runtime of work that ran before the job arrived."""
    minimum = s.state.config.policy.min_runtime_s
    ran = s.now_ms - c.started_ms
    if not minimum or ran >= minimum * 1000:
        return None
    if c.reason == PreemptionReason.Reclaim and c.started_ms > s.job.pending_since_ms:
        return None
    return Protected(
        f"ran {ran / 1000:.0f}s of the {minimum}s minimum", c.started_ms + minimum * 1000
    )


def evictions_last_hour(victim: JobRecord, now_ms: int) -> list[int]:
    # a requeue or a drain asked by its tenant or the operator is not against the budget
    recent = (p for p in victim.preemptions if p.reason not in NOT_SUFFERED)
    return sorted(p.at_ms for p in recent if p.at_ms > now_ms - HOUR_MS)


def eviction_budget(s: Scene, c: Candidate) -> Protected | None:
    """A job evicted `policy.eviction_budget_per_hour` times in the last hour is not evicted
    again until the oldest of those leaves the window."""
    budget = s.state.config.policy.eviction_budget_per_hour
    recent = evictions_last_hour(c.victim, s.now_ms)
    if not budget or len(recent) < budget:
        return None
    return Protected(
        f"already evicted {len(recent)} times in the last hour (budget {budget})",
        recent[-budget] + HOUR_MS,
    )


def disruption_budget(s: Scene, c: Candidate) -> Protected | None:
    """A service keeps `min_available` replicas running: at most `running - min_available` of
    its replicas are evicted at once (replicas already being preempted count against it),
    the first ones in victim order. A gang with `min_available` is never evicted: evicting one
    member evicts the whole gang, which would leave 0 of its members running."""
    service = c.victim.service
    if service is not None:
        if s.budget_left.get(service, 0) > 0:
            return None
        up, going = s.replicas_up.get(service, (0, 0))
        keep = s.state.jobs[service].spec.min_available
        return Protected(
            f"service {service} runs {up + going} replicas ({going} being preempted), "
            f"min_available {keep}: at most {max(0, up + going - keep)} may be down at once"
        )
    keep = c.victim.spec.min_available
    if not keep:
        return None
    n = len(c.rec.members)
    return Protected(
        f"service keeps at least {keep} of {n} members; "
        f"evicting the gang would leave 0 of {n} members running"
    )


def within_guarantee(s: Scene, c: Candidate) -> Protected | None:
    """Guarantees are never taken by priority: another tenant's work is not a `Priority`
    victim while that tenant runs within its guarantee, nor when evicting it (with the
    victims offered before it) would take that tenant below its guarantee: `Priority` takes
    only what a tenant borrows (the rest may only be moved, `Defragment`). Otherwise the
    tenant, back within its guarantee, reclaims from the beneficiary's and the two take turns."""
    if c.reason != PreemptionReason.Priority or c.victim.tenant == s.job.tenant:
        return None
    tenant = c.victim.tenant
    left = s.borrowed_left.get(tenant, 0)
    if c.borrowing and c.rec.gpu_milli <= left:
        return None
    conf = s.state.config.tenants.get(tenant)
    uses = (
        f"tenant {tenant} uses {s.state.tenant_gpu_milli.get(tenant, 0) / 1000:g} "
        f"of {(conf.guaranteed_gpu_milli if conf else 0) / 1000:g} guaranteed GPUs"
    )
    if not c.borrowing:
        return Protected(uses)
    going = s.releasing.get(tenant, 0)
    return Protected(
        f"{uses} ({going / 1000:g} being released); evicting its {c.rec.gpu_milli / 1000:g} GPUs "
        f"would take it below its guarantee: priority may take {left / 1000:g} more"
    )


_JOBS_RUNNING = of(ADMITTED_JOBS, "allocations", "tenants")
"""What a rule about running work reads: the victims, their allocations, the policy."""

EXCLUSIONS: tuple[ExclusionRule, ...] = (
    ExclusionRule(ExclusionReason.NonPreemptible, non_preemptible, reads=_JOBS_RUNNING),
    ExclusionRule(
        ExclusionReason.EndsAtTimeLimit, ends_at_time_limit, reads=of(_JOBS_RUNNING, CLOCK)
    ),
    ExclusionRule(ExclusionReason.Aged, aged, reads=of(_JOBS_RUNNING, CLOCK)),
    ExclusionRule(ExclusionReason.PreemptionLoop, preemption_loop, reads=of(_JOBS_RUNNING, CLOCK)),
    ExclusionRule(
        ExclusionReason.MinRuntime, min_runtime, lapses=True, reads=of(_JOBS_RUNNING, CLOCK)
    ),
    ExclusionRule(
        ExclusionReason.EvictionBudget, eviction_budget, lapses=True, reads=of(_JOBS_RUNNING, CLOCK)
    ),
    ExclusionRule(ExclusionReason.DisruptionBudget, disruption_budget, reads=_JOBS_RUNNING),
    # last: see module doc
    ExclusionRule(ExclusionReason.WithinGuarantee, within_guarantee, reads=_JOBS_RUNNING),
)

SLURM_EXCLUSIONS: tuple[ExclusionRule, ...] = tuple(
    r
    for r in EXCLUSIONS
    if r.code
    in (
        ExclusionReason.NonPreemptible,
        ExclusionReason.MinRuntime,
        ExclusionReason.EvictionBudget,
        ExclusionReason.DisruptionBudget,
    )
)
"""The `slurm` profile's protections: `min_runtime_s` is the site's `PreemptExemptTime`,
the eviction budget is 0 (off) in an imported baseline unless a variant sets it."""


def grounds(state: Ledger) -> tuple[Ground, ...]:
    """The grounds in force: `SLURM_GROUNDS` under the `slurm` profile, else `GROUNDS`."""
    return SLURM_GROUNDS if slurm_priority.profile(state) is not None else GROUNDS


def exclusions(state: Ledger) -> tuple[ExclusionRule, ...]:
    """The exclusions in force: `SLURM_EXCLUSIONS` under the `slurm` profile, else `EXCLUSIONS`."""
    return SLURM_EXCLUSIONS if slurm_priority.profile(state) is not None else EXCLUSIONS


LAPSING = frozenset(r.code for r in EXCLUSIONS if r.lapses)
"""Exclusions that lapse with time (the others hold while the allocation runs)."""


# ---------------------------------------------------------------- order


@dataclass(frozen=True)
class OrderKey:
    """One key of the victim order (ascending: smaller is evicted first)."""

    name: str
    key: Callable[[Candidate], Any]
    doc: str


ORDER: tuple[OrderKey, ...] = (
    OrderKey(
        "borrowing_first",
        lambda c: 0 if c.borrowing else 1,
        "work of tenants above their guarantee goes before work within it",
    ),
    OrderKey("lowest_priority", lambda c: c.priority, "lowest effective priority first"),
    OrderKey(
        "least_work_at_risk",
        lambda c: c.at_risk_gpu_ms,
        "least GPU time lost since the last checkpoint first",
    ),
    OrderKey(
        "smallest_gang", lambda c: c.rec.gpu_milli, "smallest allocation first (blast radius)"
    ),
    OrderKey(
        "most_recently_started",
        lambda c: -c.started_ms,
        "most recently started first (least sunk run time)",
    ),
    OrderKey("allocation_id", lambda c: c.rec.allocation_id, "allocation id: a total order"),
)

BACKFILL_ORDER: tuple[OrderKey, ...] = tuple(
    k for k in ORDER if k.name not in ("borrowing_first", "lowest_priority")
)
"""Backfilled work agreed to leave: borrowing and priority do not matter among it."""


def backfill_key(c: Candidate) -> tuple:
    return tuple(k.key(c) for k in BACKFILL_ORDER)
