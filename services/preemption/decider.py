"""Preemption: for each blocked job (the scheduler recorded a capacity reason), request the
eviction of the smallest sufficient victim set, or record why not.

A job whose nominated capacity is still being released gets nothing new; victims chosen for
one job in a call are not offered to the next. Nothing is preempted when idle capacity will
do. Refusals (`PreemptionDeclined`) are emitted only when their reason changes, so repeated
cycles do not flood the log. A refusal that may lapse with time (a victim's minimum runtime,
an eviction budget window) asks for a wake-up then.

Defragmentation (issue 16, both off unless the policy sets them): a MIG job whose profile no
fixed layout offers first gets an idle GPU re-partitioned (`MigReconfigurationRequested`,
`services.domain.policy.regeometry`, rate-limited per node); a job blocked only by fragmentation
gets a few allocations migrated out of its way (`ConsolidationPlanned` + `PreemptionRequested`
with reason `Consolidate`, `services.preemption.consolidation`) before any victim is chosen.
"""

from __future__ import annotations

import copy

from msgspec import UNSET

from gpuledger.events import (
    ConsolidationMove,
    ConsolidationPlanned,
    Event,
    MigReconfigurationRequested,
    PreemptionDeclined,
    PreemptionRequested,
)
from gpuledger.events.reasons import DeclineReason, PendingReason, PreemptionReason
from gpuledger.services.domain.fold.config import defrag_settings
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.fold.maintenance import closed_nodes, run_bound_s
from gpuledger.services.domain.policy.pending import PREEMPTION_MAY_HELP as BLOCKED
from gpuledger.services.domain.policy.queue import effective_priority, ordered_pending
from gpuledger.services.domain.policy.quota import model_limit_blocks, model_limits_set
from gpuledger.services.domain.policy.regeometry import (
    Regeometry,
    in_window,
    rate_limit_lapses_ms,
    regeometry_for,
)
from gpuledger.services.domain.tooling import reads
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.placement import Placement
from gpuledger.services.preemption import drain
from gpuledger.services.preemption.consolidation import ConsolidationPlan, consolidation_plan
from gpuledger.services.preemption.measure import verdict
from gpuledger.services.preemption.outlook import Outlook
from gpuledger.services.preemption.steps import UNITS
from gpuledger.services.preemption.victims import Plan, backfill_plan, plan

MOVES = frozenset({PreemptionReason.Defragment, PreemptionReason.Consolidate})
"""Victims of these reasons are placed again at once: a move takes nobody's capacity."""


RETRIES = 3
"""Other victim sets tried when the first would not raise the standing."""


def spoilers(p: Plan, v) -> set[str]:
    """The victims of `p` whose tenants would hold less guaranteed capacity (all its
    evicted victims when none would: the priority profile decided)."""
    evicted = [c for c in p.victims if c.reason not in MOVES]
    losing = {t for t, g in v.before.guaranteed.items() if v.after.guaranteed.get(t, 0) < g}
    return {c.rec.allocation_id for c in evicted if c.victim.tenant in losing} or {
        c.rec.allocation_id for c in evicted
    }


def _freed_milli(c) -> int:
    """GPU capacity a victim gives up: the whole gang, or its members that leave."""
    if c.ranks is None:
        return c.rec.gpu_milli
    return c.rec.gpu_milli * len(c.ranks) // len(c.rec.members)


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


