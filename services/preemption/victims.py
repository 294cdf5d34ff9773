"""Choosing victims for a blocked job: who may be evicted, in which order, and the smallest
sufficient set.

Eligible victims are active, preemptible allocations not already being preempted, that are
lower in effective priority than the blocked job's own (base) priority — within the tenant,
or cluster-wide when the policy's scope is `cluster`, where a victim of another tenant must
belong to a tenant running above its guarantee and the victims together take no more than
it borrows (guarantees are never taken by priority; a tenant pushed below its guarantee
would reclaim from the beneficiary's right back) — reason `Priority`; or that belong to
another tenant running above its guarantee while the blocked job's tenant stays within its
own — reason `Reclaim`. Aging raises a job's effective priority, which protects it from
eviction and moves it up the queue, but never gives it the right to evict: so two jobs can
never take turns evicting each other. A job also never evicts the job that evicted it within
the last hour (`PreemptionLoop`). Minimum runtime, eviction budgets and disruption budgets
exclude candidates (and say so, with when they lapse).

Order: borrowers first, then lowest effective priority, then least work at risk since the
last checkpoint, then smallest gang, then most recently started, then allocation id. The
chosen set comes from the smallest "size tier": victims no larger than the smallest gang size
that can make room together (so a 64-GPU gang is never taken while smaller victims suffice);
within it, the shortest prefix of that order whose release makes the job placeable (binary
search, topology included), then pruned of every victim the job does not actually need.

The grounds, exclusions and order keys are data in `services.preemption.rules` (`GROUNDS`,
`EXCLUSIONS`, `ORDER`); this module applies them (`scene` -> `grounded` -> `protection` ->
sort) and searches for the victim set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gpuledger.events.reasons import DeclineReason, ExclusionReason, PreemptionReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy import slurm_priority
from gpuledger.services.domain.policy.queue import effective_priority
from gpuledger.services.domain.tooling.timefmt import instant
from gpuledger.services.placement import Placement, UnknownAllocation
from gpuledger.services.preemption.rules import (
    HOUR_MS,
    LAPSING,
    Candidate,
    Scene,
    backfill_key,
    evictions_last_hour,
    exclusions,
    grounds,
)

__all__ = ["HOUR_MS", "LAPSING", "Candidate", "Exclusion", "Plan", "evictions_last_hour", "plan"]


@dataclass(frozen=True)
class Exclusion:
    """A candidate a rule of `rules.EXCLUSIONS` protects, and why."""

    candidate: Candidate
    code: ExclusionReason
    message: str
    until_ms: int | None = None
    """When the exclusion lapses (MinRuntime, EvictionBudget), else None."""

    def describe(self) -> dict[str, Any]:
        out = {
            "job": self.candidate.victim.job_id,
            "reason": self.code,
            "message": self.message,
            "gpus": self.candidate.rec.gpu_milli / 1000,
        }
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


def releasing_by_tenant(
    state: Ledger, taken: set[str] | frozenset[str] = frozenset()
) -> dict[str, int]:
    """GPU capacity per tenant in active allocations already being preempted or in `taken`."""
    out: dict[str, int] = {}
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        if rec.preemption is not None or alloc_id in taken:
            leaving = rec.leaving() if alloc_id not in taken else None
            milli = rec.gpu_milli
            if leaving is not None:  # an elastic gang shrinking gives up only those members
                milli = milli * len(leaving) // len(rec.members)
            out[rec.tenant] = out.get(rec.tenant, 0) + milli
    return out


def at_risk_gpu_ms(rec: AllocationRecord, job: JobRecord, now_ms: int) -> int:
    """Work lost if the allocation died now without a new checkpoint."""
    started = min(rec.started.values(), default=now_ms)
    ran = max(0, now_ms - started)
    interval = job.spec.checkpoint.interval_s * 1000
    since = ran % interval if interval > 0 else ran
    return since * rec.gpu_milli // 1000


def candidate(
    state: Ledger,
    rec: AllocationRecord,
    victim: JobRecord,
    reason: PreemptionReason,
    now_ms: int,
    borrowing: bool,
) -> Candidate:
    """The allocation as a candidate victim on `reason`: its job's effective priority, the
    work it would lose now, and when its run started."""
    return Candidate(
        rec=rec,
        victim=victim,
        reason=reason,
        priority=effective_priority(state, victim, now_ms),
        at_risk_gpu_ms=at_risk_gpu_ms(rec, victim, now_ms),
        borrowing=borrowing,
        started_ms=min(rec.started.values(), default=rec.placed_ms),
    )


def scene(state: Ledger, job: JobRecord, now_ms: int, taken: set[str] | frozenset[str]) -> Scene:
    """Facts every rule reads, computed once per plan."""
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    own = state.config.tenants.get(job.tenant)
    can_reclaim = (
        state.config.policy.reclaim
        and own is not None
        and state.tenant_gpu_milli.get(job.tenant, 0) + need <= own.guaranteed_gpu_milli
    )
    return Scene(
        state=state,
        job=job,
        now_ms=now_ms,
        releasing=releasing_by_tenant(state, taken),
        can_reclaim=can_reclaim,
        evicted_me=frozenset(p.by for p in job.preemptions if p.at_ms > now_ms - HOUR_MS and p.by),
    )


def count_replicas(s: Scene, service: str, taken: set[str] | frozenset[str]) -> None:
    """Fill the scene's `replicas_up` and `budget_left` for `service`."""
    if service in s.replicas_up:
        return
    up = going = 0
    for r in s.state.replicas_of(service):
        rec = s.state.allocations.get(r.allocation_id) if r.allocation_id is not None else None
        if rec is None or rec.ended:
            continue
        if rec.preemption is not None or rec.allocation_id in taken:
            going += 1
        else:
            up += 1
    s.replicas_up[service] = (up, going)
    s.budget_left[service] = up - s.state.jobs[service].spec.min_available


