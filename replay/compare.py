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
from gpuledger.replay.metrics import DIMENSIONS, JobFacts, Measured, jain, measure, percentile

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
    "summary_of",
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
    jobs: JobFacts = field(default_factory=JobFacts)
    """Per job: wait, completion time, groups (what the fidelity report joins on)."""


Groups = dict[str, dict[str, str]]


def summarize(
    entries: Iterable[tuple[int, str, Event]], name: str = "", groups: Groups | None = None
) -> Summary:
    """Fold a log and compute its metrics (definitions in `replay.metrics`); `groups`: each
    job's groups as the source recorded them (`observed_groups`), else its spec's."""
    return summary_of(measure(entries, groups=groups), name)


def summary_of(m: Measured, name: str = "") -> Summary:
    """The summary of a measured log (`measure`, or a replay measured as it ran)."""
    return Summary(
        name=name,
        metrics=m.metrics,
        allocation=m.allocation,
        utilisation=m.utilisation,
        waits=m.waits,
        jobs=m.jobs or JobFacts(),
    )


def observed(log: str | Path, specs: Iterable | None = None) -> Summary | None:
    """The observed column of `log`: its observation sidecar (`replay.observed`) measured by
    `replay.metrics.measure_observed`; None when the log has no sidecar. `specs`: the
    submitted jobs of the log, whose partition selectors complete what the sidecar records
    (`observed_groups`)."""
    from gpuledger.replay import observed as obs
    from gpuledger.replay.metrics import measure_observed

    path = obs.find(log)
    if path is None:
        return None
    try:
        header, items = obs.read(path)
        seen = list(items)
        m = measure_observed(header, seen, groups=source_groups(seen, specs or ()))
    except obs.ObservedError as exc:
        raise CompareError(str(exc)) from None
    return Summary(
        name="observed",
        metrics=m.metrics,
        allocation=m.allocation,
        waits=m.waits,
        jobs=m.jobs or JobFacts(),
    )


def source_groups(observations: Iterable, specs: Iterable) -> Groups:
    """Job -> its groups: what the source recorded (`observed_groups`), the partition from the
    job's spec (`spec_groups`; an array task's from its array) where the source has none. One
    mapping for the observed column and every replay of the same history."""
    from gpuledger.replay.metrics import observed_groups, spec_groups

    by_id = {s.job_id: s for s in specs}
    out: Groups = {}
    for o in observations:
        spec = by_id.get(o.job) or by_id.get(o.job.split("@", 1)[0])
        groups = spec_groups(spec) if spec is not None else {}
        groups.update(observed_groups(o))
        out[o.job] = groups
    return out


def regroup(summary: Summary, groups: Groups) -> None:
    """Report `summary`'s waits under `groups` (job -> groups; jobs not named keep theirs):
    its `JobFacts.groups` and the `wait_s_*_by_<dimension>` metrics are recomputed."""
    from gpuledger.replay.metrics import wait_metrics

    for job, g in groups.items():
        if job in summary.jobs.groups or job in summary.jobs.wait_s:
            summary.jobs.groups[job] = {**summary.jobs.groups.get(job, {}), **g}
    summary.metrics.update(wait_metrics(summary.jobs))


def load(path: str | Path, groups: Groups | None = None) -> Summary:
    """Summarize a log: JSONL, Parquet, or the log a DuckDB projection recorded."""
    import duckdb

    from gpuledger.replay.export import read_any
    from gpuledger.replay.logio import LogFormatError

    p = Path(path)
    if not p.is_file():
        raise CompareError(f"{p}: no such log file")
    try:
        return summarize(read_any(p), name=str(p), groups=groups)
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


def common_completion(summaries: list[Summary]) -> tuple[int, list[dict[str, float | None]]]:
    """Completion times over the same jobs: those completed in every one of `summaries`.
    Returns their number and, per summary, `jct_s_mean` / `jct_s_p50` / `jct_s_p99` over them."""
    common = (
        set.intersection(*(set(s.jobs.completion_s) for s in summaries)) if summaries else set()
    )
    out = []
    for s in summaries:
        vals = sorted(s.jobs.completion_s[j] for j in common)
        out.append(
            {
                "jct_s_mean": sum(vals) / len(vals) if vals else None,
                "jct_s_p50": percentile(vals, 0.5),
                "jct_s_p99": percentile(vals, 0.99),
            }
        )
    return len(common), out


def rows(
    result: dict[str, Any], common: tuple[int, dict, dict] | None = None
) -> list[tuple[str, str, str, str]]:
    """(METRIC, A, B, DELTA) rows as text, in reading order. `common`: (n, A's, B's completion
    times over the same n jobs, `common_completion`) for the completion rows; else each side's
    over its own completed jobs."""
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
        if k == "failed" and ("jobs_timeout" in a or "jobs_timeout" in b):
            ta, tb = a.get("jobs_timeout"), b.get("jobs_timeout")
            num("jobs timeout", ta, tb, _minus(ta, tb), "d")
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

    def waits() -> None:
        """Waits by class (and who was never placed), over all jobs, then by each group."""
        for c in sorted(set(a["wait_s_p50_by_class"]) | set(b["wait_s_p50_by_class"])):
            for q in ("p50", "p99"):
                key = f"wait_s_{q}_by_class"
                dur(f"wait {q} {c}", a[key].get(c), b[key].get(c), d[key].get(c))
            na, nb = a["never_placed_by_class"].get(c, 0), b["never_placed_by_class"].get(c, 0)
            num(f"never placed {c}", na, nb, nb - na, "d")
        for q in ("p50", "p99"):
            key = f"wait_s_{q}"
            if key in a or key in b:
                dur(f"wait {q} (all jobs)", a.get(key), b.get(key), d.get(key))
        for dim in DIMENSIONS:
            ka, kb = a.get(f"wait_s_p50_by_{dim}") or {}, b.get(f"wait_s_p50_by_{dim}") or {}
            for g in sorted(set(ka) | set(kb)):
                for q in ("p50", "p99"):
                    key = f"wait_s_{q}_by_{dim}"
                    va, vb = (a.get(key) or {}).get(g), (b.get(key) or {}).get(g)
                    dur(f"wait {q} {dim} {g}", va, vb, _minus(va, vb))

    waits()
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
    if common is None:
        for q in ("mean", "p50", "p99"):
            k = f"jct_s_{q}"
            dur(f"completion time {q}", a[k], b[k], d[k])
        return out
    n, ca, cb = common
    for q in ("mean", "p50", "p99"):
        k = f"jct_s_{q}"
        dur(f"completion time {q} ({n} jobs completed in all)", ca[k], cb[k], _minus(ca[k], cb[k]))
    return out


def _minus(a: Any, b: Any) -> Any:
    """b - a, None when either is unknown."""
    return None if a is None or b is None else b - a