class Preemption(LedgerService):
    name = "preemption"
    # derived from what its steps and victim rules read (`steps.UNITS`); victims' minimum
    # runtimes, budgets and the queue order read the clock, so it is asked at every instant
    unaffected_by = reads.unaffected_by(UNITS)
    quiet_until_wakeup = reads.quiet_until_wakeup(UNITS)

    def __init__(self, instance: str = "0", leader_epoch: int = 0) -> None:
        super().__init__(instance, leader_epoch)
        self.retry_at: dict[str, int | None] = {}
        """Per job, when the last refusal to preempt for it may lapse (a minimum runtime,
        an eviction budget window): a wake-up hint for the shell, kept on the service, not
        in the folded state, and never read by `decide`."""

        self.regeometry_at: dict[str, int | None] = {}
        """Per MIG job, when a node's re-geometry rate limit lapses (a wake-up hint, like
        `retry_at`, never read by `decide`)."""

    def cache_defaults(self) -> dict:
        return {"retry_at": {}, "regeometry_at": {}}

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        draining = state.sched.cordoned or state.maintenance
        if draining and (
            drains := drain.requests(self, state, now_ms)
        ):  # the operator's drains and windows in force first (preemption/drain.py)
            return drains
        if not any(state.jobs[j].reason in BLOCKED for j in state.pending):
            return []  # nobody is blocked on capacity: nothing to plan
        queue = ordered_pending(state, now_ms)
        outlook = Outlook(state, now_ms)  # trial view of the fleet, dropped on return
        outlook.model(queue)
        return self._decide(state, now_ms, queue, outlook)

    def _decide(self, state: Ledger, now_ms: int, queue, outlook: Outlook) -> list[Event]:
        defrag = defrag_settings(state.config.policy)
        out: list[Event] = []
        taken: set[str] = set()
        for job in queue:
            if job.reason not in BLOCKED or job.cancel_requested:
                continue
            if job.job_id in outlook.held:
                continue  # capacity already being released for it
            out += self._for_job(state, now_ms, job, outlook, taken, defrag, out)
        return out

    def _for_job(
        self,
        state: Ledger,
        now_ms: int,
        job,
        outlook: Outlook,
        taken: set[str],
        defrag,
        out: list[Event],
    ) -> list[Event]:
        """The answer for one blocked job, the first of: a MIG re-geometry; a decline when
        preemption is off; nothing when idle capacity will do; a decline when preemptions
        under way will make room; a backfill's victims; a consolidation; a victim set (or
        why none). `out`: what this decide answered for the jobs before it."""
        policy = state.config.policy
        if defrag.mig_regeometry and job.reason == PendingReason.MIGPlacementUnavailable:
            handled, events = self._maybe_regeometry(state, now_ms, job, outlook)
            if handled:
                return events
        if not policy.preemption:
            return self._decline(
                state,
                now_ms,
                job,
                DeclineReason.PreemptionDisabled,
                "preemption is disabled by policy",
                {},
            )
        now_fits = outlook.fleet.place(
            state.gang_request(job),
            policy.placement_policy,
            exclude=state.nominated_nodes(except_jobs={job.job_id}, now_ms=now_ms),
            explain=False,
        )
        if isinstance(now_fits, Placement):
            return []  # idle capacity will do; the scheduler places it
        if outlook.fits(job):
            return self._decline(
                state,
                now_ms,
                job,
                DeclineReason.WaitingForPreemptedWorkloads,
                "capacity being released by preemptions already requested will fit it once "
                "their beneficiaries are placed; no new victims",
                {},
            )
        # never evict for capacity on GPU models its per-model limits close to it, nor on
        # nodes of a maintenance window its run would reach
        off = (
            outlook.exclude()
            | closed_models(state, job)
            | closed_nodes(state, now_ms, run_bound_s(job), job.tenant)
        )
        backfill = backfill_plan(state, job, now_ms, taken, exclude=off, fleet=outlook.fleet)
        if backfill is not None:
            v = self._verdict(state, job, backfill, outlook, out)
            if v is not None and not v.improves:
                return self._would_cycle(state, now_ms, job, backfill, v)
            return self._request(state, now_ms, job, backfill, outlook, taken)
        consolidation = None
        if defrag.consolidation:
            consolidation = consolidation_plan(state, job, now_ms, taken, off, outlook.fleet)
            if consolidation.moves:
                return self._consolidate(state, now_ms, job, consolidation, outlook, taken)
        p = plan(state, job, now_ms, taken, exclude=off, fleet=outlook.fleet)
        if p.declined is not None:
            return self._no_victims(state, now_ms, job, p, consolidation)
        return self._evict(state, now_ms, job, p, outlook, taken, off, out)

    def _no_victims(self, state: Ledger, now_ms: int, job, p: Plan, consolidation) -> list[Event]:
        """The plan's decline (with the consolidation's, when one was tried), and when to
        try again (a wake-up hint, never read by decide)."""
        assert p.declined is not None  # the plan declined
        self.retry_at[job.job_id] = p.retry_at_ms
        details = p.details()
        if consolidation is not None:
            details["consolidation"] = consolidation.declined
            retry = min(
                (x.until_ms for x in consolidation.exclusions if x.until_ms is not None),
                default=None,
            )
            if retry is not None:
                self.retry_at[job.job_id] = min(retry, p.retry_at_ms or retry)
        return self._decline(state, now_ms, job, p.declined[0], p.declined[1], details)

    def _evict(
        self,
        state: Ledger,
        now_ms: int,
        job,
        p: Plan,
        outlook: Outlook,
        taken: set[str],
        off: frozenset[str],
        out: list[Event],
    ) -> list[Event]:
        """Request the plan's evictions if they raise the standing; else try up to `RETRIES`
        other sets, each without the victims that spoil the last; `WouldCycle` when none
        does."""
        v = self._verdict(state, job, p, outlook, out)
        first, spare = (p, v), set()
        for _ in range(RETRIES):
            if v is None or v.improves:
                break
            spare |= spoilers(p, v)  # another set, without the victims that spoil this one
            alt = plan(
                state,
                job,
                now_ms,
                taken,
                exclude=off,
                fleet=outlook.fleet,
                spare=frozenset(spare),
            )
            if alt.declined is not None or not alt.victims:
                break
            p, v = alt, self._verdict(state, job, alt, outlook, out)
        if v is not None and not v.improves:
            return self._would_cycle(state, now_ms, job, *first)
        return self._request(state, now_ms, job, p, outlook, taken)

    def _verdict(self, state: Ledger, job, p: Plan, outlook: Outlook, out: list[Event]):
        """How evicting the plan's victims changes the standing (`services.preemption.measure`),
        the preemptions decided so far counted as landed; None when the plan only moves work
        (the victims are placed again at once, so only the beneficiary is added), and under
        the `slurm` profile (its ground is a strict order of partition tiers or the site's
        QOS preempt lists: the site's preemption, as Slurm does it, is not measured)."""
        evicted = [c for c in p.victims if c.reason not in MOVES]
        if not evicted or state.config.policy.profile == "slurm":
            return None
        requested = [e for e in out if isinstance(e, PreemptionRequested) and e.reason not in MOVES]
        decided = {e.allocation_id: (e.reason, e.beneficiary) for e in requested}
        leaving = {
            e.allocation_id: e.ranks for e in requested if isinstance(e.ranks, tuple) and e.ranks
        }
        leaving.update({c.rec.allocation_id: c.ranks for c in evicted if c.ranks})
        return verdict(
            state,
            job,
            [(c.rec.allocation_id, c.victim.tenant, c.reason) for c in evicted],
            decided,
            outlook.held,
            leaving,
        )

    def _would_cycle(self, state: Ledger, now_ms: int, job, p: Plan, v) -> list[Event]:
        """A `WouldCycle` refusal (or [] when already said): evicting the plan's victims for
        `job` would not strictly raise the standing, and no other set tried would either."""
        evicted = [c for c in p.victims if c.reason not in MOVES]
        details = p.details()
        details["measure"] = v.details()
        self.retry_at[job.job_id] = None
        return self._decline(
            state,
            now_ms,
            job,
            DeclineReason.WouldCycle,
            f"evicting {', '.join(c.victim.job_id for c in evicted)} for {job.job_id} would not "
            f"strictly raise the standing (guaranteed GPUs in use, then GPUs by priority), "
            f"which every preemption must, so that no two jobs take turns: "
            f"{v.message()}",
            details,
        )

    def _request(
        self, state: Ledger, now_ms: int, job, p: Plan, outlook: Outlook, taken: set[str]
    ) -> list[Event]:
        """`PreemptionRequested` for every victim of plan `p` (one explanation, shared details)."""
        outlook.land(
            job,
            [c.rec.allocation_id for c in p.victims],
            {c.rec.allocation_id: c.ranks for c in p.victims if c.ranks is not None},
        )
        details = p.details()
        details["beneficiary"] = {
            "job": job.job_id,
            "tenant": job.tenant,
            "priority": job.priority,
            "effective_priority": effective_priority(state, job, now_ms),
            "gpus": job.gpu_milli() / 1000,
        }
        victims = ", ".join(
            c.victim.job_id
            if c.ranks is None
            else f"{c.victim.job_id} members {_ranks(c.ranks)} (shrinks from "
            f"{len(c.rec.members)} to {len(c.rec.members) - len(c.ranks)} members)"
            for c in p.victims
        )
        freed = sum(_freed_milli(c) for c in p.victims) / 1000
        at_risk = sum(c.at_risk_gpu_ms for c in p.victims) / 1000
        reservation = job.details.get("reservation") or {}
        if any(c.reason == PreemptionReason.Backfill for c in p.victims):
            details["reservation"] = copy.deepcopy(reservation)  # the event's own, not the job's
        out: list[Event] = []
        for c in p.victims:
            if c.reason == PreemptionReason.Reclaim:
                why = f"tenant {job.tenant} is within its guarantee and {c.victim.tenant} is borrowing"
            elif c.reason == PreemptionReason.Defragment:
                why = (
                    f"tenant {job.tenant} is within its guarantee but no NVLink clique has room; "
                    f"{c.victim.job_id} fits elsewhere at once and moves"
                )
            elif c.reason == PreemptionReason.Backfill:
                why = (
                    f"{c.victim.job_id} ran as preemptible backfill on its reservation of "
                    f"{', '.join(reservation.get('nodes', ())) or 'reserved nodes'}, which can land now"
                )
            else:
                why = f"priority {job.priority} > {c.priority}"
            out.append(
                self._requested(
                    state,
                    now_ms,
                    job,
                    c,
                    c.reason,
                    lambda grace, c=c, why=why: (
                        f"{c.reason}: {job.job_id} (priority {job.priority}, tenant {job.tenant}) "
                        f"needs {job.gpu_milli() / 1000:g} GPUs ({why}); evicting {victims} frees "
                        f"{freed:g} GPUs, risking {at_risk:g} GPU-s since the last checkpoint; "
                        f"checkpoint within {grace / 1000:g}s; "
                        f"{p.considered} candidates, {len(p.exclusions)} excluded"
                    ),
                    details,
                    taken,
                )
            )
        return out

    def _requested(
        self, state: Ledger, now_ms: int, job, c, reason, say, details: dict, taken: set[str]
    ) -> PreemptionRequested:
        """`PreemptionRequested` of candidate `c` for `job` (its members `c.ranks` or the whole
        gang), taken for the rest of the decide, with the checkpoint grace of its class; the
        message is `say(grace)`."""
        taken.add(c.rec.allocation_id)
        grace = state.config.grace_ms(
            c.victim.spec.checkpoint.grace_s, c.victim.spec.priority_class
        )
        return self.emit(
            state,
            now_ms,
            PreemptionRequested,
            key=_request_key(c.rec, c.victim),
            correlation_id=c.victim.job_id,
            job_id=c.victim.job_id,
            allocation_id=c.rec.allocation_id,
            beneficiary=job.job_id,
            reason=reason,
            deadline_ms=now_ms + grace,
            ranks=UNSET if c.ranks is None else c.ranks,
            message=say(grace),
            details=details,
        )

    def _maybe_regeometry(
        self, state: Ledger, now_ms: int, job, outlook: Outlook
    ) -> tuple[bool, list[Event]]:
        """(handled, events): a MIG job whose profile no layout offers gets an idle GPU
        re-partitioned (before, and independently of, any preemption)."""
        if any(r.job_id == job.job_id for r in state.mig.mig_requests.values()):
            return True, []  # a layout is being changed for it
        exclude = state.nominated_nodes(except_jobs={job.job_id}, now_ms=now_ms) | outlook.exclude()
        if isinstance(
            outlook.fleet.place(
                state.gang_request(job),
                state.config.policy.placement_policy,
                exclude=exclude,
                explain=False,
            ),
            Placement,
        ):
            return True, []  # it fits: the scheduler places it
        regeo = regeometry_for(state, job, now_ms, exclude, outlook.fleet)
        if regeo.node:
            return True, [self._regeometry(state, now_ms, job, regeo)]
        if regeo.rate_limited:  # a wake-up hint for when the window frees a node
            self.regeometry_at[job.job_id] = rate_limit_lapses_ms(state, regeo.rate_limited, now_ms)
        return False, []

    def _regeometry(self, state: Ledger, now_ms: int, job, r: Regeometry) -> Event:
        """`MigReconfigurationRequested` for the idle GPU `r` chose."""
        settings = defrag_settings(state.config.policy)
        used = in_window(state, r.node, now_ms, settings.window_ms)
        profile = job.spec.resources.mig_profile
        return self.emit(
            state,
            now_ms,
            MigReconfigurationRequested,
            key=f"{r.node}/{r.gpu_index}@{now_ms}",
            correlation_id=job.job_id,
            job_id=job.job_id,
            node=r.node,
            gpu_index=r.gpu_index,
            layout=r.layout,
            previous_layout=r.previous,
            message=(
                f"MIG re-geometry: {job.job_id} asks for {profile}, which no GPU's layout "
                f"offers free; GPU {r.gpu_index} of {r.node} is idle, layout "
                f"[{', '.join(r.previous)}] -> [{', '.join(r.layout)}]; re-geometry "
                f"{used + 1} of at most {settings.per_window} for {r.node} per "
                f"{settings.window_ms // 1000}s"
            ),
            details=r.details(profile or "", settings.window_ms, settings.per_window, used + 1),
        )

    def _consolidate(
        self,
        state: Ledger,
        now_ms: int,
        job,
        cp: ConsolidationPlan,
        outlook: Outlook,
        taken: set[str],
    ) -> list[Event]:
        """`ConsolidationPlanned` for the blocked job, then a `PreemptionRequested` (reason
        `Consolidate`) per moved allocation: checkpoint, evict, placed again elsewhere."""
        victims = [m.cand.rec.allocation_id for m in cp.moves]
        outlook.land(job, victims)
        assert cp.target is not None
        target = tuple(sorted({m.node for m in cp.target.members}))
        need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
        moved = "; ".join(
            f"{m.cand.victim.job_id} ({m.cand.rec.gpu_milli / 1000:g} GPUs) from "
            f"{', '.join(m.cand.rec.nodes())} to {', '.join(m.to_nodes)}"
            for m in cp.moves
        )
        why = job.message or job.reason or "no node has room"
        details = cp.details()
        details["blocked_by"] = {"reason": job.reason, "message": job.message}
        out: list[Event] = [
            self.emit(
                state,
                now_ms,
                ConsolidationPlanned,
                key=f"{job.job_id}:{'+'.join(victims)}",
                correlation_id=job.job_id,
                job_id=job.job_id,
                moves=tuple(
                    ConsolidationMove(
                        job_id=m.cand.victim.job_id,
                        allocation_id=m.cand.rec.allocation_id,
                        gpu_milli=m.cand.rec.gpu_milli,
                        from_nodes=m.cand.rec.nodes(),
                        to_nodes=m.to_nodes,
                        at_risk_gpu_ms=m.cand.at_risk_gpu_ms,
                    )
                    for m in cp.moves
                ),
                target_nodes=target,
                free_gpu_milli=cp.free_gpu_milli,
                message=(
                    f"Consolidate: {job.job_id} needs {need / 1000:g} GPUs and "
                    f"{cp.free_gpu_milli / 1000:g} are free, but fragmented ({why}); moving "
                    f"{moved} makes room on {', '.join(target)}; {len(cp.moves)} of at most "
                    f"{defrag_settings(state.config.policy).max_moves} moves, "
                    f"{cp.considered} movable, {len(cp.exclusions)} protected"
                ),
                details=details,
            )
        ]
        for m in cp.moves:
            c = m.cand
            out.append(
                self._requested(
                    state,
                    now_ms,
                    job,
                    c,
                    PreemptionReason.Consolidate,
                    lambda grace, c=c, m=m: (
                        f"Consolidate: migrating {c.victim.job_id} ({c.rec.gpu_milli / 1000:g} GPUs) "
                        f"off {', '.join(c.rec.nodes())} for {job.job_id} (tenant {job.tenant}, "
                        f"{need / 1000:g} GPUs, blocked only by fragmentation); it fits on "
                        f"{', '.join(m.to_nodes)} at once; risking {c.at_risk_gpu_ms / 1000:g} "
                        f"GPU-s since the last checkpoint; checkpoint within {grace / 1000:g}s"
                    ),
                    {
                        "migration": {"to_nodes": list(m.to_nodes), "for": job.job_id},
                        **copy.deepcopy(details),
                    },
                    taken,
                )
            )
        return out

    def next_wakeup_ms(self, state: Ledger, now_ms: int) -> int | None:
        times = [
            retry
            for hints in (self.retry_at, self.regeometry_at)
            for job_id, retry in hints.items()
            if retry is not None and retry > now_ms and job_id in state.pending
        ]
        drains = drain.next_wakeup_ms(state, now_ms)
        return min([*times, drains] if drains is not None else times, default=None)

    def _decline(
        self, state: Ledger, now_ms: int, job, reason: str, message: str, details
    ) -> list[Event]:
        if job.declined == reason:
            return []
        # unique per decision: a decline that comes back after another one (NoVictims, then
        # MinRuntime, then NoVictims again, the pending reason unchanged) is a new decision,
        # not a repeat of the first, which the bus would drop while decide keeps returning it
        key = f"{job.job_id}:{reason}:{job.pending_changes}:{len(job.preemptions)}"
        if job.declined is not None:
            key += f":after:{job.declined}@{now_ms}"
        return [
            self.emit(
                state,
                now_ms,
                PreemptionDeclined,
                key=key,
                correlation_id=job.job_id,
                job_id=job.job_id,
                reason=reason,
                message=message,
                details=details,
            )
        ]