def count_borrowed(s: Scene, tenant: str) -> None:
    """Fill the scene's `borrowed_left` for `tenant`: what it runs above its guarantee, not
    counting capacity already being released."""
    if tenant in s.borrowed_left:
        return
    conf = s.state.config.tenants.get(tenant)
    used = s.state.tenant_gpu_milli.get(tenant, 0) - s.releasing.get(tenant, 0)
    s.borrowed_left[tenant] = max(0, used - (conf.guaranteed_gpu_milli if conf else 0))


def grounded(s: Scene, rec: AllocationRecord) -> Candidate | None:
    """The allocation as a candidate on the first ground (`rules.GROUNDS`) that holds for it,
    or None: it is being preempted already, it is the job's own, or no ground holds."""
    state, victim = s.state, s.state.jobs[rec.job_id]
    if rec.preemption is not None or victim.job_id == s.job.job_id:
        return None
    borrowing = over_guarantee(state, victim.tenant, s.releasing)
    ground = next((g for g in grounds(state) if g.holds(s, victim, borrowing)), None)
    if ground is None:
        return None
    return candidate(state, rec, victim, ground.reason, s.now_ms, borrowing)


def protection(s: Scene, cand: Candidate) -> Exclusion | None:
    """The first exclusion rule (`rules.EXCLUSIONS`) that protects the candidate, or None."""
    for rule in exclusions(s.state):
        verdict = rule.protects(s, cand)
        if verdict is not None:
            return Exclusion(cand, rule.code, verdict.message, verdict.until_ms)
    return None


def candidates(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    exclusions: list[Exclusion],
    taken: set[str] | frozenset[str] = frozenset(),
) -> list[Candidate]:
    """Eligible victims for `job` in victim order (`rules.ORDER`); every candidate a rule
    protects is appended to `exclusions` instead (in allocation id order). Candidates are
    judged in victim order, so a service's disruption budget goes to its first replicas, and
    what another tenant borrows goes to its first `Priority` victims (the offered set never
    takes it below its guarantee, so any subset the search picks does not either)."""
    s = scene(state, job, now_ms, taken)
    grounds: list[Candidate] = []
    for alloc_id in sorted(state.active):
        cand = grounded(s, state.allocations[alloc_id])
        if cand is not None:
            grounds.append(cand)
            if cand.victim.service is not None:
                count_replicas(s, cand.victim.service, taken)
            if cand.victim.tenant != job.tenant:
                count_borrowed(s, cand.victim.tenant)
    grounds.sort(key=Candidate.sort_key)
    out: list[Candidate] = []
    excluded_here: list[Exclusion] = []
    for cand in grounds:
        excluded = protection(s, cand)
        if excluded is not None:
            excluded_here.append(excluded)
        else:
            out.append(cand)
            if cand.victim.service is not None:
                s.budget_left[cand.victim.service] -= 1
            if cand.reason == PreemptionReason.Priority and cand.victim.tenant != job.tenant:
                s.borrowed_left[cand.victim.tenant] -= cand.rec.gpu_milli
    excluded_here.sort(key=lambda x: x.candidate.rec.allocation_id)
    exclusions.extend(excluded_here)
    return out


