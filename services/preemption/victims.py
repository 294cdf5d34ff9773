"""Choosing victims for a blocked job: who may be evicted, in which order, and the smallest
sufficient set.

Eligible victims are active, preemptible allocations not already being preempted, that are
lower in effective priority than the blocked job's own (base) priority — within the tenant,
or cluster-wide when the policy's scope is `cluster`, where a victim of another tenant must
belong to a tenant running above its guarantee (guarantees are never taken by priority) —
reason `Priority`; or that belong to another tenant running above its guarantee while the
blocked job's tenant stays within its own — reason `Reclaim`. Aging raises a job's effective
priority, which protects it from eviction and moves it up the queue, but never gives it the
right to evict: so two jobs can never take turns evicting each other. A job also never evicts
the job that evicted it within the last hour (`PreemptionLoop`). Minimum runtime, eviction
budgets and disruption budgets exclude candidates (and say so, with when they lapse).

Order: borrowers first, then lowest effective priority, then least work at risk since the
last checkpoint, then smallest gang, then most recently started, then allocation id. The
chosen set comes from the smallest "size tier": victims no larger than the smallest gang size
that can make room together (so a 64-GPU gang is never taken while smaller victims suffice);
within it, the shortest prefix of that order whose release makes the job placeable (binary
search, topology included), then pruned of every victim the job does not actually need.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from services.domain.ledger import AllocationRecord, JobRecord, Ledger
from services.placement import Placement, UnknownAllocation
from services.scheduler.queue import effective_priority

HOUR_MS = 3_600_000
LAPSING = frozenset({"MinRuntime", "EvictionBudget"})
"""Exclusions that lapse with time (the others hold while the allocation runs)."""


@dataclass(frozen=True)
class Candidate:
    rec: AllocationRecord
    victim: JobRecord
    reason: str
    priority: int
    at_risk_gpu_ms: int
    borrowing: bool
    started_ms: int

    def sort_key(self) -> tuple:
        return (
            0 if self.borrowing else 1,
            self.priority,
            self.at_risk_gpu_ms,
            self.rec.gpu_milli,
            -self.started_ms,
            self.rec.allocation_id,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "job": self.victim.job_id,
            "allocation": self.rec.allocation_id,
            "tenant": self.victim.tenant,
            "priority": self.priority,
            "gpus": self.rec.gpu_milli / 1000,
            "borrowing": self.borrowing,
            "at_risk_gpu_s": self.at_risk_gpu_ms / 1000,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Exclusion:
    candidate: Candidate
    code: str
    message: str
    until_ms: int | None = None
    """When the exclusion lapses (MinRuntime, EvictionBudget), else None."""

    def describe(self) -> dict[str, Any]:
        out = {"job": self.candidate.victim.job_id, "reason": self.code, "message": self.message,
               "gpus": self.candidate.rec.gpu_milli / 1000}
        if self.until_ms is not None:
            out["eligible_at_s"] = self.until_ms / 1000
        return out


@dataclass
class Plan:
    victims: list[Candidate] = field(default_factory=list)
    declined: tuple[str, str] | None = None
    exclusions: list[Exclusion] = field(default_factory=list)
    pruned: list[dict[str, Any]] = field(default_factory=list)
    rejected_tiers: list[dict[str, Any]] = field(default_factory=list)
    considered: int = 0
    retry_at_ms: int | None = None
    """When a lapsing exclusion ends and the answer may change without any event."""

    @property
    def excluded(self) -> list[dict[str, Any]]:
        return [x.describe() for x in self.exclusions]

    def details(self) -> dict[str, Any]:
        return {
            "victims": [c.describe() for c in self.victims],
            "candidates_considered": self.considered,
            "not_needed": self.pruned[:10],
            "larger_alternatives_avoided": self.rejected_tiers[:10],
            "excluded": self.excluded[:10],
            "excluded_total": len(self.exclusions),
        }


def over_guarantee(state: Ledger, tenant: str, releasing: dict[str, int] | None = None) -> bool:
    """Whether the tenant runs above its guarantee; with `releasing`, not counting capacity
    already being released from it (victims of requested preemptions, or chosen earlier in
    this decision), so reclaim never takes a tenant's guarantee through several beneficiaries
    each seeing it still borrowing."""
    conf = state.config.tenants.get(tenant)
    used = state.tenant_gpu_milli.get(tenant, 0) - (releasing or {}).get(tenant, 0)
    return conf is not None and used > conf.guaranteed_gpu_milli


def releasing_by_tenant(state: Ledger, taken: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """GPU capacity per tenant in active allocations already being preempted or in `taken`."""
    out: dict[str, int] = {}
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        if rec.preemption is not None or alloc_id in taken:
            out[rec.tenant] = out.get(rec.tenant, 0) + rec.gpu_milli
    return out


def at_risk_gpu_ms(rec: AllocationRecord, job: JobRecord, now_ms: int) -> int:
    """Work lost if the allocation died now without a new checkpoint."""
    started = min(rec.started.values(), default=now_ms)
    ran = max(0, now_ms - started)
    interval = job.spec.checkpoint.interval_s * 1000
    since = ran % interval if interval > 0 else ran
    return since * rec.gpu_milli // 1000


def evictions_last_hour(victim: JobRecord, now_ms: int) -> list[int]:
    return sorted(p.at_ms for p in victim.preemptions if p.at_ms > now_ms - HOUR_MS)


def candidates(
    state: Ledger, job: JobRecord, now_ms: int, exclusions: list[Exclusion],
    taken: set[str] | frozenset[str] = frozenset(),
) -> list[Candidate]:
    policy = state.config.policy
    releasing = releasing_by_tenant(state, taken)
    prio = job.priority  # aging never grants the right to evict
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    own = state.config.tenants.get(job.tenant)
    can_reclaim = (
        policy.reclaim
        and own is not None
        and state.tenant_gpu_milli.get(job.tenant, 0) + need <= own.guaranteed_gpu_milli
    )
    evicted_me = {p.by for p in job.preemptions if p.at_ms > now_ms - HOUR_MS and p.by}
    out: list[Candidate] = []
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        victim = state.jobs[rec.job_id]
        if rec.preemption is not None or victim.job_id == job.job_id:
            continue
        victim_prio = effective_priority(state, victim, now_ms)
        borrowing = over_guarantee(state, victim.tenant, releasing)
        reason = None
        guarded = False  # lower priority, but its tenant is within its guarantee
        if can_reclaim and victim.tenant != job.tenant and borrowing:
            reason = "Reclaim"
        elif victim_prio < prio and (victim.tenant == job.tenant or policy.preemption_scope == "cluster"):
            reason = "Priority"
            guarded = victim.tenant != job.tenant and not borrowing
        elif victim.priority < prio <= victim_prio and victim.preemptible and (
            victim.tenant == job.tenant or policy.preemption_scope == "cluster"
        ):
            exclusions.append(Exclusion(
                Candidate(rec, victim, "Priority", victim_prio, 0, borrowing, rec.placed_ms),
                "Aged",
                f"aged from priority {victim.priority} to {victim_prio} "
                f"({len(victim.preemptions)} preemptions, {victim.waited_ms // 1000}s queued); "
                "aging is kept once a job runs",
            ))
            continue
        if reason is None:
            continue
        started = min(rec.started.values(), default=rec.placed_ms)
        cand = Candidate(
            rec=rec,
            victim=victim,
            reason=reason,
            priority=victim_prio,
            at_risk_gpu_ms=at_risk_gpu_ms(rec, victim, now_ms),
            borrowing=borrowing,
            started_ms=started,
        )
        why_not: tuple[str, str, int | None] | None = None
        recent = evictions_last_hour(victim, now_ms)
        if not victim.preemptible:
            why_not = ("NonPreemptible", f"class {victim.spec.priority_class} is not preemptible", None)
        elif victim.job_id in evicted_me:
            why_not = ("PreemptionLoop", f"{victim.job_id} evicted {job.job_id} within the last hour", None)
        elif policy.min_runtime_s and now_ms - started < policy.min_runtime_s * 1000:
            why_not = (
                "MinRuntime",
                f"ran {(now_ms - started) / 1000:.0f}s of the {policy.min_runtime_s}s minimum",
                started + policy.min_runtime_s * 1000,
            )
        elif policy.eviction_budget_per_hour and len(recent) >= policy.eviction_budget_per_hour:
            why_not = (
                "EvictionBudget",
                f"already evicted {len(recent)} times in the last hour "
                f"(budget {policy.eviction_budget_per_hour})",
                recent[-policy.eviction_budget_per_hour] + HOUR_MS,
            )
        elif victim.spec.min_available and len(rec.members) - 1 < victim.spec.min_available:
            why_not = (
                "DisruptionBudget",
                f"service keeps at least {victim.spec.min_available} of {len(rec.members)} members",
                None,
            )
        elif guarded:  # last: only work protected by nothing else may be moved (`relocation`)
            conf = state.config.tenants.get(victim.tenant)
            why_not = (
                "WithinGuarantee",
                f"tenant {victim.tenant} uses {state.tenant_gpu_milli.get(victim.tenant, 0) / 1000:g} "
                f"of {(conf.guaranteed_gpu_milli if conf else 0) / 1000:g} guaranteed GPUs",
                None,
            )
        if why_not is not None:
            exclusions.append(Exclusion(cand, *why_not))
            continue
        out.append(cand)
    out.sort(key=Candidate.sort_key)
    return out


def smallest_sufficient(ordered: list[Candidate], fits, pruned: list[dict[str, Any]]) -> list[Candidate]:
    """The shortest prefix of `ordered` whose release `fits` (binary search; `fits` of the
    whole list must hold), then without every victim the others make unnecessary (recorded in
    `pruned`)."""
    lo, hi = 1, len(ordered)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(ordered[:mid]):
            hi = mid
        else:
            lo = mid + 1
    chosen = ordered[:lo]
    for c in reversed(list(chosen)):
        trial = [x for x in chosen if x is not c]
        if trial and fits(trial):
            chosen = trial
            pruned.append({**c.describe(), "why": "not needed once the others are evicted"})
    return chosen


def relocation(
    state: Ledger, job: JobRecord, request, placement_policy: str, exclude: frozenset[str],
    exclusions: list[Exclusion], fleet=None,
) -> Candidate | None:
    """A job within its tenant's guarantee that is blocked by fragmentation alone: move one
    allocation of a tenant that is itself within its guarantee (excluded as
    `WithinGuarantee`) when, with it gone, the job fits, and the moved gang then fits again
    elsewhere at once — nobody's guarantee is reduced, the victim only pays a checkpoint.
    Returns that victim (reason `Defragment`), smallest first, or None."""
    own = state.config.tenants.get(job.tenant)
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    if own is None or state.tenant_gpu_milli.get(job.tenant, 0) + need > own.guaranteed_gpu_milli:
        return None
    guarded = sorted((x.candidate for x in exclusions if x.code == "WithinGuarantee"),
                     key=Candidate.sort_key)
    fleet = state.fleet.trial() if fleet is None else fleet
    for cand in guarded:
        alloc_id = cand.rec.allocation_id
        try:
            held = fleet.allocation(alloc_id)
        except UnknownAllocation:
            continue  # already released in the outlook of preemptions under way
        placed = fleet.place(request, placement_policy, exclude=exclude,
                             assume_released=(alloc_id,), explain=False)
        if not isinstance(placed, Placement):
            continue
        moved = fleet.fork()  # trial: the victim gone, the job placed
        moved.release(alloc_id)
        moved.allocate("~relocation", job.tenant, placed, request)
        again = moved.place(held.request, placement_policy, exclude=exclude, explain=False)
        if isinstance(again, Placement):
            exclusions[:] = [x for x in exclusions if x.candidate is not cand]
            return dataclasses.replace(cand, reason="Defragment")
    return None


def plan(
    state: Ledger, job: JobRecord, now_ms: int, taken: set[str], exclude: frozenset[str] | None = None,
    fleet=None,
) -> Plan:
    """The smallest sufficient victim set for `job`, or why there is none. `exclude`: nodes
    off limits (default: every node nominated to another job); `fleet`: the trial view to
    plan on (default: a fresh view of the folded fleet, which is only read)."""
    fleet = state.fleet.trial() if fleet is None else fleet
    result = Plan()
    cands = [c for c in candidates(state, job, now_ms, result.exclusions, taken)
             if c.rec.allocation_id not in taken]
    result.considered = len(cands)
    request = state.gang_request(job)
    placement_policy = state.config.policy.placement_policy
    if exclude is None:
        exclude = state.nominated_nodes(except_jobs={job.job_id}, now_ms=now_ms)
    lapsing = [x for x in result.exclusions if x.until_ms is not None]
    result.retry_at_ms = min((x.until_ms for x in lapsing), default=None)

    def fits(chosen: list[Candidate]) -> bool:
        released = frozenset(c.rec.allocation_id for c in chosen)
        placed = fleet.place(
            request, placement_policy, exclude=exclude, assume_released=released, explain=False
        )
        return isinstance(placed, Placement)

    if not cands or not fits(cands):
        move = relocation(state, job, request, placement_policy, exclude, result.exclusions, fleet)
        if move is not None:
            result.victims = [move]
            return result
        why = "no eligible victims" if not cands else (
            f"evicting all {len(cands)} eligible allocations would still not make room"
        )
        if result.exclusions:
            counts: dict[str, int] = {}
            for x in result.exclusions:
                counts[x.code] = counts.get(x.code, 0) + 1
            why += "; excluded: " + ", ".join(f"{n} {code}" for code, n in sorted(counts.items()))
        code = "NoVictims"
        if lapsing and fits(cands + [x.candidate for x in lapsing]):
            # room exists, but only behind exclusions that lapse with time: say which
            first = min(lapsing, key=lambda x: (x.until_ms, x.candidate.rec.allocation_id))
            code = first.code
            why = (f"evicting {first.candidate.victim.job_id} would make room but it is protected: "
                   f"{first.message}; eligible at {first.until_ms / 1000:g}s")
        result.declined = (code, why)
        return result
    # size tiers: the smallest largest-victim size whose candidates can make room together
    sizes = sorted({c.rec.gpu_milli for c in cands})
    tier = cands
    for size in sizes:
        subset = [c for c in cands if c.rec.gpu_milli <= size]
        if subset is cands or len(subset) == len(cands) or fits(subset):
            tier = subset
            break
    for c in cands:
        if c.rec.gpu_milli > max(x.rec.gpu_milli for x in tier):
            result.rejected_tiers.append(
                {**c.describe(), "why": "a larger gang than needed: smaller victims suffice"})
    chosen = smallest_sufficient(tier, fits, result.pruned)
    max_lost = state.config.policy.max_lost_gpu_hours
    at_risk = sum(c.at_risk_gpu_ms for c in chosen)
    result.victims = chosen
    if max_lost is not None and at_risk > max_lost * HOUR_MS:
        result.declined = (
            "LostWorkBound",
            f"victims risk {at_risk / HOUR_MS:.2f} GPU-hours of work since their last checkpoint; "
            f"bound is {max_lost:g}",
        )
    return result


def backfill_plan(
    state: Ledger, job: JobRecord, now_ms: int, taken: set[str], exclude: frozenset[str],
    fleet=None,
) -> Plan | None:
    """The smallest set of the work backfilled on `job`'s reservation whose eviction makes
    `job` placeable now (reason `Backfill`), or None when evicting all of it would not.

    Backfilled gangs took reserved capacity on the condition that they leave when the
    reserving job lands, so minimum runtime and eviction budgets do not protect them (they
    are preemptible and have no disruption budget, or they would not have been placed there)."""
    allocs = sorted(a for a in state.backfills.get(job.job_id, ())
                    if a in state.active and a not in taken and state.allocations[a].preemption is None)
    if not allocs:
        return None
    cands = []
    for alloc_id in allocs:
        rec = state.allocations[alloc_id]
        victim = state.jobs[rec.job_id]
        cands.append(Candidate(
            rec=rec, victim=victim, reason="Backfill",
            priority=effective_priority(state, victim, now_ms),
            at_risk_gpu_ms=at_risk_gpu_ms(rec, victim, now_ms),
            borrowing=over_guarantee(state, victim.tenant),
            started_ms=min(rec.started.values(), default=rec.placed_ms),
        ))
    # least work at risk first, then smallest, most recently started (borrowing and priority
    # do not matter: every one of them agreed to leave)
    cands.sort(key=lambda c: c.sort_key()[2:])
    view = state.fleet.trial() if fleet is None else fleet
    request = state.gang_request(job)
    placement_policy = state.config.policy.placement_policy

    def fits(chosen: list[Candidate]) -> bool:
        released = frozenset(c.rec.allocation_id for c in chosen)
        return isinstance(view.place(request, placement_policy, exclude=exclude,
                                     assume_released=released, explain=False), Placement)

    if not fits(cands):
        return None
    result = Plan(considered=len(cands))
    chosen = smallest_sufficient(cands, fits, result.pruned)
    result.victims = chosen
    return result
