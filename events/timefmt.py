"""Times for people: durations (`5s`, `58m20s`, `1d2h`) and instants, never epoch floats.

An instant in a decision's message must not depend on when it is read, and a decider's
message must not change with `now` (an unchanged pending reason is not re-published), so an
instant prints absolute: live logs carry wall-clock milliseconds and print as an ISO date
(`2026-11-23T19:30:05Z`); simulated logs run a virtual clock from 0 and print as the time
since the scenario's start (`t+9s`). Pure functions: no clock is read (the calendar is
computed here, so this decider-side module imports no `datetime`).
"""

from __future__ import annotations

WALL_CLOCK_FROM_MS = 946_684_800_000
"""2000-01-01T00:00:00Z: instants before it are virtual (scenario) times."""

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000))


def duration(ms: int | float) -> str:
    """`0s`, `0.5s`, `5s`, `58m20s`, `1h`, `1d2h3m4s` (at most whole seconds past a minute)."""
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 10_000 and ms != int(ms / 1000) * 1000:
        return f"{sign}{ms / 1000:.1f}s"
    rest = round(ms / 1000) * 1000
    if rest < 60_000:
        return f"{sign}{rest // 1000}s"
    parts = []
    for unit, size in _UNITS:
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n}{unit}")
    if rest:
        parts.append(f"{rest // 1000}s")
    return sign + "".join(parts)


def instant(at_ms: int | float) -> str:
    """An ISO date (UTC, seconds) for a wall-clock time; `t+<duration>` for a virtual one."""
    if at_ms >= WALL_CLOCK_FROM_MS:
        return iso_utc(at_ms)
    return f"t+{duration(at_ms)}"


def iso_utc(at_ms: int | float) -> str:
    """`2026-11-23T16:06:40Z` for epoch milliseconds (proleptic Gregorian, whole seconds)."""
    days, secs = divmod(int(at_ms // 1000), 86_400)
    # civil-from-days (H. Hinnant): era of 400 years, day of era, year of era, day of year
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    h, rem = divmod(secs, 3600)
    return f"{year:04d}-{month:02d}-{day:02d}T{h:02d}:{rem // 60:02d}:{rem % 60:02d}Z"
