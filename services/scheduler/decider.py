"""Scheduler: declares silent nodes lost, settles allocations whose members have exited,
and places pending gangs atomically in queue order.

Level-triggered: every call looks at the ledger afresh. Settling and placing never happen in
one call: when settling produced events, placement waits for them to be folded, so it always
sees the capacity they release. Within one call, tentative allocations make later jobs see
the capacity earlier jobs took; they go to a copy-on-write `TrialFleet` that is dropped on
return, so `decide` never writes the folded state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from gpuledger.events import (
    Event,
    GangCompleted,
    GangEvicted,
    GangFailed,
    GangPlaced,
    GangRequeued,
    GangResized,
    NodeLost,
    PendingReasonChanged,
)
from gpuledger.events import catalog as ev
from gpuledger.events.reasons import (
    EndReason,
    EvictReason,
    PendingReason,
    PreemptionReason,
    ResizeReason,
)
from gpuledger.services.domain.fold.config import defrag_settings
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.fold.progress import work_outcome
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.policy import schedules as sched
from gpuledger.services.domain.policy.pending import CAPACITY_REASONS
from gpuledger.services.domain.policy.queue import ordered_pending
from gpuledger.services.domain.policy.quota import (
    lending_block,
    lends_limited,
    model_limit_blocks,
    model_limits_set,
    parent_of,
    quota_block,
)
from gpuledger.services.domain.policy.regeometry import rate_limit_lapses_ms, regeometry_for
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.placement_adapter import to_members
from gpuledger.services.domain.tooling.timefmt import duration, instant
from gpuledger.services.placement import Placement, TrialFleet, profile_for
from gpuledger.services.scheduler.reservation import (
    Reservation,
    may_backfill,
    may_backfill_preemptibly,
    reserve,
    starving,
)


@dataclass
class _Round:
    """What one placement decide keeps across the queue (private scratch, dropped on return)."""

    state: Ledger
    view: TrialFleet
    """Tentative allocations of this decide (a copy-on-write view of the folded fleet);
    read it through `trial`, which books the placements made so far first."""
    policy: str
    usage: dict[str, int]
    fixed: dict[str, int]
    fixed_model: dict[tuple[str, str], int]
    placed: set[str] = field(default_factory=set)
    reservation: Reservation | None = None
    spread: dict[str, dict[str, int]] = field(default_factory=dict)
    """Members per node of spread groups (`JobSpec.spread`), tentative allocations included;
    a group's entry is built when the first job of that group is tried."""

    array_placed: dict[str, int] = field(default_factory=dict)
    """Per array job, its tasks placed in this decide."""
    lending: bool = False
    """Some tenant sets a `lending_limit` (checked once per decide, not per job)."""
    used_model: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, GPU model), capacity in use (`Ledger.tenant_by_model`) plus this
    decide's placements; kept only while some tenant sets per-model limits."""
    model_capacity: dict[str, int] | None = None
    """Milli-GPUs per GPU model of the fleet, while some tenant sets per-model limits (else
    None: per-model lending and borrowing limits are not checked)."""

    outlooks: dict[tuple[str, str], list] = field(default_factory=dict)
    """Per (tenant, class): the schedules' outlook at this decide's `now` (`QuotaScheduled`),
    computed once however many of its jobs wait."""

    unbooked: list[tuple[str, JobRecord, Placement]] = field(default_factory=list)
    """Placements of this decide (allocation id, job, placement) not yet booked in `view`:
    booked when the view is next read, so the last one of a decide never is."""

    @classmethod
    def start(cls, state: Ledger) -> _Round:
        return cls(
            state,
            state.fleet.trial(),
            state.config.policy.placement_policy,
            dict(state.tenant_gpu_milli),
            dict(state.sched.tenant_fixed_gpu_milli),
            dict(state.sched.tenant_fixed_by_model),
            lending=lends_limited(state.config.tenants),
            **cls._per_model(state),
        )

    @staticmethod
    def _per_model(state: Ledger) -> dict:
        if not model_limits_set(state.config.tenants):
            return {}
        return {
            "used_model": dict(state.tenant_by_model),
            "model_capacity": state.fleet.capacity_by_model(),
        }

    def model_blocks(self, job: JobRecord, need: int) -> dict[str, tuple]:
        """Per GPU model the job may not use now under per-model lending and borrowing
        limits (`quota.model_limit_blocks`); empty when no tenant sets any."""
        if self.model_capacity is None:
            return {}
        return model_limit_blocks(
            self.state.config.tenants, self.used_model, self.model_capacity, job.tenant, need
        )

    @property
    def trial(self) -> TrialFleet:
        """The trial view, every placement of this decide booked in it."""
        for alloc_id, job, placement in self.unbooked:
            self.view.allocate(alloc_id, job.tenant, placement, self.state.gang_request(job))
        self.unbooked.clear()
        return self.view


@dataclass(frozen=True, slots=True)
class _PlacedOr:
    """The jobs placed so far in this decide, or `job_id`: a membership test without copying
    the placed set (a decide that places k jobs asked it k times)."""

    placed: set[str]
    job_id: str

    def __contains__(self, job_id: object) -> bool:
        return job_id == self.job_id or job_id in self.placed


@dataclass
class _Limits:
    """Where one job may go in this decide, and why not elsewhere."""

    exclude: frozenset[str]
    need: int
    """GPU milli of its smallest acceptable gang."""
    spread_full: frozenset[str] = frozenset()
    """Nodes at the job's spread limit (excluded)."""
    unrestricted: frozenset[str] = frozenset()
    """`exclude` before per-model guarantees."""
    held_back: bool = False
    """A reservation keeps it off nodes it could otherwise use."""
    backfill_for: str | None = None
    over_models: list[tuple[str, int, int]] = field(default_factory=list)
    model_blocks: dict[str, tuple] = field(default_factory=dict)
    """GPU models the job may not use under per-model lending/borrowing limits, and why."""
    before_model_limits: frozenset[str] = frozenset()
    """`exclude` before the nodes of `model_blocks`."""
    max_members: int | None = None
    """An elastic gang: the most members its tenant's quota allows (None: `replicas`)."""


@dataclass
class _Why:
    """A pending reason being put together."""

    reason: str
    message: str
    details: dict


