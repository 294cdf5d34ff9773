"""The measure every preemption must strictly raise (issue 29): preemption terminates by
construction.

The *standing* of the fleet has three parts, compared lexicographically:

1. `G`, the guaranteed capacity in use: the sum over tenants of
   `min(guaranteed, holds + credit)`, where
   - `holds` is the capacity of the tenant's running allocations (not being preempted) that
     are each no larger than its guarantee (a gang larger than the guarantee can only ever
     run borrowed, so it holds none of it);
   - `credit` is the capacity of the tenant's jobs that wait (or are being preempted)
     because a higher-priority job *of the same tenant* evicted them (`Priority`), while that
     job runs: a tenant reordering its own work by priority does not give up its guarantee.
2. `P`, the priority profile of everything that runs: compared from the highest base
   priority down, more capacity at the first priority where they differ is higher;
3. `H`, the guaranteed capacity actually held: `G` with the credits left out (a job a
   same-tenant preemption evicted reclaiming its place turns a credit into a holding).

A preemption is requested only when the standing after it (the victims gone, the
beneficiary running) is strictly higher than before; otherwise it is declined with
`WouldCycle`. Every ground the victim rules admit raises it as a rule: `Reclaim` gives the
blocked tenant guaranteed capacity and takes only what the victim's tenant borrows (or runs
in gangs larger than its guarantee); `Priority` inside a tenant keeps `G` (the victims are
credited) and raises `P`; `Priority` across tenants takes only borrowed capacity and raises
`P`. The check catches what the rules do not foresee (a gang that takes its tenant below
its guarantee, equal priorities, credits that vanish with their evictor).

Placing work on idle capacity never lowers the standing, and a move (`Defragment`,
`Consolidate`: the victims are placed again at once) only adds the beneficiary, so neither
needs the check. The standing takes finitely many values, so between arrivals,
completions, cancellations, node changes and configuration changes only finitely many
preemptions happen: no two jobs take turns (docs/deciders.md, "Preemption terminates").

Base priorities, never effective ones: aging orders the queue, it never grants the right to
evict. Pure: reads the ledger, writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuledger.events.reasons import PreemptionReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger


@dataclass(frozen=True)
class Standing:
    """The standing restricted to some tenants (enough to compare two states that differ only
    in those tenants' work)."""

    guaranteed: dict[str, int]
    """Per tenant: `min(guaranteed, holds + credit)` (GPU milli)."""
    profile: dict[int, int]
    """GPU milli running per base priority."""
    holding: dict[str, int]
    """Per tenant: `min(guaranteed, holds)`, credits left out (what runs within it)."""

    @property
    def g(self) -> int:
        return sum(self.guaranteed.values())

    @property
    def held(self) -> int:
        return sum(self.holding.values())


@dataclass(frozen=True)
class Verdict:
    """How a preemption changes the standing."""

    improves: bool
    before: Standing
    after: Standing
    level: int | None
    """The priority whose running capacity decided when `G` did not (None: `G` decided, or
    the capacity actually held within guarantees, credits left out, did)."""

    def details(self) -> dict:
        tenants = sorted(set(self.before.guaranteed) | set(self.after.guaranteed))
        return {
            "improves": self.improves,
            "guaranteed_in_use_gpus": {
                "before": self.before.g / 1000,
                "after": self.after.g / 1000,
            },
            "by_tenant": {
                t: {
                    "before": self.before.guaranteed.get(t, 0) / 1000,
                    "after": self.after.guaranteed.get(t, 0) / 1000,
                }
                for t in tenants
            },
            "decided_at_priority": self.level,
        }

    def message(self) -> str:
        g0, g1 = self.before.g, self.after.g
        lost = "; ".join(
            f"tenant {t} {self.before.guaranteed[t] / 1000:g} -> "
            f"{self.after.guaranteed.get(t, 0) / 1000:g}"
            for t in sorted(self.before.guaranteed)
            if self.after.guaranteed.get(t, 0) < self.before.guaranteed[t]
        )
        head = f"guaranteed GPUs in use {g0 / 1000:g} -> {g1 / 1000:g}" + (
            f" ({lost})" if lost else ""
        )
        if g0 != g1:
            return head
        if self.level is None:
            return (
                f"{head}; GPUs running by priority unchanged; guaranteed GPUs actually held "
                f"{self.before.held / 1000:g} -> {self.after.held / 1000:g}"
            )
        r0 = self.before.profile.get(self.level, 0) / 1000
        r1 = self.after.profile.get(self.level, 0) / 1000
        return f"{head}; then GPUs running at priority {self.level}: {r0:g} -> {r1:g}"


def _guarantee(state: Ledger, tenant: str) -> int:
    conf = state.config.tenants.get(tenant)
    return conf.guaranteed_gpu_milli if conf is not None else 0


_Evicted = tuple[JobRecord, int, str, str | None]
"""An evicted job, the milli-GPUs it no longer runs, the reason and its evictor."""


def standing(
    state: Ledger,
    tenants: Iterable[str],
    gone: dict[str, tuple[str, str]] | None = None,
    placed: Iterable[JobRecord] = (),
    leaving: dict[str, tuple[int, ...]] | None = None,
) -> Standing:
    """The standing of `tenants`' work; `gone`: allocations that stop running, each with the
    (reason, beneficiary) of its eviction; `placed`: waiting jobs that run in addition (each
    its whole gang at its base priority); `leaving`: of the allocations in `gone`, those that
    only shrink (an elastic gang gives up these ranks and runs on with the others). A
    partial preemption under way counts the same way (`AllocationRecord.leaving`)."""
    gone = gone or {}
    leaving = leaving or {}
    tenants = sorted(set(tenants))
    limit = {t: _guarantee(state, t) for t in tenants}
    holds = dict.fromkeys(tenants, 0)
    profile: dict[int, int] = {}
    running: set[str] = set()  # jobs that run (evictors count for their victims' credit)
    evicted: list[_Evicted] = []

    def run(job: JobRecord, tenant: str, milli: int) -> None:
        running.add(job.job_id)
        profile[job.priority] = profile.get(job.priority, 0) + milli
        if milli <= limit[tenant]:
            holds[tenant] += milli

    for alloc_id in sorted(state.active):
        rec = state.allocations[alloc_id]
        if rec.tenant not in holds:
            continue
        job = state.jobs[rec.job_id]
        stays = rec.gpu_milli
        left = _leaves(rec, gone, leaving)
        if left is not None:
            milli, reason, by, whole = left
            evicted.append((job, milli, reason, by))
            if whole:
                continue
            stays -= milli  # the members that stay run on at the gang's priority
        run(job, rec.tenant, stays)
    landing = {j.job_id: j for j in placed if j.tenant in holds}
    for job_id in sorted(landing):
        job = landing[job_id]
        run(job, job.tenant, _need(job))
    evicted += _evicted_waiting(state, holds, landing)
    credit = _credit(state, tenants, evicted, running, limit)
    return Standing(
        guaranteed={t: min(limit[t], holds[t] + credit[t]) for t in tenants},
        profile=profile,
        holding={t: min(limit[t], holds[t]) for t in tenants},
    )


def _need(job: JobRecord) -> int:
    """The milli-GPUs of a job's smallest gang."""
    return job.spec.resources.gpu_milli_total() * job.spec.members_min()


def _leaves(
    rec: AllocationRecord,
    gone: dict[str, tuple[str, str]],
    leaving: dict[str, tuple[int, ...]],
) -> tuple[int, str, str | None, bool] | None:
    """(milli-GPUs that stop running, reason, evictor, whether the whole gang stops) of an
    allocation in `gone` or with a preemption under way (`leaving`, or the preemption's
    ranks: only those leave); None for one that runs on."""
    alloc_id = rec.allocation_id
    if alloc_id in gone:
        reason, by = gone[alloc_id]
        ranks = leaving.get(alloc_id)
    elif rec.preemption is not None:
        reason, by = rec.preemption.reason, rec.preemption.beneficiary
        ranks = rec.leaving()
    else:
        return None
    if not ranks:
        return rec.gpu_milli, reason, by, True
    return rec.gpu_milli * len(ranks) // len(rec.members), reason, by, False


def _evicted_waiting(
    state: Ledger, holds: dict[str, int], landing: dict[str, JobRecord]
) -> list[_Evicted]:
    """The waiting jobs of the tenants measured that a preemption evicted (each its whole
    smallest gang, its last eviction's reason and evictor), but those placed in addition."""
    out: list[_Evicted] = []
    for job_id in sorted(state.pending):
        job = state.jobs[job_id]
        if job.tenant in holds and job.preemptions and job_id not in landing:
            last = job.preemptions[-1]
            out.append((job, _need(job), last.reason, last.by))
    return out


def _credit(
    state: Ledger,
    tenants: list[str],
    evicted: list[_Evicted],
    running: set[str],
    limit: dict[str, int],
) -> dict[str, int]:
    """Per tenant, the guaranteed work it gave up to a higher-priority job of its own that
    runs (a tenant reordering its own work by priority keeps its guarantee)."""
    credit = dict.fromkeys(tenants, 0)
    for job, milli, reason, by in evicted:
        evictor = state.jobs.get(by) if by else None
        if (
            reason == PreemptionReason.Priority
            and evictor is not None
            and evictor.tenant == job.tenant
            and by in running
            and milli <= limit[job.tenant]
        ):
            credit[job.tenant] += milli
    return credit


def verdict(
    state: Ledger,
    job: JobRecord,
    victims: Iterable[tuple[str, str, str]],
    decided: dict[str, tuple[str, str]] | None = None,
    landing: Iterable[str] = (),
    leaving: dict[str, tuple[int, ...]] | None = None,
) -> Verdict:
    """How evicting `victims` ((allocation id, tenant, preemption reason) each) for `job`
    and running `job` changes the standing, preemptions under way counted as landed: the
    victims of `decided` ((reason, beneficiary) per allocation: chosen earlier in this
    decision) gone, the beneficiaries `landing` (placed in the outlook) running. `leaving`:
    the victims (of `victims` or `decided`) that only shrink, with the ranks that leave."""
    victims = sorted(victims)
    tenants = {job.tenant} | {t for _, t, _ in victims}
    decided = dict(decided or {})
    landed = [state.jobs[j] for j in sorted(set(landing)) if j in state.pending]
    landed = [j for j in landed if j.job_id != job.job_id]
    before = standing(state, tenants, gone=decided, placed=landed, leaving=leaving)
    gone = {**decided, **{a: (reason, job.job_id) for a, _, reason in victims}}
    after = standing(state, tenants, gone=gone, placed=[*landed, job], leaving=leaving)
    if after.g != before.g:
        return Verdict(after.g > before.g, before, after, None)
    for level in sorted(set(before.profile) | set(after.profile), reverse=True):
        b, a = before.profile.get(level, 0), after.profile.get(level, 0)
        if a != b:
            return Verdict(a > b, before, after, level)
    return Verdict(after.held > before.held, before, after, None)