def closed_models(state: Ledger, job) -> frozenset[str]:
    """Nodes with GPU models the job may not use under its tenant's (or others') per-model
    lending and borrowing limits (`quota.model_limit_blocks`): preemption never frees
    capacity there for it. Empty when no tenant sets per-model limits."""
    tenants = state.config.tenants
    if not model_limits_set(tenants):
        return frozenset()
    need = job.spec.resources.gpu_milli_total() * job.spec.members_min()
    blocked = model_limit_blocks(
        tenants, state.tenant_by_model, state.fleet.capacity_by_model(), job.tenant, need
    )
    if not blocked:
        return frozenset()
    return frozenset(
        name
        for name in sorted(state.nodes)
        if any(g.model in blocked for g in state.nodes[name].info.gpus)
    )


def _request_key(rec: AllocationRecord, victim: JobRecord) -> str:
    """The semantic key of a `PreemptionRequested`: the allocation and how many of its
    preemptions have completed (an elastic gang keeps its allocation through shrinks and
    grows, so the allocation alone would repeat the first request's id and the bus would drop
    every later one). Deciding again before the request is folded repeats it, as it should."""
    done = sum(1 for p in victim.preemptions if p.allocation_id == rec.allocation_id)
    return rec.allocation_id if not done else f"{rec.allocation_id}:{done}"
