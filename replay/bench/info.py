"""What every `gpuledger bench` JSON carries besides its figures: the machine and the moment;
and the helpers of the paired runs (`baseline_run`, `paired`)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from pathlib import Path
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


def baseline_run(
    python: str, subcommand: str, args: list[str], timeout_s: float = 1800
) -> dict[str, Any]:
    """`PYTHON -m gpuledger.services.cli bench SUBCOMMAND ARGS --json FILE` with another
    checkout's Python (its own code), the figures it wrote. RuntimeError when it fails."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpuledger-baseline-") as tmp:
        out = Path(tmp) / "baseline.json"
        done = subprocess.run(
            [
                python,
                "-m",
                "gpuledger.services.cli",
                "bench",
                subcommand,
                *args,
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"baseline {python} bench {subcommand} failed "
                f"(exit {done.returncode}): {done.stderr.strip()[-1500:]}"
            )
        return json.loads(out.read_text())


def paired(
    mine: list[dict[str, Any]], base: list[dict[str, Any]], keys: list[str]
) -> dict[str, Any]:
    """Medians of each figure for both sides and the median of the pair-by-pair ratios
    (mine / baseline)."""
    out: dict[str, Any] = {}
    for k in keys:
        a = [m[k] for m in mine if isinstance(m.get(k), (int, float))]
        b = [m[k] for m in base if isinstance(m.get(k), (int, float))]
        out[k] = {
            "median": median(a),
            "baseline_median": median(b),
            "ratio_median": median([x / y for x, y in zip(a, b, strict=False) if y]),
        }
    return out
