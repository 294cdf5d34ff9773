"""The tenants fold: configuration (tenants, priority classes, policy, schedules), fair
shares, and each tenant's capacity in use (in all, per GPU model, non-preemptible) with its
time-decayed past usage.

Owns `config`, `fair_shares`, `tenant_gpu_milli`, `user_gpu_milli`, `tenant_by_model`,
`user_by_model`, `sched.tenant_fixed_gpu_milli`, `sched.tenant_fixed_by_model`, `quota.decayed_usage`,
`quota.user_usage` and `quota.period_usage`. The allocations fold books capacity through
`book` (placement, end, shrink, grow); usage is accrued at the old rate before every change
of it, the tenant's and the booked work's user's alike (one accrual, two levels: the Fair
Tree's tenants and their users).

Invariant: `tenant_gpu_milli` is the sum of the tenant's active allocations, `user_gpu_milli`
the same per user of their jobs, and `tenant_by_model` (`user_by_model`: per user) the same
per model of each member's first GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from gpuledger import events as ev
from gpuledger.events import MemberPlacement
from gpuledger.events.reasons import FoldRefusal
from gpuledger.events.slurm_policy import SlurmPolicy
from gpuledger.services.domain.fold import keys, queue
from gpuledger.services.domain.fold.aggregate import Fold
from gpuledger.services.domain.fold.refusals import Refusal
from gpuledger.services.domain.policy.schedules import (
    SCHEDULE_PREFIX,
    changed_class,
    changed_tenant,
    last_fire_ms,
)
from gpuledger.services.domain.policy.usage import advance, step_ms

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState

_ENVELOPE = frozenset(ev.Event.__struct_fields__)
"""Fields every event has (ids, time, producer): not part of what a schedule sets."""


def fair_share(ledger: LedgerState, e: ev.FairShareUpdated) -> None:
    ledger.fair_shares = {s.tenant: s for s in e.shares}


def configured(ledger: LedgerState, e: Any) -> None:
    """A tenant, priority class, policy or schedule configured (`ConfigState.apply`)."""
    if isinstance(e, ev.PolicyConfigured):
        _usage_policy(ledger, e.policy.usage_half_life_s, e.occurred_at_ms)
    before = (
        ledger.config.classes.get(e.name) if isinstance(e, ev.PriorityClassConfigured) else None
    )
    ledger.config.apply(e)
    if before is not None:
        now = ledger.config.classes[e.name].preemptible
        if now != before.preemptible:
            queue.class_preemptibility(ledger, e.name, now)


def note_fired(ledger: LedgerState, e: ev.ServiceScaled) -> None:
    """A time-of-day policy's replica change (`ConfigState.note_fired`)."""
    ledger.config.note_fired(e)


def _usage_policy(ledger: LedgerState, half_life_s: int, at_ms: int) -> None:
    """Before a new half-life takes effect: fold usage so far under the old one; start
    every tenant at 0 when it is switched on; forget it when switched off."""
    old = ledger.config.policy.usage_half_life_s
    if old == half_life_s:
        return
    for tenant in sorted(ledger.quota.decayed_usage):
        _accrue(ledger, tenant, at_ms)
    for tenant, user in sorted(ledger.quota.user_usage):
        _accrue_user(ledger, tenant, user, at_ms)
    if half_life_s <= 0:
        ledger.quota.decayed_usage.clear()
        ledger.quota.user_usage.clear()
        ledger.quota.period_usage.clear()
    elif old <= 0:
        ledger.quota.decayed_usage = {t: (0, at_ms) for t in sorted(ledger.tenant_gpu_milli)}
        ledger.quota.user_usage = {k: (0, at_ms) for k in sorted(ledger.user_gpu_milli)}


def book(
    ledger: LedgerState,
    tenant: str,
    members: Iterable[MemberPlacement],
    per_member_milli: int,
    preemptible: bool,
    sign: int,
    at_ms: int,
    user: str,
) -> None:
    """Add (`sign` 1) or take away (-1) the capacity of `members` (each `per_member_milli`)
    from what `tenant` and its `user` (the job's, `-` when it names none) use: in all (their
    usage accrued up to `at_ms` first), per GPU model, and, for non-preemptible work, its
    fixed use."""
    members = tuple(members)
    total = per_member_milli * len(members)
    _accrue(ledger, tenant, at_ms)
    _accrue_user(ledger, tenant, user, at_ms)
    ledger.tenant_gpu_milli[tenant] = ledger.tenant_gpu_milli.get(tenant, 0) + sign * total
    key = (tenant, user)
    if held := ledger.user_gpu_milli.get(key, 0) + sign * total:
        ledger.user_gpu_milli[key] = held
    else:
        ledger.user_gpu_milli.pop(key, None)
    by_model = member_models(ledger, members, per_member_milli)
    for model in sorted(by_model):
        key = (tenant, model)
        left = ledger.tenant_by_model.get(key, 0) + sign * by_model[model]
        if left:
            ledger.tenant_by_model[key] = left
        else:
            ledger.tenant_by_model.pop(key, None)
        mine = (tenant, user, model)
        if left := ledger.user_by_model.get(mine, 0) + sign * by_model[model]:
            ledger.user_by_model[mine] = left
        else:
            ledger.user_by_model.pop(mine, None)
    if not preemptible:
        fixed = ledger.sched.tenant_fixed_gpu_milli
        fixed[tenant] = fixed.get(tenant, 0) + sign * total
        fixed_by_model = ledger.sched.tenant_fixed_by_model
        for model, milli in by_model.items():
            key = (tenant, model)
            fixed_by_model[key] = fixed_by_model.get(key, 0) + sign * milli


