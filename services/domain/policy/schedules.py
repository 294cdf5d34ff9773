"""Time-of-day policies: when a schedule fires, and what configuration it puts in force.

Pure functions over a `ScheduleConfigured` and the configuration in force; the time always
comes in as an argument (epoch ms, from the shell). Cron expressions are read by `cronsim`
(five fields, Vixie/Debian cron semantics) in the schedule's IANA zone (`zoneinfo`), so
daylight saving is honoured: a time skipped by the spring change fires once at the first
instant after the gap, a time repeated by the autumn change fires once.

The fire times of a schedule are absolute instants; a change keyed by `(name, fire time)` is
therefore the same event in every shell that decides it (live, simulator, what-if).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from gpuledger.events import (
    ClassChange,
    PriorityClassConfigured,
    ScheduleConfigured,
    TenantChange,
    TenantConfigured,
)
from gpuledger.services.domain.policy.quota import borrowing_limit, lending_limit, unset_if_none

T = TypeVar("T")

SCHEDULE_PREFIX = CORRELATION_PREFIX = "schedule:"
"""Configuration events a schedule publishes carry `correlation_id = schedule:<name>`."""


@functools.lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; ValueError if unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def cron_problem(expr: str, tz: str) -> str | None:
    """Why `expr` in zone `tz` cannot be a schedule, or None."""
    try:
        z = zone(tz)
    except ValueError as exc:
        return str(exc)
    if len(expr.split()) != 5:
        return f"cron expression {expr!r} must have 5 fields (minute hour day-of-month month day-of-week)"
    try:
        next(iter(CronSim(expr, datetime(2000, 1, 1, tzinfo=z))))
    except (CronSimError, StopIteration) as exc:
        return f"cannot read cron expression {expr!r}: {exc}"
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _dt(ms: int, z: ZoneInfo) -> datetime:
    return (_EPOCH + timedelta(milliseconds=ms)).astimezone(z)  # arithmetic in UTC, then the zone


def _ms(dt: datetime) -> int:
    delta = dt.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@functools.lru_cache(maxsize=4096)
def next_fire_ms(expr: str, tz: str, after_ms: int) -> int | None:
    """The first fire time strictly after `after_ms`, or None (an expression that never
    matches again, e.g. 30 February)."""
    z = zone(tz)
    # cron works in whole seconds: start from the last whole second at or before after_ms
    start = _dt(after_ms - after_ms % 1000, z)
    try:
        return _ms(next(iter(CronSim(expr, start))))
    except StopIteration:
        return None


@functools.lru_cache(maxsize=4096)
def last_fire_ms(expr: str, tz: str, at_ms: int) -> int | None:
    """The latest fire time at or before `at_ms`, or None."""
    z = zone(tz)
    start = _dt(at_ms - at_ms % 1000 + 1000, z)  # reverse iteration excludes its start
    try:
        for dt in CronSim(expr, start, reverse=True):
            ms = _ms(dt)
            if ms <= at_ms:
                return ms
    except StopIteration:
        pass
    return None


def due(
    schedules: dict[str, ScheduleConfigured], fired: dict[str, int], now_ms: int
) -> list[tuple[int, str]]:
    """`(fire_ms, name)` of every schedule that has a fire time after its last publication and
    at or before `now_ms` (only the latest such time: a missed fire is caught up once, with
    the values of the latest), oldest first, so the latest schedule's values fold last."""
    out = []
    for name in sorted(schedules):
        s = schedules[name]
        if s.removed:
            continue
        last = last_fire_ms(s.cron, s.timezone, now_ms)
        if last is None:
            continue
        done = fired.get(name)
        if done is None or last > done:
            out.append((last, name))
    out.sort()
    return out


def next_wakeup_ms(schedules: dict[str, ScheduleConfigured], now_ms: int) -> int | None:
    """The earliest fire time of any schedule strictly after `now_ms`."""
    times = [
        t
        for s in schedules.values()
        if not s.removed and (t := next_fire_ms(s.cron, s.timezone, now_ms)) is not None
    ]
    return min(times, default=None)


def changed_tenant(current: TenantConfigured | None, change: TenantChange) -> TenantConfigured:
    """The tenant in force with `change` applied (a tenant not configured yet starts empty)."""
    base = current or TenantConfigured(tenant=change.tenant)
    return TenantConfigured(
        tenant=change.tenant,
        guaranteed_gpu_milli=_keep(change.guaranteed_gpu_milli, base.guaranteed_gpu_milli),
        limit_gpu_milli=_keep(change.limit_gpu_milli, base.limit_gpu_milli),
        over_quota_weight=_keep(change.over_quota_weight, base.over_quota_weight),
        guaranteed_by_model=dict(base.guaranteed_by_model),
        borrowing_limit_gpu_milli=unset_if_none(borrowing_limit(base)),
        lending_limit_gpu_milli=unset_if_none(lending_limit(base)),
        borrowing_limit_by_model=base.borrowing_limit_by_model,
        lending_limit_by_model=base.lending_limit_by_model,
        user_limits=base.user_limits,
    )


