"""What every `gpuledger bench` JSON carries besides its figures: the machine and the moment."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from typing import Any


def machine() -> dict[str, Any]:
    """Cores (all, and usable by this process), Python, platform, load averages, UTC time."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        "load_avg_1_5_15": load,
        "utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def median(values: list[float]) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
