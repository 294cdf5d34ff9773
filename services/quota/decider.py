"""Quota: computes every tenant's fair share from guarantees, weights, limits and demand, and
publishes it when the shares change (allocation changes alone do not republish).

It also runs the time-of-day policies (`schedules:` of the cluster configuration, folded
from `ScheduleConfigured`): when a schedule's cron time has come, it publishes the changed
tenants and priority classes as ordinary `TenantConfigured` / `PriorityClassConfigured`
events, and `next_wakeup_ms` is the next fire time. Why here and not in a sixth role: a
schedule changes guarantees, limits and class values, which are exactly the quota service's
inputs; running them here costs no new process, lease, identity or deciding slot, and the
fair shares that follow are computed by the same service right after. These changes travel on
quota's own subjects (`gl.quota.TenantConfigured`, `gl.quota.PriorityClassConfigured`,
`gl.quota.ServiceScaled`; the quota role has no permission on `gl.admin.>` or `gl.scale.>`),
and the fold takes them only as what a schedule in force produces at their time (anything
else is refused `NotScheduled`: services/domain/fold/ledger.py, docs/security.md).

No clock: the time comes from the shell; a change's id derives from the schedule's name,
its content and the fire time, and the fold records when each schedule last published
(`ConfigState.fired`), so a restart, a refold, the simulator and a what-if replay all publish
the same change once.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from gpuledger.events import (
    Event,
    FairShareUpdated,
    PriorityClassConfigured,
    ServiceScaled,
    TenantConfigured,
    encode,
)
from gpuledger.events import catalog as ev
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.policy import schedules as sched
from gpuledger.services.domain.policy.quota import fair_shares, model_limits_set
from gpuledger.services.domain.tooling import reads
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import AGGREGATES, NODE_SET, Step, of
from gpuledger.services.domain.tooling.stamp import stamp


def demand_by_tenant(state: Ledger) -> dict[str, int]:
    """Own demand per tenant: what it holds plus what it waits for. A pending job with a
    dependency not met yet is not demand: it could not run if it were given capacity."""
    demand = dict(state.tenant_gpu_milli)
    for tenant, waiting in state.quota.pending_gpu_milli.items():
        demand[tenant] = demand.get(tenant, 0) + waiting
    for job_id in sorted(state.pending_dependent):
        job = state.jobs[job_id]
        if deps.unmet(state, job.spec):
            demand[job.tenant] -= job.gpu_milli()
    for array_id in sorted(state.open_arrays):  # its tasks not released yet wait alike
        job = state.jobs[array_id]
        if job.window is not None and job.spec.depends_on and deps.unmet(state, job.spec):
            demand[job.tenant] -= job.window.unreleased * job.gpu_milli()
    return demand


STEPS: tuple[Step, ...] = (
    Step(
        "schedules",
        "the configuration changes of the schedules due (the clock only through "
        "`next_wakeup_ms`), and the services they scale",
        of("tenants", ev.ServiceScaled),
    ),
    Step(
        "capacity",
        "the fleet's milli-GPUs, in all and per model (by `nodes_version`)",
        of(NODE_SET, "mig"),
    ),
    Step(
        "demand",
        "what each tenant holds and waits for (`demand_by_tenant`), and its use per model; "
        "not a placement's progress, requests or pending reasons",
        of(
            AGGREGATES["jobs"] - {ev.JobSubmitted, ev.PendingReasonChanged, ev.PreemptionDeclined},
            AGGREGATES["allocations"]
            - {ev.MemberStarted, ev.MemberCheckpointed, ev.MemberExited, ev.PreemptionRequested},
        ),
    ),
    Step(
        "shares",
        "the fair shares computed and those last published (`FairShareUpdated`)",
        of("tenants"),
    ),
)
"""What quota's decide reads, step by step: its quiet set is derived from it."""