def member_models(
    ledger: LedgerState, members: Iterable[MemberPlacement], per_member_milli: int
) -> dict[str, int]:
    """GPU capacity of `members` per GPU model (a member counts under the model of its
    first GPU; unknown nodes are skipped)."""
    out: dict[str, int] = {}
    for m in members:
        node = ledger.nodes.get(m.node)
        if node is None or not m.gpus:
            continue
        model = next((g.model for g in node.info.gpus if g.index == m.gpus[0]), None)
        if model is not None:
            out[model] = out.get(model, 0) + per_member_milli
    return out


def usage_at(ledger: LedgerState, tenant: str, now_ms: int) -> int:
    """The tenant's time-decayed past usage (milli-GPU·ms) at `now_ms`; 0 when
    `policy.usage_half_life_s` is off."""
    half_life = ledger.config.policy.usage_half_life_s
    if half_life <= 0:
        return 0
    value, since = ledger.quota.decayed_usage.get(tenant, (0, now_ms))
    rate = ledger.tenant_gpu_milli.get(tenant, 0)
    return advance(value, since, rate, max(now_ms, since), step_ms(half_life))


def _accrue(ledger: LedgerState, tenant: str, at_ms: int) -> None:
    """Fold the tenant's usage up to `at_ms` at its current rate (call before the rate
    changes). Event times never run backwards here: an earlier time is clamped."""
    half_life = ledger.config.policy.usage_half_life_s
    if half_life <= 0:
        return
    value, since = ledger.quota.decayed_usage.get(tenant, (0, at_ms))
    at = max(at_ms, since)
    rate = ledger.tenant_gpu_milli.get(tenant, 0)
    step = step_ms(half_life)
    period = _calc_period_ms(ledger)
    if period and (boundary := at - at % period) >= since:
        ledger.quota.period_usage[tenant] = (boundary, advance(value, since, rate, boundary, step))
    ledger.quota.decayed_usage[tenant] = (advance(value, since, rate, at, step), at)


def user_usage_at(ledger: LedgerState, tenant: str, user: str, now_ms: int) -> int:
    """`user`'s own time-decayed past usage in `tenant` (milli-GPU·ms) at `now_ms`, as
    `usage_at` is the tenant's; 0 when `policy.usage_half_life_s` is off."""
    half_life = ledger.config.policy.usage_half_life_s
    if half_life <= 0:
        return 0
    value, since = ledger.quota.user_usage.get((tenant, user), (0, now_ms))
    rate = ledger.user_gpu_milli.get((tenant, user), 0)
    return advance(value, since, rate, max(now_ms, since), step_ms(half_life))


def _accrue_user(ledger: LedgerState, tenant: str, user: str, at_ms: int) -> None:
    """Fold the user's usage up to `at_ms` at its current rate, as `_accrue` the tenant's."""
    half_life = ledger.config.policy.usage_half_life_s
    if half_life <= 0:
        return
    key = (tenant, user)
    value, since = ledger.quota.user_usage.get(key, (0, at_ms))
    at = max(at_ms, since)
    rate = ledger.user_gpu_milli.get(key, 0)
    ledger.quota.user_usage[key] = (advance(value, since, rate, at, step_ms(half_life)), at)


def _calc_period_ms(ledger: LedgerState) -> int:
    """The `slurm` profile's `PriorityCalcPeriod` in ms; 0 under any other profile."""
    policy = ledger.config.policy
    if policy.profile != "slurm":
        return 0
    site = policy.slurm if policy.slurm is not UNSET else SlurmPolicy()
    return max(0, int(site.calc_period_s)) * 1000


def usage_at_period(ledger: LedgerState, tenant: str, boundary_ms: int) -> int:
    """The tenant's decayed usage as it was at `boundary_ms`, the start of the current
    `PriorityCalcPeriod` (`slurm` profile): usage folded after it does not count until the
    next recomputation, as in Slurm. 0 when usage is off or the tenant had none by then."""
    if ledger.config.policy.usage_half_life_s <= 0:
        return 0
    _, since = ledger.quota.decayed_usage.get(tenant, (0, boundary_ms))
    if since <= boundary_ms:  # nothing folded since: the fold extends to the boundary
        return usage_at(ledger, tenant, boundary_ms)
    at, value = ledger.quota.period_usage.get(tenant, (None, 0))
    return value if at == boundary_ms else 0  # first folded after the boundary: none then


