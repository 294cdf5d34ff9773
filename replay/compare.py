"""What-if comparison: the metrics of two event logs, side by side.

Each log is measured by `replay.metrics.measure` (one fold with the `Ledger`, time-weighted
quantities integrated between consecutive event times); the metric definitions live there,
once, and are shared with `simulate --json` and the DuckDB `run_metrics` view. This module
adds the comparison (`delta` = B - A) and the table rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuledger import events as ev
from gpuledger.events import Event
from gpuledger.replay.metrics import jain, measure, percentile

__all__ = [
    "CompareError",
    "Summary",
    "compare",
    "jain",
    "load",
    "observed",
    "percentile",
    "rows",
    "summarize",
]


class CompareError(ValueError):
    """A log that cannot be compared (missing, unreadable, unsupported format)."""


@dataclass
class Summary:
    """Metrics of one log, plus the series the plots draw."""

    name: str
    metrics: dict[str, Any]
    allocation: list[tuple[float, float]] = field(default_factory=list)
    """(t_s, allocation %) after every change."""
    utilisation: list[tuple[float, float]] = field(default_factory=list)
    """(t_s, mean SM activity % of the GPUs reported so far) at every metrics report."""
    waits: dict[str, list[float]] = field(default_factory=dict)
    """Per SLO class, every placed job's wait in seconds (sorted)."""


def summarize(entries: Iterable[tuple[int, str, Event]], name: str = "") -> Summary:
    """Fold a log and compute its metrics (definitions in `replay.metrics`)."""
    m = measure(entries)
    return Summary(
        name=name,
        metrics=m.metrics,
        allocation=m.allocation,
        utilisation=m.utilisation,
        waits=m.waits,
    )


def observed(log: str | Path) -> Summary | None:
    """The observed column of `log`: its observation sidecar (`replay.observed`) measured by
    `replay.metrics.measure_observed`; None when the log has no sidecar."""
    from gpuledger.replay import observed as obs
    from gpuledger.replay.metrics import measure_observed

    path = obs.find(log)
    if path is None:
        return None
    try:
        header, items = obs.read(path)
        m = measure_observed(header, items)
    except obs.ObservedError as exc:
        raise CompareError(str(exc)) from None
    return Summary(name="observed", metrics=m.metrics, allocation=m.allocation, waits=m.waits)


def load(path: str | Path) -> Summary:
    """Summarize a log: JSONL, Parquet, or the log a DuckDB projection recorded."""
    import duckdb

    from gpuledger.replay.export import read_any
    from gpuledger.replay.logio import LogFormatError

    p = Path(path)
    if not p.is_file():
        raise CompareError(f"{p}: no such log file")
    try:
        return summarize(read_any(p), name=str(p))
    except (LogFormatError, ev.UndecodableEvent) as exc:
        raise CompareError(str(exc)) from exc
    except (OSError, duckdb.Error) as exc:
        raise CompareError(f"{p}: {exc}") from exc


def _delta(a: Any, b: Any) -> Any:
    if isinstance(a, dict) or isinstance(b, dict):
        a, b = a or {}, b or {}
        return {k: _delta(a.get(k), b.get(k)) for k in sorted(set(a) | set(b))}
    if isinstance(a, bool) or isinstance(b, bool):
        return None
    if isinstance(a, int | float) and isinstance(b, int | float):
        d = b - a
        return d if not isinstance(d, float) or math.isfinite(d) else None
    return None


def compare(a: Summary, b: Summary) -> dict[str, Any]:
    """The machine-readable comparison: both metric sets and `delta` = B - A (None where
    either side has no value)."""
    ma = {k: v for k, v in a.metrics.items()}
    mb = {k: v for k, v in b.metrics.items()}
    return {
        "a": {"log": a.name, "metrics": ma},
        "b": {"log": b.name, "metrics": mb},
        "delta": _delta(ma, mb),
    }


# ---------------------------------------------------------------------------- table rows


def human_duration(s: float | None) -> str:
    """`42.0s`, `3.5m`, `2.1h`, `1.3d`; `n/a` for None."""
    if s is None:
        return "n/a"
    sign = "-" if s < 0 else ""
    s = abs(s)
    if s < 60:
        return f"{sign}{s:.1f}s"
    if s < 3600:
        return f"{sign}{s / 60:.1f}m"
    if s < 86400:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / 86400:.1f}d"


def _signed(text: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return text if value < 0 or text.startswith("-") else f"+{text}"


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(METRIC, A, B, DELTA) rows as text, in reading order."""
    a, b, d = result["a"]["metrics"], result["b"]["metrics"], result["delta"]
    out: list[tuple[str, str, str, str]] = []

    def num(label: str, va, vb, dv, fmt: str) -> None:
        def f(v) -> str:
            return "n/a" if v is None else format(v, fmt)

        out.append((label, f(va), f(vb), _signed(f(dv), dv)))

    def dur(label: str, va, vb, dv) -> None:
        out.append((label, human_duration(va), human_duration(vb), _signed(human_duration(dv), dv)))

    num("events", a["events"], b["events"], d["events"], "d")
    dur(
        "span",
        a["end_s"] - a["start_s"],
        b["end_s"] - b["start_s"],
        (b["end_s"] - b["start_s"]) - (a["end_s"] - a["start_s"]),
    )
    for k in ("submitted", "completed", "failed", "rejected", "cancelled", "unfinished"):
        num(f"jobs {k}", a["jobs"][k], b["jobs"][k], d["jobs"][k], "d")
    num(
        "GPU allocation % (time-weighted)",
        a["gpu_allocation_pct"],
        b["gpu_allocation_pct"],
        d["gpu_allocation_pct"],
        ".1f",
    )
    num(
        "SM activity % (mean)",
        a["sm_activity_pct"],
        b["sm_activity_pct"],
        d["sm_activity_pct"],
        ".1f",
    )
    for c in sorted(set(a["wait_s_p50_by_class"]) | set(b["wait_s_p50_by_class"])):
        for q in ("p50", "p99"):
            key = f"wait_s_{q}_by_class"
            dur(f"wait {q} {c}", a[key].get(c), b[key].get(c), d[key].get(c))
        na, nb = a["never_placed_by_class"].get(c, 0), b["never_placed_by_class"].get(c, 0)
        num(f"never placed {c}", na, nb, nb - na, "d")
    num("preemptions", a["preemptions"], b["preemptions"], d["preemptions"], "d")
    num("GPU-hours", a.get("gpu_hours"), b.get("gpu_hours"), d.get("gpu_hours"), ".2f")
    num("lost GPU-hours", a["lost_gpu_hours"], b["lost_gpu_hours"], d["lost_gpu_hours"], ".3f")
    num(
        "fairness (Jain, share attainment)",
        a["fairness_jain"],
        b["fairness_jain"],
        d["fairness_jain"],
        ".3f",
    )
    dur("completion time mean", a["jct_s_mean"], b["jct_s_mean"], d["jct_s_mean"])
    dur("completion time p50", a["jct_s_p50"], b["jct_s_p50"], d["jct_s_p50"])
    dur("completion time p99", a["jct_s_p99"], b["jct_s_p99"], d["jct_s_p99"])
    return out