class Quota(LedgerService):
    name = "quota"
    unaffected_by = reads.unaffected_by(STEPS)
    quiet_until_wakeup = reads.quiet_until_wakeup(STEPS)

    def __init__(self, instance: str = "0", leader_epoch: int = 0) -> None:
        super().__init__(instance, leader_epoch)
        self._capacity: tuple = (-1, 0, {})  # memo: (nodes_version, milli-GPUs, per model)
        # memo: (capacity, config digest, demand) -> (shares, (guaranteed, fair) per tenant,
        # their digest): demands recur as jobs come and go
        self._shares: dict[tuple, tuple] = {}
        # memo of a quiet answer: (key, the `fair_shares` mapping it was compared with); the
        # ledger replaces that mapping on every FairShareUpdated, never mutates it
        self._quiet: tuple = (None, None)

    def cache_defaults(self) -> dict:
        return {"_capacity": (-1, 0, {}), "_shares": {}, "_quiet": (None, None)}

    def next_wakeup_ms(self, state: Ledger, now_ms: int) -> int | None:
        if not state.config.schedules:
            return None
        return sched.next_wakeup_ms(state.config.schedules, now_ms)

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        if state.config.schedules:
            changes = self._scheduled(state, now_ms)
            if changes:  # the fair shares follow once these are folded
                return changes
        if not state.config.tenants:
            return []
        if self._capacity[0] != state.nodes_version:
            self._capacity = (
                state.nodes_version,
                state.fleet.capacity_gpus() * 1000,
                state.fleet.capacity_by_model(),
            )
        demand = demand_by_tenant(state)
        key = (self._capacity[1], state.config.digest, tuple(sorted(demand.items())))
        per_model = model_limits_set(state.config.tenants)
        if per_model:  # per-model limits: the use of each model counts too
            key += (tuple(sorted(state.tenant_by_model.items())),)
        if self._quiet[1] is state.fair_shares and self._quiet[0] == key:
            return []
        memo = self._shares.get(key)
        if memo is None:  # fair shares depend on these alone
            if len(self._shares) >= 4096:
                self._shares.clear()
            shares = fair_shares(
                state.config.tenants,
                self._capacity[1],
                {},
                demand,
                dict(state.tenant_by_model) if per_model else None,
                self._capacity[2] if per_model else None,
            )
            current = {
                t: (s.guaranteed_gpu_milli, s.fair_share_gpu_milli) for t, s in shares.items()
            }
            digest = ",".join(f"{t}={g}/{f}" for t, (g, f) in sorted(current.items()))
            memo = self._shares[key] = (shares, current, digest)
        shares, current, digest = memo
        last = {
            t: (s.guaranteed_gpu_milli, s.fair_share_gpu_milli)
            for t, s in state.fair_shares.items()
        }
        if current == last:
            self._quiet = (key, state.fair_shares)
            return []
        allocated = state.tenant_gpu_milli
        return [
            self.emit(
                state,
                now_ms,
                FairShareUpdated,
                key=f"{state.last_seq}:{digest}",
                correlation_id="quota",
                shares=tuple(
                    msgspec.structs.replace(shares[t], allocated_gpu_milli=allocated.get(t, 0))
                    for t in sorted(shares)
                ),
            )
        ]

    def _scheduled(self, state: Ledger, now_ms: int) -> list[Event]:
        """The configuration changes of every schedule due at `now_ms` (services/domain/
        schedules.py), oldest fire time first; changes of one decide build on each other."""
        config = state.config
        tenants: dict[str, TenantConfigured] = {}
        classes: dict[str, PriorityClassConfigured] = {}
        out: list[Event] = []
        for fire_ms, name in sched.due(config.schedules, config.fired, now_ms):
            s = config.schedules[name]
            content = hashlib.blake2b(encode(s), digest_size=6).hexdigest()
            for change in s.tenants:
                new = sched.changed_tenant(
                    tenants.get(change.tenant) or config.tenants.get(change.tenant), change
                )
                tenants[change.tenant] = new
                out.append(
                    self._config_event(
                        TenantConfigured, new, now_ms, name, fire_ms, content, change.tenant
                    )
                )
            for change in s.priority_classes:
                new = sched.changed_class(
                    classes.get(change.name) or config.classes.get(change.name), change
                )
                classes[change.name] = new
                out.append(
                    self._config_event(
                        PriorityClassConfigured, new, now_ms, name, fire_ms, content, change.name
                    )
                )
            for change in s.services:
                job = state.jobs.get(change.job_id)
                if job is None or not job.spec.is_service:
                    continue  # not (yet) a service of this cluster: nothing to scale
                out.append(
                    self._stamped(
                        ServiceScaled,
                        now_ms,
                        name,
                        fire_ms,
                        content,
                        change.job_id,
                        job_id=change.job_id,
                        tenant=job.tenant,
                        replicas=change.replicas,
                    )
                )
        return out

    def _config_event(
        self, cls, value, now_ms: int, name: str, fire_ms: int, content: str, target: str
    ):
        """Schedule `name`'s change of a tenant or class: `value`'s fields as `cls`."""
        fields = {f: getattr(value, f) for f in cls.__struct_fields__ if f not in _ENVELOPE}
        return self._stamped(cls, now_ms, name, fire_ms, content, target, **fields)

    def _stamped(
        self,
        cls: type[Event],
        now_ms: int,
        name: str,
        fire_ms: int,
        content: str,
        target: str,
        /,
        **fields: Any,
    ) -> Event:
        """A change schedule `name` makes at `fire_ms` to `target`, keyed by the schedule's
        content so that a refold or a replay publishes it once."""
        return stamp(
            cls,
            key=f"{name}@{fire_ms}:{content}:{target}",
            producer=self.producer,
            now_ms=now_ms,
            correlation_id=f"{sched.CORRELATION_PREFIX}{name}",
            causation_id=f"{name}@{fire_ms}",
            **fields,
        )


_ENVELOPE = frozenset(("event_id", "occurred_at_ms", "causation_id", "correlation_id", "producer"))