def not_scheduled(
    ledger: LedgerState, e: ev.TenantConfigured | ev.PriorityClassConfigured | ev.ServiceScaled
) -> Refusal | None:
    """None if the quota role's change `e` is what a schedule in force produces at its
    time (services/quota/decider.py `_scheduled`), else why not (`NotScheduled`): it names
    a schedule in force (`correlation_id` `schedule:<name>`), the schedule's latest fire
    time at the event's time (`causation_id` `<name>@<fire ms>`), and carries exactly that
    schedule's change applied to what is in force (a tenant's or class's other fields
    unchanged; a service's replicas as scheduled)."""
    found = _firing_schedule(ledger, e)
    if isinstance(found, str):
        why: str | None = found
    elif isinstance(e, ev.ServiceScaled):
        why = _not_scaled(ledger, *found, e)
    else:
        why = _not_configured(ledger, *found, e)
    if why is None:
        return None
    return Refusal(FoldRefusal.NotScheduled, f"{type(e).__name__} from {e.producer[:100]!r}: {why}")


def _firing_schedule(ledger: LedgerState, e: ev.Event) -> tuple[str, Any] | str:
    """(name, schedule) of the schedule in force that `e`'s ids name, fired last at the
    fire time its causation id names; else why not."""
    corr = e.correlation_id
    if not corr.startswith(SCHEDULE_PREFIX):
        return f"correlation id {corr[:100]!r} names no schedule"
    name = corr[len(SCHEDULE_PREFIX) :]
    s = ledger.config.schedules.get(name)
    if s is None or s.removed:
        return f"no schedule {name[:100]!r} in force"
    cause, _, fire = e.causation_id.rpartition("@")
    if cause != name or not fire.removeprefix("-").isdigit() or len(fire) > 20:
        return f"causation id {e.causation_id[:100]!r} is not '{name}@<fire ms>'"
    latest = last_fire_ms(s.cron, s.timezone, e.occurred_at_ms)
    if latest is None or int(fire) != latest:
        return f"schedule {name!r} last fired at {latest} ms by {e.occurred_at_ms}, not {fire}"
    return name, s


def _not_scaled(ledger: LedgerState, name: str, s: Any, e: ev.ServiceScaled) -> str | None:
    """Why `e` is not schedule `s`'s scaling of an existing service, or None."""
    change = next((c for c in s.services if c.job_id == e.job_id), None)
    key = keys.job_key(ledger, e.tenant, e.job_id)
    job = ledger.jobs.get(key) if key is not None else None
    if change is None or job is None:
        return f"schedule {name!r} scales no service {e.job_id!r} of {e.tenant!r}"
    if e.replicas != change.replicas:
        return f"schedule {name!r} sets {e.job_id} to {change.replicas} replicas, not {e.replicas}"
    return None


def _not_configured(
    ledger: LedgerState, name: str, s: Any, e: ev.TenantConfigured | ev.PriorityClassConfigured
) -> str | None:
    """Why `e` is not schedule `s`'s change of a tenant or class applied to what is in force
    (every other field unchanged), or None."""
    if isinstance(e, ev.TenantConfigured):
        t_change = next((c for c in s.tenants if c.tenant == e.tenant), None)
        if t_change is None:
            return f"schedule {name!r} does not change tenant {e.tenant!r}"
        want: Any = changed_tenant(ledger.config.tenants.get(e.tenant), t_change)
    else:
        c_change = next((c for c in s.priority_classes if c.name == e.name), None)
        if c_change is None:
            return f"schedule {name!r} does not change class {e.name!r}"
        want = changed_class(ledger.config.classes.get(e.name), c_change)
    differ = [
        f"{f}={getattr(e, f)!r} (scheduled {getattr(want, f)!r})"
        for f in type(e).__struct_fields__
        if f not in _ENVELOPE and getattr(e, f) != getattr(want, f)
    ]
    if differ:
        return f"not what schedule {name!r} sets: {'; '.join(differ)[:300]}"
    return None


FOLD = Fold(
    name="tenants",
    owns=frozenset(
        {
            "config",
            "fair_shares",
            "tenant_gpu_milli",
            "user_gpu_milli",
            "tenant_by_model",
            "user_by_model",
            "sched.tenant_fixed_gpu_milli",
            "sched.tenant_fixed_by_model",
            "quota.decayed_usage",
            "quota.user_usage",
            "quota.period_usage",
        }
    ),
    handlers={
        ev.FairShareUpdated: fair_share,
        ev.TenantConfigured: configured,
        ev.PriorityClassConfigured: configured,
        ev.PolicyConfigured: configured,
        ev.ScheduleConfigured: configured,
    },
    modules=("tenants",),
)