def smallest_sufficient(
    ordered: list[Candidate], fits, pruned: list[dict[str, Any]]
) -> list[Candidate]:
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


MAX_MOVES = 4
"""At most this many allocations are moved for one blocked job (`relocation`)."""


def unrivalled(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    taken: set[str] | frozenset[str],
) -> list[Candidate]:
    """Allocations of other tenants within their guarantees that no ground makes candidates
    (their priority is not below the job's) and no rule of `rules.EXCLUSIONS` protects: they
    may not be evicted for the job, but they may be moved (`relocation`), in victim order.
    None under the `slurm` profile: Slurm never moves running work."""
    if slurm_priority.profile(state) is not None:
        return []
    s = scene(state, job, now_ms, taken)
    out: list[Candidate] = []
    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        victim = state.jobs[rec.job_id]
        if rec.preemption is not None or alloc_id in taken or victim.tenant == job.tenant:
            continue
        borrowing = over_guarantee(state, victim.tenant, s.releasing)
        if borrowing or any(g.holds(s, victim, borrowing) for g in grounds(state)):
            continue  # a borrower, or a candidate judged by `candidates` already
        if victim.service is not None:
            count_replicas(s, victim.service, taken)
        cand = candidate(state, rec, victim, PreemptionReason.Defragment, now_ms, False)
        if protection(s, cand) is None:
            out.append(cand)
    out.sort(key=Candidate.sort_key)
    return out


def relocation(
    state: Ledger,
    job: JobRecord,
    request,
    placement_policy: str,
    exclude: frozenset[str],
    exclusions: list[Exclusion],
    fleet=None,
    others=None,
) -> list[Candidate]:
    """A job within its tenant's guarantee that is blocked by fragmentation alone: move
    allocations of tenants that are themselves within their guarantees (excluded as
    `WithinGuarantee`) when, with them gone, the job fits, and the moved gangs then fit again
    elsewhere at once — nobody's guarantee is reduced, each mover only pays a checkpoint.
    One allocation when one will do (victim order); else several (up to `MAX_MOVES`): the
    shortest run in victim order whose release makes room, pruned of every one the others
    make unnecessary, so a tenant sitting exactly at its guarantee in small gangs on every
    node cannot starve another's guarantee. `others` (a callable giving `unrivalled`: work
    of tenants within their guarantees at the job's priority or above, protected by no rule)
    are tried after the excluded candidates, only when the fleet has as many idle GPUs as
    the job needs (fragmentation alone blocks it; a move never adds idle capacity). Returns
    those victims (reason `Defragment`), or [] when no such move exists."""
    own = state.config.tenants.get(job.tenant)
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    if own is None or state.tenant_gpu_milli.get(job.tenant, 0) + need > own.guaranteed_gpu_milli:
        return []
    guarded = sorted(
        (x.candidate for x in exclusions if x.code == ExclusionReason.WithinGuarantee),
        key=Candidate.sort_key,
    )
    if others is not None and (
        job.spec.resources.mig_profile or need <= state.fleet.free_gpu_milli()
    ):
        guarded += others()
    fleet = state.fleet.trial() if fleet is None else fleet
    present = _present(fleet, guarded)
    chosen = _Moves(fleet, job, request, placement_policy, exclude).fewest(present)
    if not chosen:
        return []
    gone = {id(c) for c, _ in chosen}
    exclusions[:] = [x for x in exclusions if id(x.candidate) not in gone]
    return [dataclasses.replace(c, reason=PreemptionReason.Defragment) for c, _ in chosen]


def _present(fleet: Any, cands: list[Candidate]) -> list[tuple[Candidate, Any]]:
    """Each candidate with its allocation in the fleet view, but those already released in
    the outlook of preemptions under way."""
    out = []
    for cand in cands:
        try:
            out.append((cand, fleet.allocation(cand.rec.allocation_id)))
        except UnknownAllocation:
            continue
    return out


