"""Choosing victims for a blocked job: who may be evicted, in which order, and the smallest
sufficient set.

Eligible victims are active, preemptible allocations not already being preempted, that are
lower in effective priority (within the tenant, or cluster-wide when the policy's scope is
`cluster`) — reason `Priority` — or that belong to another tenant running above its guarantee
while the blocked job's tenant stays within its own — reason `Reclaim`. Minimum runtime,
eviction budgets and disruption budgets exclude candidates (and say so).

Order: borrowers first, then lowest priority, then least work at risk since the last
checkpoint, then smallest gang, then most recently started, then allocation id. The chosen set
is the shortest prefix of that order whose release makes the job placeable (found by binary
search), then pruned of every victim the job does not actually need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.domain.ledger import AllocationRecord, JobRecord, Ledger
from services.placement import Placement
from services.scheduler.queue import effective_priority

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Candidate:
    rec: AllocationRecord
    victim: JobRecord
    reason: str
    at_risk_gpu_ms: int
    borrowing: bool
    started_ms: int

    def sort_key(self) -> tuple:
        return (
            0 if self.borrowing else 1,
            self.victim.priority,
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
            "priority": self.victim.priority,
            "gpus": self.rec.gpu_milli / 1000,
            "borrowing": self.borrowing,
            "at_risk_gpu_s": self.at_risk_gpu_ms / 1000,
            "reason": self.reason,
        }


@dataclass
class Plan:
    victims: list[Candidate] = field(default_factory=list)
    declined: tuple[str, str] | None = None
    excluded: list[dict[str, Any]] = field(default_factory=list)
    pruned: list[dict[str, Any]] = field(default_factory=list)
    considered: int = 0

    def details(self) -> dict[str, Any]:
        return {
            "victims": [c.describe() for c in self.victims],
            "candidates_considered": self.considered,
            "not_needed": self.pruned[:10],
            "excluded": self.excluded[:10],
            "excluded_total": len(self.excluded),
        }


def over_guarantee(state: Ledger, tenant: str) -> bool:
    conf = state.config.tenants.get(tenant)
    used = state.tenant_gpu_milli.get(tenant, 0)
    return conf is not None and used > conf.guaranteed_gpu_milli


def at_risk_gpu_ms(rec: AllocationRecord, job: JobRecord, now_ms: int) -> int:
    """Work lost if the allocation died now without a new checkpoint."""
    started = min(rec.started.values(), default=now_ms)
    ran = max(0, now_ms - started)
    interval = job.spec.checkpoint.interval_s * 1000
    since = ran % interval if interval > 0 else ran
    return since * rec.gpu_milli // 1000


def candidates(state: Ledger, job: JobRecord, now_ms: int, excluded: list) -> list[Candidate]:
    policy = state.config.policy
    prio = effective_priority(state, job, now_ms)
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    own = state.config.tenants.get(job.tenant)
    can_reclaim = (
        policy.reclaim
        and own is not None
        and state.tenant_gpu_milli.get(job.tenant, 0) + need <= own.guaranteed_gpu_milli
    )
    out: list[Candidate] = []
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        victim = state.jobs[rec.job_id]
        if rec.preemption is not None or victim.job_id == job.job_id:
            continue
        reason = None
        if can_reclaim and victim.tenant != job.tenant and over_guarantee(state, victim.tenant):
            reason = "Reclaim"
        elif victim.priority < prio and (
            policy.preemption_scope == "cluster" or victim.tenant == job.tenant
        ):
            reason = "Priority"
        if reason is None:
            continue
        started = min(rec.started.values(), default=rec.placed_ms)
        why_not = None
        if not victim.preemptible:
            why_not = ("NonPreemptible", f"class {victim.spec.priority_class} is not preemptible")
        elif policy.min_runtime_s and now_ms - started < policy.min_runtime_s * 1000:
            why_not = (
                "MinRuntime",
                f"ran {(now_ms - started) / 1000:.0f}s of the {policy.min_runtime_s}s minimum",
            )
        elif policy.eviction_budget_per_hour and sum(
            1 for p in victim.preemptions if p.at_ms > now_ms - HOUR_MS
        ) >= policy.eviction_budget_per_hour:
            why_not = (
                "EvictionBudget",
                f"already evicted {policy.eviction_budget_per_hour} times in the last hour",
            )
        elif victim.spec.min_available and len(rec.members) - 1 < victim.spec.min_available:
            why_not = (
                "DisruptionBudget",
                f"service keeps at least {victim.spec.min_available} of {len(rec.members)} members",
            )
        if why_not is not None:
            excluded.append({"job": victim.job_id, "reason": why_not[0], "message": why_not[1]})
            continue
        out.append(
            Candidate(
                rec=rec,
                victim=victim,
                reason=reason,
                at_risk_gpu_ms=at_risk_gpu_ms(rec, victim, now_ms),
                borrowing=over_guarantee(state, victim.tenant),
                started_ms=started,
            )
        )
    out.sort(key=Candidate.sort_key)
    return out


def plan(state: Ledger, job: JobRecord, now_ms: int, taken: set[str]) -> Plan:
    """The smallest sufficient victim set for `job`, or why there is none."""
    result = Plan()
    cands = [c for c in candidates(state, job, now_ms, result.excluded) if c.rec.allocation_id not in taken]
    result.considered = len(cands)
    request = state.gang_request(job)
    placement_policy = state.config.policy.placement_policy
    exclude = state.nominated_nodes(except_jobs={job.job_id})

    def fits(chosen: list[Candidate]) -> bool:
        released = frozenset(c.rec.allocation_id for c in chosen)
        placed = state.fleet.place(
            request, placement_policy, exclude=exclude, assume_released=released
        )
        return isinstance(placed, Placement)

    if not cands or not fits(cands):
        why = "no eligible victims" if not cands else (
            f"evicting all {len(cands)} eligible allocations would still not make room"
        )
        result.declined = ("NoVictims", why)
        return result
    lo, hi = 1, len(cands)
    while lo < hi:  # shortest sufficient prefix
        mid = (lo + hi) // 2
        if fits(cands[:mid]):
            hi = mid
        else:
            lo = mid + 1
    chosen = cands[:lo]
    for c in reversed(list(chosen)):
        trial = [x for x in chosen if x is not c]
        if trial and fits(trial):
            chosen = trial
            result.pruned.append({**c.describe(), "why": "not needed once the others are evicted"})
    max_lost = state.config.policy.max_lost_gpu_hours
    at_risk = sum(c.at_risk_gpu_ms for c in chosen)
    if max_lost is not None and at_risk > max_lost * HOUR_MS:
        result.declined = (
            "LostWorkBound",
            f"victims risk {at_risk / HOUR_MS:.2f} GPU-hours of work; bound is {max_lost:g}",
        )
        result.victims = chosen
        return result
    result.victims = chosen
    return result