class Scheduler(LedgerService):
    name = "scheduler"
    # reads nearly everything; queue order and pending reasons also move with the clock
    # (decayed usage), so it is asked at every instant. A heartbeat only postpones a node's
    # loss (its wake-up); one that revives a lost node changes `nodes_version`, which counts.
    unaffected_by = frozenset(
        {
            ev.JobSubmitted,
            ev.JobRejected,
            ev.GpuMetricsReported,
            ev.RequestRefused,
            ev.DeadLettered,
            ev.NodeHeartbeat,
        }
    )

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        out = self._lost_nodes(state, now_ms)
        if out:
            return out
        out = self._settle(state, now_ms)
        if out:
            return out
        out = self._place(state, now_ms)
        if out:
            return out
        return self._grow(state, now_ms)

    def next_wakeup_ms(self, state: Ledger, now_ms: int) -> int | None:
        # asked at every instant: each source is read only when it has entries
        policy = state.config.policy
        times: list[int] = []
        if state.sched.heartbeating:
            timeout = policy.node_timeout_s * 1000
            times += [
                n.last_heartbeat_ms + timeout
                for n in (state.nodes[name] for name in state.sched.heartbeating)
                if n.last_heartbeat_ms is not None and not n.lost
            ]
        if state.nominations:
            times += [
                t
                for b in state.nominations
                if (t := state.nomination_expires_ms(b)) is not None and t > now_ms
            ]
        after = policy.reservation_after_s * 1000
        if after and state.pending:
            times += [
                t
                for j in state.pending
                if (since := self._queued_since(state, state.jobs[j])) is not None
                and (t := since + after) > now_ms
            ]
        if state.sched.growable and policy.min_runtime_s:  # a grow's cooldown ends
            cooldown = policy.min_runtime_s * 1000
            times += [
                t
                for a in sorted(state.sched.growable)
                if (r := state.allocations[a].resized_ms) is not None
                and (t := r + cooldown) > now_ms
            ]
        start_timeout = policy.start_timeout_s * 1000
        if start_timeout and state.awaiting_start:
            times += [_bound_ms(rec) + start_timeout for rec in self._awaiting_start(state)]
        limit = state.time_limits.next_after(now_ms)
        if limit is not None:
            times.append(limit)
        return min(times, default=None)

    def _awaiting_start(self, state: Ledger) -> list[AllocationRecord]:
        """Active allocations with a member on a real node that has neither started nor
        exited (simulated agents start members at once; the simulator never waits)."""
        out = []
        for alloc_id in sorted(state.awaiting_start):
            rec = state.allocations[alloc_id]
            if rec.preemption is None and any(
                not state.nodes[m.node].simulated
                and m.rank not in rec.started
                and m.rank not in rec.exited
                for m in rec.members
                if m.node in state.nodes
            ):
                out.append(rec)
        return out

    # ------------------------------------------------------------ node loss

    def _lost_nodes(self, state: Ledger, now_ms: int) -> list[Event]:
        out: list[Event] = []
        if not state.sched.heartbeating:
            return out
        timeout = state.config.policy.node_timeout_s * 1000
        for name in sorted(state.sched.heartbeating):
            node = state.nodes[name]
            if node.lost or node.last_heartbeat_ms is None:
                continue
            silent = now_ms - node.last_heartbeat_ms
            if silent >= timeout:
                out.append(
                    self.emit(
                        state,
                        now_ms,
                        NodeLost,
                        key=f"{name}@{node.last_heartbeat_ms}",
                        correlation_id=name,
                        node=name,
                        message=f"no heartbeat for {silent / 1000:.0f}s (timeout {timeout / 1000:.0f}s)",
                    )
                )
        return out

    # ------------------------------------------------------------ settling

    def _settle(self, state: Ledger, now_ms: int) -> list[Event]:
        out: list[Event] = []
        timeout = state.config.policy.start_timeout_s * 1000
        if timeout and state.awaiting_start:
            for rec in self._awaiting_start(state):
                job = state.jobs[rec.job_id]
                if now_ms - _bound_ms(rec) >= timeout and not job.cancel_requested:
                    out += self._evict(
                        state, now_ms, rec, job, EndReason.StartTimeout, None, exited=False
                    )
            if out:
                return out
        out = self._time_limits(state, now_ms)
        if out:
            return out
        for alloc_id in sorted(state.sched.settle_ready):
            rec = state.allocations[alloc_id]
            job = state.jobs[rec.job_id]
            lost = [
                n for n in rec.nodes() if state.nodes.get(n) is not None and state.nodes[n].lost
            ]
            if lost:
                out += self._evict(
                    state, now_ms, rec, job, EvictReason.NodeLost, None, exited=False
                )
            elif rec.time_limit is not None and not job.cancel_requested:
                if rec.all_exited():  # the limit wins over a preemption: the run is over
                    out.append(self._timed_out(state, now_ms, rec, job))
            elif any(outcome == "failed" for outcome, _ in rec.exited.values()):
                rank = min(r for r, (o, _) in rec.exited.items() if o == "failed")
                out.append(
                    self.emit(
                        state,
                        now_ms,
                        GangFailed,
                        key=alloc_id,
                        correlation_id=job.job_id,
                        job_id=job.job_id,
                        allocation_id=alloc_id,
                        reason=EndReason.MemberFailed,
                        message=f"member rank {rank} failed",
                    )
                )
            elif rec.leaving() is not None and not rec.all_exited():
                out.append(self._shrunk(state, now_ms, rec, job))
            elif rec.all_exited():
                leaving = rec.leaving() or ()
                outcomes = {o for r, (o, _) in rec.exited.items() if r not in leaving}
                if (rec.preemption is not None and not leaving) or "preempted" in outcomes:
                    p = rec.preemption
                    out += self._evict(
                        state,
                        now_ms,
                        rec,
                        job,
                        p.reason if p else EvictReason.Preempted,
                        p.beneficiary if p else None,
                        exited=True,
                    )
                elif job.cancel_requested or "cancelled" in outcomes:
                    why = (
                        EvictReason.ScaledDown
                        if job.service is not None and job.reason == EvictReason.ScaledDown
                        else EvictReason.Cancelled
                    )
                    out += self._evict(state, now_ms, rec, job, why, None, exited=True)
                else:
                    out.append(
                        self.emit(
                            state,
                            now_ms,
                            GangCompleted,
                            key=alloc_id,
                            correlation_id=job.job_id,
                            job_id=job.job_id,
                            allocation_id=alloc_id,
                        )
                    )
        return out

    def _time_limits(self, state: Ledger, now_ms: int) -> list[Event]:
        """`TimeLimitReached` for every run whose time limit has come: its members are asked
        to checkpoint and stopped after the grace. A run being preempted or cancelled is
        left to that (its next run starts a fresh limit)."""
        out: list[Event] = []
        for _at, alloc_id, _kind in state.time_limits.due(now_ms):
            rec = state.allocations.get(alloc_id)
            if rec is None or rec.ended or rec.time_limit is not None or rec.preemption:
                continue
            job = state.jobs[rec.job_id]
            if job.cancel_requested or job.time_limit_s is None:
                continue
            started = max(rec.started.values(), default=rec.placed_ms)
            grace = state.config.grace_ms(job.spec.checkpoint.grace_s, job.spec.priority_class)
            limit_ms = job.time_limit_s * 1000
            out.append(
                self.emit(
                    state,
                    now_ms,
                    ev.TimeLimitReached,
                    key=alloc_id,
                    correlation_id=job.job_id,
                    job_id=job.job_id,
                    allocation_id=alloc_id,
                    time_limit_s=job.time_limit_s,
                    started_ms=started,
                    deadline_ms=now_ms + grace,
                    message=(
                        f"ran {duration(now_ms - started)} since {instant(started)}, its time "
                        f"limit is {duration(limit_ms)}: asked to checkpoint, stopped at "
                        f"{instant(now_ms + grace)} (grace {duration(grace)})"
                    ),
                )
            )
        return out

    def _timed_out(
        self, state: Ledger, now_ms: int, rec: AllocationRecord, job: JobRecord
    ) -> Event:
        """The end of a run stopped at its time limit: `GangCompleted` if every member still
        completed within the grace, else `GangFailed` (`TimeLimit`; the job ends `timeout`)
        with the work saved and lost."""
        if all(o == "completed" for o, _ in rec.exited.values()):
            return self.emit(
                state,
                now_ms,
                GangCompleted,
                key=rec.allocation_id,
                correlation_id=job.job_id,
                job_id=job.job_id,
                allocation_id=rec.allocation_id,
            )
        work = work_outcome(rec, job.spec.checkpoint)
        limit = rec.time_limit
        assert limit is not None
        saved = (
            f"checkpointed at step {work.resume_step}"
            if work.checkpointed
            else f"no checkpoint in time: {work.lost_gpu_ms / 3_600_000:.2f} GPU-h lost"
        )
        return self.emit(
            state,
            now_ms,
            GangFailed,
            key=rec.allocation_id,
            correlation_id=job.job_id,
            job_id=job.job_id,
            allocation_id=rec.allocation_id,
            reason=EndReason.TimeLimit,
            message=(
                f"time limit {duration(limit.time_limit_s * 1000)} reached at "
                f"{instant(limit.occurred_at_ms)}; {saved}"
            ),
        )

    def _shrunk(self, state: Ledger, now_ms: int, rec: AllocationRecord, job: JobRecord) -> Event:
        """The members a partial preemption asked to leave have all exited: the elastic
        gang runs on with the others (`GangResized`), the work the leavers lost counted."""
        leaving = rec.leaving() or ()
        gone = tuple(m for m in rec.members if m.rank in leaving)
        kept = tuple(m for m in rec.members if m.rank not in leaving)
        per_member = rec.gpu_milli // len(rec.members)
        part = AllocationRecord(
            **{
                **rec.__dict__,
                "members": gone,
                "gpu_milli": per_member * len(gone),
                "started": {r: t for r, t in rec.started.items() if r in leaving},
                "exited": {r: x for r, x in rec.exited.items() if r in leaving},
                "checkpoints": {r: c for r, c in rec.checkpoints.items() if r in leaving},
            }
        )
        work = work_outcome(part, job.spec.checkpoint)
        p = rec.preemption
        return self.emit(
            state,
            now_ms,
            GangResized,
            key=f"{rec.allocation_id}:{len(rec.members)}-{len(kept)}:{p.event_id if p else ''}",
            correlation_id=job.job_id,
            job_id=job.job_id,
            allocation_id=rec.allocation_id,
            members=kept,
            from_members=len(rec.members),
            to_members=len(kept),
            reason=p.reason if p is not None else EvictReason.Preempted,
            preempted_by=p.beneficiary if p is not None else None,
            checkpointed=work.checkpointed,
            lost_gpu_ms=work.lost_gpu_ms,
        )

    def _evict(
        self,
        state: Ledger,
        now_ms: int,
        rec: AllocationRecord,
        job: JobRecord,
        reason: str,
        by: str | None,
        *,
        exited: bool,
    ) -> list[Event]:
        if exited:
            work = work_outcome(rec, job.spec.checkpoint)
            checkpointed, progress, lost, step = (
                work.checkpointed,
                work.progress_ms,
                work.lost_gpu_ms,
                work.resume_step,
            )
        else:  # node lost: members vanished with their node; only periodic checkpoints survive
            done = {r: (o, now_ms) for r, (o, _) in rec.exited.items()}
            snapshot = AllocationRecord(
                **{
                    **rec.__dict__,
                    "exited": {m.rank: done.get(m.rank, ("lost", now_ms)) for m in rec.members},
                }
            )
            work = work_outcome(snapshot, job.spec.checkpoint)
            checkpointed, progress, lost, step = (
                False,
                work.progress_ms,
                work.lost_gpu_ms,
                work.resume_step,
            )
        if reason == EvictReason.ScaledDown:  # a service replica holds no work to lose
            checkpointed, lost = False, 0
        out: list[Event] = [
            self.emit(
                state,
                now_ms,
                GangEvicted,
                key=rec.allocation_id,
                correlation_id=job.job_id,
                job_id=job.job_id,
                allocation_id=rec.allocation_id,
                reason=reason,
                preempted_by=by,
                checkpointed=checkpointed,
                lost_gpu_ms=lost,
                progress_ms=progress,
            )
        ]
        if not job.cancel_requested and reason not in (
            EvictReason.Cancelled,
            EvictReason.ScaledDown,
        ):
            out.append(
                self.emit(
                    state,
                    now_ms,
                    GangRequeued,
                    key=rec.allocation_id,
                    correlation_id=job.job_id,
                    job_id=job.job_id,
                    after_allocation_id=rec.allocation_id,
                    resume_step=step if step is not None else job.resume_step,
                )
            )
        return out

    # ------------------------------------------------------------ elastic gangs

    def _grow(self, state: Ledger, now_ms: int) -> list[Event]:
        """Elastic gangs below `replicas` take capacity that is free once the queue has
        nothing waiting for capacity (queued work first; a job waiting for a dependency does
        not wait for capacity): each, in allocation order, gets as
        many more members as fit and as its tenant's quota allows (`GangResized` up), unless
        it is starting, being preempted, or was resized less than `policy.min_runtime_s`
        ago (the anti-thrash cooldown)."""
        if not state.sched.growable:
            return []
        for j in state.pending:
            job = state.jobs[j]
            if job.cancel_requested or (
                job.reason is not None and job.reason not in CAPACITY_REASONS
            ):
                continue
            if j in state.pending_dependent and deps.unmet(state, job.spec):
                continue  # waits for a dependency, not for capacity
            return []
        cooldown = state.config.policy.min_runtime_s * 1000
        rnd = _Round.start(state)
        exclude = state.nominated_nodes(now_ms=now_ms)
        out: list[Event] = []
        for alloc_id in sorted(state.sched.growable):
            rec = state.allocations[alloc_id]
            job = state.jobs[rec.job_id]
            if rec.preemption is not None or job.cancel_requested:
                continue
            if len(rec.started) < len(rec.members) or rec.exited:
                continue
            if rec.resized_ms is not None and now_ms < rec.resized_ms + cooldown:
                continue
            n = len(rec.members)
            per = job.spec.resources.gpu_milli_total()
            k = job.spec.replicas - n
            while k > 0 and self._quota_block(
                state, job, rnd.usage, rnd.fixed, k * per, rnd.lending
            ):
                k -= 1
            if k <= 0:
                continue
            request = msgspec.structs.replace(state.gang_request(job), replicas=k, min_members=1)
            off = exclude
            blocked = rnd.model_blocks(job, k * per)  # per-model limits, as for a placement
            if blocked:
                off = exclude | self._nodes_with_models(state, set(blocked))
            view = rnd.trial
            placed = view.place(request, rnd.policy, exclude=off, explain=False)
            if not isinstance(placed, Placement):
                continue
            view.allocate(f"{alloc_id}~grow", job.tenant, placed, request)
            added = tuple(
                msgspec.structs.replace(m, rank=n + i) for i, m in enumerate(to_members(placed))
            )
            rnd.usage[job.tenant] = rnd.usage.get(job.tenant, 0) + per * len(added)
            if rnd.model_capacity is not None:
                for model, milli in state.member_models(added, per).items():
                    key = (job.tenant, model)
                    rnd.used_model[key] = rnd.used_model.get(key, 0) + milli
            if not job.preemptible:
                rnd.fixed[job.tenant] = rnd.fixed.get(job.tenant, 0) + per * len(added)
            since = rec.resized_ms if rec.resized_ms is not None else rec.placed_ms
            out.append(
                self.emit(
                    state,
                    now_ms,
                    GangResized,
                    key=f"{alloc_id}:grow:{n}-{n + len(added)}:{since}",
                    correlation_id=job.job_id,
                    job_id=job.job_id,
                    allocation_id=alloc_id,
                    members=rec.members + added,
                    from_members=n,
                    to_members=n + len(added),
                    reason=ResizeReason.Grow,
                )
            )
        return out

    # ------------------------------------------------------------ placement

    def _place(self, state: Ledger, now_ms: int) -> list[Event]:
        """Place pending gangs in queue order on a trial view; a pending reason for the rest."""
        out: list[Event] = []
        if not state.pending:
            return out  # nothing to place: no trial view, no queue
        rnd = _Round.start(state)
        for position, job in enumerate(ordered_pending(state, now_ms)):
            if job.cancel_requested:
                continue
            if job.spec.depends_on:
                waiting = self._dependencies(state, now_ms, position, job)
                if waiting is not None:
                    out += waiting
                    continue
            if job.array_parent is not None:
                capped = self._array_cap(state, now_ms, rnd, position, job)
                if capped is not None:
                    out += capped
                    continue
            placed = self._place_one(state, now_ms, rnd, position, job)
            if job.array_parent is not None and job.job_id in rnd.placed:
                rnd.array_placed[job.array_parent] = rnd.array_placed.get(job.array_parent, 0) + 1
            out += placed
        return out

    def _array_cap(
        self, state: Ledger, now_ms: int, rnd: _Round, position: int, job: JobRecord
    ) -> list[Event] | None:
        """`ArrayTaskLimit` for a task whose array already runs `max_running` tasks (those
        placed in this decide included); None when it may be placed."""
        parent = state.jobs.get(job.array_parent or "")
        arr = parent.spec.array if parent is not None else None
        if not arr or arr.max_running is None:
            return None
        running = parent.tasks_up + rnd.array_placed.get(parent.job_id, 0)
        if running < arr.max_running:
            return None
        return self._pending(
            state,
            now_ms,
            job,
            PendingReason.ArrayTaskLimit,
            f"array {parent.job_id} runs at most {arr.max_running} tasks at once (max_running)",
            {"array": parent.job_id, "max_running": arr.max_running, "queue_position": position},
        )

    def _dependencies(
        self, state: Ledger, now_ms: int, position: int, job: JobRecord
    ) -> list[Event] | None:
        """None when every dependency of `job` is met; else why it waits (`Dependency`), or,
        when one can never be met, its withdrawal (`JobWithdrawn`) or, under the policy
        `dependency_never_satisfied: pend`, the pending reason `DependencyNeverSatisfied`."""
        waiting, never = [], []
        for d in deps.dependencies(job.spec):
            other = state.jobs.get(deps.dependency_key(state, job.tenant, d.job))
            st = deps.status(other, d.on) if other is not None else "never"
            what = {"job": d.job, "on": d.on, "state": str(other.state) if other else None}
            if st == "waiting":
                waiting.append(what)
            elif st == "never":
                never.append(what)
        if never:
            message = "; ".join(
                f"waits for {w['job']} {deps.verb(w['on'])}, which can no longer happen "
                f"({w['job']} is {w['state']})"
                for w in never
            )
            details = {"never": never, "waiting": waiting, "queue_position": position}
            if state.config.policy.dependency_never_satisfied == "pend":
                return self._pending(
                    state,
                    now_ms,
                    job,
                    PendingReason.DependencyNeverSatisfied,
                    message,
                    details,
                )
            return [
                self.emit(
                    state,
                    now_ms,
                    ev.JobWithdrawn,
                    key=job.job_id,
                    correlation_id=job.job_id,
                    job_id=job.job_id,
                    reason=EndReason.DependencyNeverSatisfied,
                    message=message,
                    details={"never": never},
                )
            ]
        if not waiting:
            return None
        message = "waits for " + ", ".join(
            f"{w['job']} {deps.verb(w['on'])} ({w['job']} is {w['state']})" for w in waiting
        )
        return self._pending(
            state,
            now_ms,
            job,
            PendingReason.Dependency,
            message,
            {"waiting_for": waiting, "queue_position": position},
        )

    def _place_one(
        self,
        state: Ledger,
        now_ms: int,
        rnd: _Round,
        position: int,
        job: JobRecord,
    ) -> list[Event]:
        """One job: limits, quota, trial placement, then GangPlaced or a pending reason."""
        lim = self._limits(state, now_ms, rnd, job)
        block = self._quota_block(state, job, rnd.usage, rnd.fixed, lim.need, rnd.lending)
        if block is not None:
            details: dict = {"queue_position": position}
            if block[0] == PendingReason.NonPreemptibleOverQuota and state.config.schedules:
                block = self._scheduled_quota(state, now_ms, job, rnd, lim, block, details)
            if len(block) > 2:
                details.update(block[2])
            return self._pending(state, now_ms, job, block[0], block[1], details)
        spec = job.spec
        if spec.min_members is not None and spec.min_members < spec.replicas:
            # members above the minimum only as far as the tenant's quota allows
            per, k = spec.resources.gpu_milli_total(), spec.replicas
            while k > spec.min_members and self._quota_block(
                state, job, rnd.usage, rnd.fixed, k * per, rnd.lending
            ):
                k -= 1
            # and as per-model limits allow on every model still open to it
            while k > spec.min_members and set(rnd.model_blocks(job, k * per)) - set(
                lim.model_blocks
            ):
                k -= 1
            lim.max_members = k
        result = self._try_place(state, rnd, job, lim)
        if isinstance(result, Placement):
            return [self._bind(state, now_ms, rnd, job, result, lim.backfill_for)]
        return self._unplaced(state, now_ms, rnd, position, job, lim, result)

    def _limits(self, state: Ledger, now_ms: int, rnd: _Round, job: JobRecord) -> _Limits:
        """Nodes the job may not use now (nominations, a reservation, per-model guarantees)."""
        # capacity freed by preemption is kept for its beneficiaries; beneficiaries share it
        # among themselves in queue order (tentative allocations keep them apart), so two
        # whose victims shared a node never lock each other out; but a beneficiary does not
        # take another's nodes where it has no victim of its own
        exclude = state.nominated_nodes(
            except_jobs=_PlacedOr(rnd.placed, job.job_id), now_ms=now_ms
        )
        if job.job_id in state.nominations:
            exclude = exclude - state.nominated_nodes(
                except_jobs=frozenset(state.nominations) - {job.job_id}, now_ms=now_ms
            )
        lim = _Limits(
            exclude=exclude, need=job.spec.resources.gpu_milli_total() * job.spec.members_min()
        )
        self._reservation_limits(state, now_ms, rnd, job, lim)
        spread = job.spec.spread
        if spread:
            counts = self._spread_counts(state, rnd, spread.group)
            lim.spread_full = frozenset(n for n, c in counts.items() if c >= spread.max_per_node)
            lim.exclude = lim.exclude | lim.spread_full
        lim.unrestricted = lim.exclude
        if not job.preemptible:  # per-model guarantees bind non-preemptible work
            lim.over_models = self._models_over_guarantee(state, job, rnd.fixed_model, lim.need)
            if lim.over_models:
                lim.exclude = lim.exclude | self._nodes_with_models(
                    state, {m for m, _, _ in lim.over_models}
                )
        lim.before_model_limits = lim.exclude
        lim.model_blocks = rnd.model_blocks(job, lim.need)
        if lim.model_blocks:
            lim.exclude = lim.exclude | self._nodes_with_models(state, set(lim.model_blocks))
        return lim

    @staticmethod
    def _spread_counts(state: Ledger, rnd: _Round, group: str) -> dict[str, int]:
        """Members per node of spread group `group`: the folded index (`Ledger.sched.spread_nodes`,
        the active allocations) corrected by this decide's tentative changes to the fleet."""
        counts = rnd.spread.get(group)
        if counts is None:
            counts = dict(state.sched.spread_nodes.get(group, {}))
            view = rnd.trial  # books this decide's placements first
            added, gone = view.changes()
            for _id, sign, alloc in [
                *((a, -1, view.base.allocation(a)) for a in gone),
                *((a, 1, added[a]) for a in sorted(added)),
            ]:
                job = state.jobs.get(alloc.request.job_id)
                if job is not None and job.spec.spread and job.spec.spread.group == group:
                    for m in alloc.placement.members:
                        counts[m.node] = counts.get(m.node, 0) + sign
            rnd.spread[group] = counts
        return counts

    @staticmethod
    def _reservation_limits(
        state: Ledger,
        now_ms: int,
        rnd: _Round,
        job: JobRecord,
        lim: _Limits,
    ) -> None:
        """Keep a job off the reserved nodes unless it may backfill them (by duration or as
        preemptible backfill)."""
        reservation = rnd.reservation
        if reservation is None or may_backfill(job, now_ms, reservation, state.config):
            return
        if may_backfill_preemptibly(state, job, reservation):
            lim.backfill_for = reservation.job_id  # on reserved nodes only if need be
        else:
            lim.held_back = not reservation.nodes <= lim.exclude
            lim.exclude = lim.exclude | reservation.nodes

    @staticmethod
    def _try_place(state: Ledger, rnd: _Round, job: JobRecord, lim: _Limits):
        """The trial placement: preemptible backfill off the reserved nodes first, if it fits
        there (then it is no backfill); clears `lim.backfill_for` when not on them."""
        request = state.gang_request(job)
        if lim.max_members is not None and lim.max_members < request.replicas:
            request = msgspec.structs.replace(request, replicas=lim.max_members)
        result = None
        if lim.backfill_for is not None:  # off the reserved nodes when it fits there
            assert rnd.reservation is not None
            result = rnd.trial.place(
                request, rnd.policy, exclude=lim.exclude | rnd.reservation.nodes, explain=False
            )
            if isinstance(result, Placement):
                lim.backfill_for = None
        if not isinstance(result, Placement):
            result = rnd.trial.place(request, rnd.policy, exclude=lim.exclude)
            if (
                lim.backfill_for is not None
                and isinstance(result, Placement)
                and not (
                    {m.node for m in result.members} & rnd.reservation.nodes  # type: ignore[union-attr]  # set whenever backfill_for is
                )
            ):
                lim.backfill_for = None
        return result

    def _bind(
        self,
        state: Ledger,
        now_ms: int,
        rnd: _Round,
        job: JobRecord,
        result: Placement,
        backfill_for: str | None,
    ) -> Event:
        """Book the placement in the trial view and this decide's usage; the GangPlaced."""
        alloc_id = f"{job.job_id}#{job.attempts + 1}"
        rnd.unbooked.append((alloc_id, job, result))
        rnd.placed.add(job.job_id)
        if job.spec.spread and job.spec.spread.group in rnd.spread:
            _count_spread(rnd.spread, job.spec.spread.group, result.members)
        members = to_members(result)
        gpu_milli = job.spec.resources.gpu_milli_total() * len(members)
        tenant = state.config.tenants.get(job.tenant)
        used = rnd.usage.get(job.tenant, 0)
        rnd.usage[job.tenant] = used + gpu_milli
        if rnd.model_capacity is not None:
            per = job.spec.resources.gpu_milli_total()
            for model, milli in state.member_models(members, per).items():
                key = (job.tenant, model)
                rnd.used_model[key] = rnd.used_model.get(key, 0) + milli
        if not job.preemptible:
            rnd.fixed[job.tenant] = rnd.fixed.get(job.tenant, 0) + gpu_milli
            per_member = job.spec.resources.gpu_milli_total()
            for model, milli in state.member_models(members, per_member).items():
                key = (job.tenant, model)
                rnd.fixed_model[key] = rnd.fixed_model.get(key, 0) + milli
        return self.emit(
            state,
            now_ms,
            GangPlaced,
            key=alloc_id,
            correlation_id=job.job_id,
            job_id=job.job_id,
            allocation_id=alloc_id,
            tenant=job.tenant,
            members=members,
            borrowing=tenant is not None and used + gpu_milli > tenant.guaranteed_gpu_milli,
            resume_step=job.resume_step,
            backfill_for=backfill_for,
        )

    def _unplaced(
        self,
        state: Ledger,
        now_ms: int,
        rnd: _Round,
        position: int,
        job: JobRecord,
        lim: _Limits,
        result,
    ) -> list[Event]:
        """The pending reason of a job that did not fit (the most telling of the rules)."""
        why = _Why(result.reason, result.message, {**result.details, "queue_position": position})
        self._layout_reason(state, job, why)
        self._spread_reason(state, rnd, job, lim, why)
        self._reserved_reason(state, rnd, job, lim, why)
        self._over_model_reason(state, rnd, job, lim, why)
        self._model_limit_reason(state, rnd, job, lim, why)
        self._maybe_reserve(state, now_ms, rnd, job, lim, why)
        self._releasing_reason(state, job, result, why)
        self._regeometry_reason(state, now_ms, job, result, why)
        return self._pending(state, now_ms, job, why.reason, why.message, why.details)

    @staticmethod
    def _spread_reason(state: Ledger, rnd: _Round, job: JobRecord, lim: _Limits, why: _Why) -> None:
        """Say so when the spread limit is what keeps the job out (it would fit on nodes at
        its group's limit)."""
        spread = job.spec.spread
        if not lim.spread_full or not spread:
            return
        full = sorted(lim.spread_full)
        why.details["spread"] = {
            "group": spread.group,
            "max_per_node": spread.max_per_node,
            "nodes_at_limit": len(full),
        }
        if not isinstance(
            rnd.trial.place(
                state.gang_request(job),
                rnd.policy,
                exclude=lim.exclude - lim.spread_full,
                explain=False,
            ),
            Placement,
        ):
            why.message += (
                f"; {len(full)} more nodes at the spread limit of group {spread.group!r} "
                f"({spread.max_per_node} per node)"
            )
            return
        shown = ", ".join(full[:5]) + (f" and {len(full) - 5} more" if len(full) > 5 else "")
        why.message = (
            f"spread group {spread.group!r} allows at most {spread.max_per_node} per node; "
            f"the nodes where it would fit are at that limit ({shown})"
        )

    @staticmethod
    def _reserved_reason(
        state: Ledger, rnd: _Round, job: JobRecord, lim: _Limits, why: _Why
    ) -> None:
        """`Reserved` when the job would fit but for the reservation it was kept off."""
        reservation = rnd.reservation
        if not lim.held_back or not isinstance(
            rnd.trial.place(
                state.gang_request(job),
                rnd.policy,
                exclude=lim.exclude - reservation.nodes,  # type: ignore[union-attr]  # held back only by a reservation
                explain=False,
            ),
            Placement,
        ):
            return
        assert reservation is not None
        why.reason = PendingReason.Reserved
        why.message = (
            f"capacity on {', '.join(sorted(reservation.nodes))} is reserved for "
            f"{reservation.job_id} (expected start {instant(reservation.expected_start_ms)}); "
            + (
                "it is landing: its backfilled work is being evicted"
                if reservation.landing
                else "the job's duration would run past it"
            )
        )
        why.details["reservation"] = reservation.describe()

    @staticmethod
    def _over_model_reason(
        state: Ledger, rnd: _Round, job: JobRecord, lim: _Limits, why: _Why
    ) -> None:
        """`NonPreemptibleOverQuota` when only per-model guarantees keep the job out."""
        if not lim.over_models or not isinstance(
            rnd.trial.place(
                state.gang_request(job),
                rnd.policy,
                exclude=lim.unrestricted,
                explain=False,
            ),
            Placement,
        ):
            return
        need = lim.need
        why.reason = PendingReason.NonPreemptibleOverQuota
        why.message = "; ".join(
            f"non-preemptible work on {model} may only use tenant {job.tenant}'s "
            f"guarantee for that model: it runs {used / 1000:g} non-preemptible of "
            f"{guaranteed / 1000:g} guaranteed {model} GPUs, job needs {need / 1000:g}"
            for model, used, guaranteed in lim.over_models
        )
        why.details["models_over_guarantee"] = [
            {"model": m, "non_preemptible_gpus": u / 1000, "guaranteed_gpus": g / 1000}
            for m, u, g in lim.over_models
        ]

    @staticmethod
    def _model_limit_reason(
        state: Ledger, rnd: _Round, job: JobRecord, lim: _Limits, why: _Why
    ) -> None:
        """`ExceedsLimit` / `LendingLimit` when only per-model lending or borrowing limits
        keep the job out (it would fit on the GPU models they close to it): the first
        blocked model's reason, every blocked model's message."""
        if not lim.model_blocks or not isinstance(
            rnd.trial.place(
                state.gang_request(job),
                rnd.policy,
                exclude=lim.before_model_limits,
                explain=False,
            ),
            Placement,
        ):
            return
        first = next(iter(lim.model_blocks.values()))
        why.reason = first[0]
        why.message = "; ".join(b[1] for b in lim.model_blocks.values())
        why.details["model_limits"] = [{"reason": b[0], **b[2]} for b in lim.model_blocks.values()]

    @staticmethod
    def _maybe_reserve(
        state: Ledger,
        now_ms: int,
        rnd: _Round,
        job: JobRecord,
        lim: _Limits,
        why: _Why,
    ) -> None:
        """The first starving job short of capacity reserves what frees up soonest."""
        if (
            rnd.reservation is not None
            or why.reason not in CAPACITY_REASONS
            or not starving(state, job, now_ms)
        ):
            return
        rnd.reservation = reserve(state, job, now_ms, lim.exclude, rnd.trial)
        if rnd.reservation is not None:
            why.message += (
                f"; reserved {', '.join(sorted(rnd.reservation.nodes))} from "
                f"{instant(rnd.reservation.expected_start_ms)}"
            )
            why.details["reservation"] = rnd.reservation.describe()

    def _releasing_reason(self, state: Ledger, job: JobRecord, result, why: _Why) -> None:
        """`WaitingForPreemptedWorkloads` while victims preempted for the job still exit."""
        releasing = self._releasing(state, job)
        if not releasing:
            return
        moving = state.sched.consolidations.get(job.job_id)
        if moving is not None and all(
            r.preemption.reason == PreemptionReason.Consolidate for r in releasing
        ):
            why.reason = PendingReason.WaitingForConsolidation
            why.message = (
                "waiting for a consolidation: "
                + "; ".join(
                    f"{r.job_id} migrating off {', '.join(r.nodes())} to "
                    f"{', '.join(next((m.to_nodes for m in moving.moves if m.allocation_id == r.allocation_id), ()))}"
                    f" (checkpoint deadline {instant(r.preemption.deadline_ms)})"
                    for r in releasing
                )
                + f"; room on {', '.join(moving.target_nodes)}; {result.message}"
            )
            why.details["migrating_for_it"] = [r.job_id for r in releasing]
            return
        why.reason = PendingReason.WaitingForPreemptedWorkloads
        why.message = (
            "waiting for "
            + ", ".join(
                f"{r.job_id} to checkpoint and exit (deadline {instant(r.preemption.deadline_ms)})"
                for r in releasing
            )
            + f"; {result.message}"
        )
        why.details["preempted_for_it"] = [r.job_id for r in releasing]

    @staticmethod
    def _layout_reason(state: Ledger, job: JobRecord, why: _Why) -> None:
        """With `mig_regeometry` on, a MIG job no fixed layout offers is not `Unschedulable`
        when some MIG GPU could be given a layout with its profile: `MIGPlacementUnavailable`
        (so the preemption service may re-partition an idle GPU for it)."""
        profile = job.spec.resources.mig_profile
        if (
            why.reason != PendingReason.Unschedulable
            or profile is None
            or not defrag_settings(state.config.policy).mig_regeometry
        ):
            return
        models = job.spec.resources.gpu_models
        gpus = [
            (name, g.index)
            for name in sorted(state.nodes)
            for g in state.nodes[name].info.gpus
            if g.sharing == "mig"
            and g.mig_layout
            and (not models or g.model in models)
            and profile_for(g.model, profile) is not None
        ]
        if not gpus:
            return
        why.reason = PendingReason.MIGPlacementUnavailable
        why.message = (
            f"MIG {profile}: no GPU's current layout offers it; {len(gpus)} MIG GPUs "
            f"could be re-partitioned for it (policy mig_regeometry); {why.message}"
        )
        why.details["regeometry_candidates"] = len(gpus)

    @staticmethod
    def _regeometry_reason(state: Ledger, now_ms: int, job: JobRecord, result, why: _Why) -> None:
        """`WaitingForMigReconfiguration` while an idle GPU's layout is changed for the job;
        while every idle GPU's node is at its re-geometry rate limit, when that lapses."""
        if (
            why.reason == PendingReason.MIGPlacementUnavailable
            and job.job_id not in {r.job_id for r in state.mig.mig_requests.values()}
            and defrag_settings(state.config.policy).mig_regeometry
        ):
            regeo = regeometry_for(state, job, now_ms, frozenset(), state.fleet)
            lapses = rate_limit_lapses_ms(state, regeo.rate_limited, now_ms)
            if not regeo.node and lapses is not None:
                s = defrag_settings(state.config.policy)
                why.message += (
                    f"; an idle GPU on {', '.join(regeo.rate_limited)} could be re-partitioned, "
                    f"but the node's re-geometries are limited to {s.per_window} per "
                    f"{s.window_ms // 1000}s: next at {instant(lapses)}"
                )
                why.details["regeometry_rate_limited"] = list(regeo.rate_limited)
        for node in sorted(state.mig.mig_requests):
            r = state.mig.mig_requests[node]
            if r.job_id != job.job_id:
                continue
            why.reason = PendingReason.WaitingForMigReconfiguration
            why.message = (
                f"waiting for GPU {r.gpu_index} of {node} to be re-partitioned for "
                f"{job.spec.resources.mig_profile}: [{', '.join(r.previous_layout)}] -> "
                f"[{', '.join(r.layout)}] (requested {instant(r.occurred_at_ms)}); {result.message}"
            )
            why.details["mig_reconfiguration"] = {
                "node": node,
                "gpu_index": r.gpu_index,
                "layout": list(r.layout),
            }
            return

    @staticmethod
    def _models_over_guarantee(
        state: Ledger, job: JobRecord, fixed_model: dict[tuple[str, str], int], need: int
    ) -> list[tuple[str, int, int]]:
        """GPU models whose per-model guarantee of the job's tenant the job would exceed:
        (model, non-preemptible use, guarantee), in model order."""
        conf = state.config.tenants.get(job.tenant)
        if conf is None or not conf.guaranteed_by_model:
            return []
        out = []
        for model in sorted(conf.guaranteed_by_model):
            used = fixed_model.get((job.tenant, model), 0)
            if used + need > conf.guaranteed_by_model[model]:
                out.append((model, used, conf.guaranteed_by_model[model]))
        return out

    @staticmethod
    def _queued_since(state: Ledger, job: JobRecord) -> int | None:
        if not job.spec.depends_on:
            return job.pending_since_ms
        return deps.queued_since_ms(state, job)

    @staticmethod
    def _nodes_with_models(state: Ledger, models: set[str]) -> frozenset[str]:
        return frozenset(
            name
            for name in sorted(state.nodes)
            if any(g.model in models for g in state.nodes[name].info.gpus)
        )

    @staticmethod
    def _releasing(state: Ledger, job: JobRecord) -> list[AllocationRecord]:
        """Victim allocations still being released for this job."""
        recs = [state.allocations[a] for a in sorted(state.nominations.get(job.job_id, ()))]
        return [r for r in recs if not r.ended and r.preemption is not None]

    def _quota_block(
        self,
        state: Ledger,
        job: JobRecord,
        usage: dict[str, int],
        fixed_usage: dict[str, int],
        need: int,
        lending: bool | None = None,
    ):
        tenants = state.config.tenants
        t = job.tenant
        while t:
            conf = tenants.get(t)
            if conf is not None:
                used = sum(v for k, v in usage.items() if k == t or k.startswith(t + "/"))
                fixed = None
                if not job.preemptible and t == job.tenant:
                    fixed = fixed_usage.get(t, 0)
                block = quota_block(conf, used, need, fixed)
                if block is not None:
                    return block
            t = parent_of(t)
        if lends_limited(tenants) if lending is None else lending:
            capacity = state.fleet.capacity_gpus() * 1000
            return lending_block(tenants, usage, capacity, job.tenant, need)
        return None

    @staticmethod
    def _scheduled_quota(
        state: Ledger,
        now_ms: int,
        job: JobRecord,
        rnd: _Round,
        lim: _Limits,
        block: tuple[str, str],
        details: dict,
    ) -> tuple[str, str]:
        """`QuotaScheduled` when a schedule in force gives the tenant's non-preemptible work
        room for the job later within the horizon (or makes its class preemptible), with the
        first such fire time; else the `NonPreemptibleOverQuota` the quota check found."""
        need, fixed = lim.need, rnd.fixed.get(job.tenant, 0)
        key = (job.tenant, job.spec.priority_class)
        stretches = rnd.outlooks.get(key)
        if stretches is None:
            stretches = rnd.outlooks[key] = sched.outlook(state.config, *key, now_ms)
        fit = sched.first_fit(stretches[1:], fixed + need)
        if fit is None:
            return block
        now = stretches[0].guaranteed_gpu_milli
        when = sched.local_time(fit.at_ms, fit.timezone, job.pending_since_ms)
        then = (
            f"{fit.guaranteed_gpu_milli / 1000:g} from {when}"
            if fixed + need <= fit.guaranteed_gpu_milli
            else f"class {job.spec.priority_class} preemptible from {when}"
        )
        details.update(
            starts_at_ms=fit.at_ms,
            schedule=fit.schedule,
            guaranteed_gpu_milli=now,
            scheduled_gpu_milli=fit.guaranteed_gpu_milli,
            need_gpu_milli=need,
            non_preemptible_gpu_milli=fixed,
        )
        return (
            PendingReason.QuotaScheduled,
            f"tenant {job.tenant} is guaranteed {now / 1000:g} now, {then}"
            + (f" (runs {fixed / 1000:g} non-preemptible)" if fixed else "")
            + f"; job needs {need / 1000:g}",
        )

    def _pending(
        self, state: Ledger, now_ms: int, job: JobRecord, reason: str, message: str, details: dict
    ) -> list[Event]:
        if (reason, message) == (job.reason, job.message):
            return []
        return [
            self.emit(
                state,
                now_ms,
                PendingReasonChanged,
                key=f"{job.job_id}:{job.pending_changes}",
                correlation_id=job.job_id,
                job_id=job.job_id,
                reason=reason,
                message=message,
                details=details,
            )
        ]


def _count_spread(counts: dict[str, dict[str, int]], group: str, members) -> None:
    per_node = counts.setdefault(group, {})
    for m in members:
        per_node[m.node] = per_node.get(m.node, 0) + 1


def _bound_ms(rec: AllocationRecord) -> int:
    """When the allocation's newest members were bound: its placement, or its last resize
    (members added by a grow start from then)."""
    return rec.placed_ms if rec.resized_ms is None else max(rec.placed_ms, rec.resized_ms)