@dataclass(frozen=True)
class _Moves:
    """Trial moves of running gangs out of one blocked job's way, on one fleet view. A move
    is a list of (candidate, its allocation in the view)."""

    fleet: Any
    job: JobRecord
    request: Any
    policy: str
    exclude: frozenset[str]

    def _place_without(self, released: tuple[str, ...]) -> Any:
        """Where the job would go with the `released` allocations gone (or why not)."""
        return self.fleet.place(
            self.request,
            self.policy,
            exclude=self.exclude,
            assume_released=released,
            explain=False,
        )

    def fits_without(self, chosen: list[tuple[Candidate, Any]]) -> bool:
        """Whether the job fits with the `chosen` allocations released."""
        released = tuple(c.rec.allocation_id for c, _ in chosen)
        return isinstance(self._place_without(released), Placement)

    def work(self, chosen: list[tuple[Candidate, Any]]) -> bool:
        """Whether, with `chosen` released, the job fits and each moved gang fits again."""
        released = tuple(c.rec.allocation_id for c, _ in chosen)
        placed = self._place_without(released)
        if not isinstance(placed, Placement):
            return False
        moved = self.fleet.fork()  # trial: the victims gone, the job placed, the victims again
        for alloc_id in released:
            moved.release(alloc_id)
        moved.allocate("~relocation", self.job.tenant, placed, self.request)
        for i, (_, held) in enumerate(chosen):
            again = moved.place(held.request, self.policy, exclude=self.exclude, explain=False)
            if not isinstance(again, Placement):
                return False
            moved.allocate(f"~moved-{i}", held.tenant, again, held.request)
        return True

    def fewest(self, present: list[tuple[Candidate, Any]]) -> list[tuple[Candidate, Any]] | None:
        """One move that works (victim order); else the shortest prefix (victim order) that
        makes room, without every move the others make unnecessary, if it has at most
        `MAX_MOVES` and works; else None."""
        one = next(([x] for x in present if self.work([x])), None)
        if one is not None or len(present) < 2:
            return one
        for n in range(2, min(len(present), MAX_MOVES * 4) + 1):
            if self.fits_without(present[:n]):
                prefix = self._pruned(present[:n])
                return prefix if len(prefix) <= MAX_MOVES and self.work(prefix) else None
        return None

    def _pruned(self, prefix: list[tuple[Candidate, Any]]) -> list[tuple[Candidate, Any]]:
        """`prefix` without each move (last first) the job fits without."""
        for x in reversed(list(prefix)):
            trial = [y for y in prefix if y is not x]
            if trial and self.fits_without(trial):
                prefix = trial
        return prefix


def plan(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    taken: set[str],
    exclude: frozenset[str] | None = None,
    fleet=None,
    spare: frozenset[str] = frozenset(),
) -> Plan:
    """The smallest sufficient victim set for `job`, or why there is none. `exclude`: nodes
    off limits (default: every node nominated to another job); `fleet`: the trial view to
    plan on (default: a fresh view of the folded fleet, which is only read); `spare`:
    allocations not to offer (a set that would not raise the standing had them)."""
    fleet = state.fleet.trial() if fleet is None else fleet
    result = Plan()
    cands = [
        c
        for c in candidates(state, job, now_ms, result.exclusions, taken)
        if c.rec.allocation_id not in taken and c.rec.allocation_id not in spare
    ]
    result.considered = len(cands)
    request = state.gang_request(job)
    placement_policy = state.config.policy.placement_policy
    if exclude is None:
        exclude = state.nominated_nodes(except_jobs={job.job_id}, now_ms=now_ms)
    result.retry_at_ms = min(
        (x.until_ms for x in result.exclusions if x.until_ms is not None), default=None
    )

    def fits(chosen: list[Candidate]) -> bool:
        released = frozenset(c.rec.allocation_id for c in chosen)
        placed = fleet.place(
            request, placement_policy, exclude=exclude, assume_released=released, explain=False
        )
        return isinstance(placed, Placement)

    shrink = shrink_plan(cands, request, placement_policy, exclude, fleet, result.pruned)
    if shrink:
        result.victims = shrink
        result.declined = lost_work_bound(state, shrink)
        return result
    if not cands or not fits(cands):
        move = relocation(
            state,
            job,
            request,
            placement_policy,
            exclude,
            result.exclusions,
            fleet,
            others=lambda: unrivalled(state, job, now_ms, taken),
        )
        if move:
            result.victims = move
            return result
        result.declined = no_room(
            [c for c in cands if held_in(fleet, c.rec.allocation_id)],
            result.exclusions,
            fits,
            fleet,
        )
        return result
    tier = size_tier(cands, fits, result.rejected_tiers)
    chosen = smallest_sufficient(tier, fits, result.pruned)
    result.victims = chosen
    result.declined = lost_work_bound(state, chosen)
    return result