def changed_class(
    current: PriorityClassConfigured | None, change: ClassChange
) -> PriorityClassConfigured:
    """The priority class in force with `change` applied."""
    base = current or PriorityClassConfigured(name=change.name, value=0)
    return PriorityClassConfigured(
        name=change.name,
        value=_keep(change.value, base.value),
        preemptible=_keep(change.preemptible, base.preemptible),
        slo_class=base.slo_class,
        description=base.description,
        grace_s=base.grace_s,
        allow_timeslice=base.allow_timeslice,
        default_time_limit_s=base.default_time_limit_s,
        max_time_limit_s=base.max_time_limit_s,
    )


def _keep(new: T | None, old: T) -> T:
    return old if new is None else new


def describe(s: ScheduleConfigured) -> str:
    """One line: what the schedule changes (`tenant inference guaranteed=6 limit=8; class
    research value=40`)."""
    parts = []
    for t in s.tenants:
        fields = [
            f"{k}={_gpus(v) if k != 'weight' else v}"
            for k, v in (
                ("guaranteed", t.guaranteed_gpu_milli),
                ("limit", t.limit_gpu_milli),
                ("weight", t.over_quota_weight),
            )
            if v is not None
        ]
        parts.append(f"tenant {t.tenant} {' '.join(fields)}")
    for c in s.priority_classes:
        fields = [
            f"{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in (("value", c.value), ("preemptible", c.preemptible))
            if v is not None
        ]
        parts.append(f"class {c.name} {' '.join(fields)}")
    return "; ".join(parts)


def _gpus(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


HORIZON_MS = 7 * 86_400_000
"""How far ahead admission and the scheduler look at the schedules (7 days): a job that fits
only under a schedule firing later than that is judged as if it never fires."""

_MAX_FIRES = 2_016
"""At most this many fire times per schedule inside the horizon (one every 5 minutes for 7
days); a schedule firing more often is followed only that far."""


@dataclass(frozen=True)
class Stretch:
    """From `at_ms` on (until the next stretch), what a tenant is guaranteed and whether a
    priority class is preemptible, under the schedules in force."""

    at_ms: int
    guaranteed_gpu_milli: int
    preemptible: bool
    schedule: str = ""
    """The schedule whose fire time starts the stretch ("" for the configuration in force)."""
    timezone: str = "UTC"


def outlook(config: Any, tenant: str, class_name: str, now_ms: int) -> list[Stretch]:
    """The guarantee of `tenant` and the preemptibility of `class_name` from `now_ms` to the
    end of the horizon (`HORIZON_MS`), as stretches in time order: the first is what is in
    force now (with any change due but not yet published applied), each next one starts at a
    schedule's fire time that changes either. `config` is the folded `ConfigState`. Pure and
    deterministic (changes fold in order of fire time, then schedule name, as the quota
    service publishes them)."""
    t = config.tenants.get(tenant)
    c = config.classes.get(class_name)
    g = t.guaranteed_gpu_milli if t is not None else 0
    p = c.preemptible if c is not None else True
    relevant = {
        name: s
        for name, s in config.schedules.items()
        if not s.removed
        and (
            any(x.tenant == tenant for x in s.tenants)
            or any(x.name == class_name for x in s.priority_classes)
        )
    }
    if not relevant:
        return [Stretch(now_ms, g, p)]
    for _, name in due(relevant, config.fired, now_ms):
        g, p = _changed(relevant[name], tenant, class_name, g, p)
    out = [Stretch(now_ms, g, p)]
    fires: list[tuple[int, str]] = []
    end = now_ms + HORIZON_MS
    for name in sorted(relevant):
        s, at = relevant[name], now_ms
        for _ in range(_MAX_FIRES):
            fire = next_fire_ms(s.cron, s.timezone, at)
            if fire is None or fire > end:
                break
            at = fire
            fires.append((at, name))
    fires.sort()
    for at, name in fires:
        g, p = _changed(relevant[name], tenant, class_name, g, p)
        if (g, p) != (out[-1].guaranteed_gpu_milli, out[-1].preemptible):
            out.append(Stretch(at, g, p, name, relevant[name].timezone))
    return out


def _changed(
    s: ScheduleConfigured, tenant: str, class_name: str, g: int, p: bool
) -> tuple[int, bool]:
    for t in s.tenants:
        if t.tenant == tenant and t.guaranteed_gpu_milli is not None:
            g = t.guaranteed_gpu_milli
    for c in s.priority_classes:
        if c.name == class_name and c.preemptible is not None:
            p = c.preemptible
    return g, p


def first_fit(stretches: list[Stretch], need_milli: int) -> Stretch | None:
    """The first stretch in which work of `need_milli` milli-GPUs of the class may run as far
    as quota goes (the class is preemptible then, or the guarantee covers it), or None."""
    for s in stretches:
        if s.preemptible or need_milli <= s.guaranteed_gpu_milli:
            return s
    return None


def local_time(at_ms: int, tz: str, since_ms: int) -> str:
    """`08:00 Asia/Kolkata` (the wall clock of the zone), with the date in front
    (`2026-06-03 08:00 Asia/Kolkata`) when `at_ms` is a day or more after `since_ms`."""
    dt = _dt(at_ms, zone(tz))
    clock = f"{dt:%H:%M} {tz}"
    return clock if at_ms - since_ms < 86_400_000 else f"{dt:%Y-%m-%d} {clock}"
