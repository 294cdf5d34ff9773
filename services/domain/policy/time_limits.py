"""Time limits of jobs: the limit a job runs under, resolved at admission. Pure.

A job's own `time_limit_s` wins; without one it gets its class's `default_time_limit_s`, else
the class's `max_time_limit_s` (Slurm: a partition's `DefaultTime`, else its `MaxTime`). A
job asking for more than its class's maximum is rejected (`TimeLimitTooLong`), naming both.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpuledger.events import PriorityClassConfigured
from gpuledger.events.specs import JobSpec
from gpuledger.services.domain.tooling.timefmt import duration


class TimeLimitProblem(ValueError):
    """A job's time limit that its class does not allow (the message names both); `too_long`
    tells a limit above the class's maximum from a malformed one."""

    def __init__(self, message: str, *, too_long: bool = False) -> None:
        super().__init__(message)
        self.too_long = too_long


def _set(value: Any) -> int | None:
    return None if value is None or value is msgspec.UNSET else int(value)


def resolved_time_limit(spec: JobSpec, cls: PriorityClassConfigured) -> int | None:
    """Seconds of run time the job may use per run, or None for no limit. Raises
    `TimeLimitProblem` for a limit of 0 or less, or one above the class's maximum."""
    own = _set(spec.time_limit_s)
    most = _set(cls.max_time_limit_s)
    if own is not None:
        if own <= 0:
            raise TimeLimitProblem(f"time_limit_s: must be > 0 seconds, got {own}")
        if most is not None and own > most:
            raise TimeLimitProblem(
                f"time_limit_s: {duration(own * 1000)} is longer than class {cls.name!r} "
                f"allows (max_time_limit_s {duration(most * 1000)})",
                too_long=True,
            )
        return own
    default = _set(cls.default_time_limit_s)
    if default is not None and default > 0:
        return default if most is None else min(default, most)
    return most if most is not None and most > 0 else None