def held_in(fleet, alloc_id: str) -> bool:
    """Whether the trial fleet still holds the allocation (the outlook releases the victims of
    preemptions under way)."""
    try:
        fleet.allocation(alloc_id)
    except UnknownAllocation:
        return False
    return True


def above_minimum(c: Candidate) -> tuple[int, ...]:
    """Ranks of an elastic gang's members above its `min_members`, highest first (a
    service replica or a gang at its minimum has none)."""
    victim, rec = c.victim, c.rec
    spare = len(rec.members) - victim.spec.members_min()
    if victim.service is not None or spare <= 0:
        return ()
    return tuple(sorted((m.rank for m in rec.members), reverse=True)[:spare])


def shrink_plan(
    cands: list[Candidate],
    request,
    placement_policy: str,
    exclude: frozenset[str],
    fleet,
    pruned: list[dict[str, Any]],
) -> list[Candidate]:
    """Members above the minimum of elastic gangs, before any whole gang: in victim order,
    each gang gives up as few of its spare members (highest ranks first) as make the job
    placeable, or all of them and the next gang is asked too; then every gang the others
    make unnecessary is left whole (recorded in `pruned`). [] when all the spare members
    together do not make room (whole gangs are then chosen as before)."""
    spare = [(c, above_minimum(c)) for c in cands]
    spare = [(c, x) for c, x in spare if x]
    if not spare:
        return []

    def fits(chosen: list[tuple[Candidate, tuple[int, ...]]]) -> bool:
        view = fleet.fork()
        for c, ranks in chosen:
            try:
                held = view.allocation(c.rec.allocation_id)
            except UnknownAllocation:
                return False  # released already in the outlook of preemptions under way
            keep = len(held.placement.members) - len(ranks)
            view.release(c.rec.allocation_id)
            kept = Placement(members=held.placement.members[:keep])
            view.allocate(c.rec.allocation_id, held.tenant, kept, held.request)
        placed = view.place(request, placement_policy, exclude=exclude, explain=False)
        return isinstance(placed, Placement)

    chosen: list[tuple[Candidate, tuple[int, ...]]] = []
    found = False
    for c, extra in spare:
        for n in range(1, len(extra) + 1):
            if fits([*chosen, (c, extra[:n])]):
                chosen.append((c, extra[:n]))
                found = True
                break
        if found:
            break
        chosen.append((c, extra))
    if not found:
        return []
    for x in reversed(chosen[:-1]):
        trial = [y for y in chosen if y is not x]
        if fits(trial):
            chosen = trial
            pruned.append({**x[0].describe(), "why": "not needed once the others shrink"})
    out = []
    for c, ranks in chosen:
        share = len(ranks) / len(c.rec.members)
        out.append(
            dataclasses.replace(
                c, ranks=tuple(sorted(ranks)), at_risk_gpu_ms=int(c.at_risk_gpu_ms * share)
            )
        )
    return out


def no_room(
    cands: list[Candidate], exclusions: list[Exclusion], fits, fleet=None
) -> tuple[str, str]:
    """Why no victim set makes room: `NoVictims` with the exclusions counted by code, or the
    code of the lapsing exclusion (`MinRuntime`, `EvictionBudget`) that lapses first when
    evicting its victim too would make room."""
    lapsing = _held([x for x in exclusions if x.until_ms is not None], fleet)
    if lapsing and fits(cands + [x.candidate for x in lapsing]):
        # room exists, but only behind exclusions that lapse with time: say which
        first = min(lapsing, key=lambda x: (x.until_ms, x.candidate.rec.allocation_id))
        return first.code, (
            f"evicting {first.candidate.victim.job_id} would make room but it is protected: "
            f"{first.message}; eligible at {instant(first.until_ms)}"
        )
    ending = _held([x for x in exclusions if x.code == ExclusionReason.EndsAtTimeLimit], fleet)
    if ending and fits(cands + [x.candidate for x in ending]):
        # room comes anyway when runs reach their time limits: waiting is as quick
        names = "; ".join(f"{x.candidate.victim.job_id} {x.message}" for x in ending[:3])
        return DeclineReason.EndsAtTimeLimit, (
            f"evicting would make room, but the runs in the way end at their time limits "
            f"within an eviction's grace: {names}"
        )
    return DeclineReason.NoVictims, _no_victims(cands, exclusions)


def _no_victims(cands: list[Candidate], exclusions: list[Exclusion]) -> str:
    """No victims, or not enough, and the exclusions counted by code."""
    why = (
        "no eligible victims"
        if not cands
        else (f"evicting all {len(cands)} eligible allocations would still not make room")
    )
    if exclusions:
        counts: dict[str, int] = {}
        for x in exclusions:
            counts[x.code] = counts.get(x.code, 0) + 1
        why += "; excluded: " + ", ".join(f"{n} {code}" for code, n in sorted(counts.items()))
    return why


def _held(exclusions: list[Exclusion], fleet: Any) -> list[Exclusion]:
    """The exclusions whose victim still holds its capacity in the fleet view (one already
    released in the outlook, a victim of a preemption under way, frees nothing); all of
    them without a view."""
    if fleet is None:
        return exclusions
    return [x for x in exclusions if held_in(fleet, x.candidate.rec.allocation_id)]


def size_tier(cands: list[Candidate], fits, rejected: list[dict[str, Any]]) -> list[Candidate]:
    """The candidates no larger than the smallest size whose candidates can make room
    together (so a 64-GPU gang is never taken while smaller victims suffice); every larger
    one is recorded in `rejected`."""
    tier = cands
    for size in sorted({c.rec.gpu_milli for c in cands}):
        subset = [c for c in cands if c.rec.gpu_milli <= size]
        if subset is cands or len(subset) == len(cands) or fits(subset):
            tier = subset
            break
    largest = max(x.rec.gpu_milli for x in tier)
    for c in cands:
        if c.rec.gpu_milli > largest:
            rejected.append(
                {**c.describe(), "why": "a larger gang than needed: smaller victims suffice"}
            )
    return tier


def lost_work_bound(state: Ledger, chosen: list[Candidate]) -> tuple[str, str] | None:
    """`LostWorkBound` when the chosen victims risk more work than `policy.max_lost_gpu_hours`."""
    max_lost = state.config.policy.max_lost_gpu_hours
    at_risk = sum(c.at_risk_gpu_ms for c in chosen)
    if max_lost is None or at_risk <= max_lost * HOUR_MS:
        return None
    return (
        DeclineReason.LostWorkBound,
        f"victims risk {at_risk / HOUR_MS:.2f} GPU-hours of work since their last checkpoint; "
        f"bound is {max_lost:g}",
    )


def backfill_plan(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    taken: set[str],
    exclude: frozenset[str],
    fleet=None,
) -> Plan | None:
    """The smallest set of the work backfilled on `job`'s reservation whose eviction makes
    `job` placeable now (reason `Backfill`), or None when evicting all of it would not.

    Backfilled gangs took reserved capacity on the condition that they leave when the
    reserving job lands, so minimum runtime and eviction budgets do not protect them (they
    are preemptible and have no disruption budget, or they would not have been placed there)."""
    allocs = sorted(
        a
        for a in state.backfills.get(job.job_id, ())
        if a in state.active and a not in taken and state.allocations[a].preemption is None
    )
    if not allocs:
        return None
    cands = []
    for alloc_id in allocs:
        rec = state.allocations[alloc_id]
        victim = state.jobs[rec.job_id]
        borrowing = over_guarantee(state, victim.tenant)
        cands.append(candidate(state, rec, victim, PreemptionReason.Backfill, now_ms, borrowing))
    # least work at risk first, then smallest, most recently started (borrowing and priority
    # do not matter: every one of them agreed to leave)
    cands.sort(key=backfill_key)
    view = state.fleet.trial() if fleet is None else fleet
    request = state.gang_request(job)
    placement_policy = state.config.policy.placement_policy

    def fits(chosen: list[Candidate]) -> bool:
        released = frozenset(c.rec.allocation_id for c in chosen)
        return isinstance(
            view.place(
                request, placement_policy, exclude=exclude, assume_released=released, explain=False
            ),
            Placement,
        )

    if not fits(cands):
        return None
    result = Plan(considered=len(cands))
    chosen = smallest_sufficient(cands, fits, result.pruned)
    result.victims = chosen
    return result
