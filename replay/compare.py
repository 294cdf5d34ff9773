"""What-if comparison: the metrics of two event logs, side by side.

Each log is folded with the `Ledger` in one pass while the time-weighted quantities are
integrated between consecutive event times. The window of a log is [time of its first event,
time of its last event]. Definitions (the JSON keys are a contract: add, never rename):

- `gpu_allocation_pct`: time-weighted allocated GPU capacity / registered GPU capacity,
  100 x integral(allocated milli-GPU dt) / integral(capacity milli-GPU dt). Allocated = sum
  of active allocations (a share counts its milli, a whole GPU 1000); capacity = GPUs of
  registered nodes that are not lost (a re-registration replaces a node, it does not add).
- `sm_activity_pct`: 100 x the mean of `sm_active` over every `GpuMetricsReported` sample
  that has one; None ("n/a") when the log holds no such sample (simulated logs).
- `wait_s_p50_by_class` / `wait_s_p99_by_class`: wait = first placement - submission, per SLO
  class (the admitted class's `slo_class`), over jobs that were placed at least once;
  percentile q = the sorted values' element at index round(q x (n - 1)) (as `simulate`'s
  report). `never_placed_by_class` counts admitted jobs never placed.
- `preemptions`: `GangEvicted` with reason `Priority` or `Reclaim`; `lost_gpu_hours`: the sum
  of their `lost_gpu_ms` / 3.6e6.
- `fairness_jain`: Jain's index (sum x)^2 / (n sum x^2) over the share attainment x of every
  leaf tenant (a tenant with no sub-tenant in the fair-share updates) whose entitlement is
  positive. Share attainment of a tenant = integral(its allocated milli-GPU dt) /
  integral(its fair share dt), the fair share being the quota service's latest
  `FairShareUpdated` value (guarantee plus weighted part of the idle surplus, capped by its
  limit and its demand, so it is zero while the tenant wants nothing). 1.0 = every tenant got
  the same fraction of what it was entitled to; 1/n = one tenant got everything. None when the
  log has no fair-share update with a positive share.
- `jct_s_mean` / `jct_s_p50` / `jct_s_p99`: job completion time = completion - submission
  over jobs that completed; `jobs_completed` their number.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import events as ev
from events import Event
from services.domain.acceptance import admit
from services.domain.ledger import Ledger

_ALLOC_EVENTS = (ev.GangPlaced, ev.GangCompleted, ev.GangFailed, ev.GangEvicted)
_NODE_EVENTS = (ev.NodeRegistered, ev.NodeLost, ev.NodeHeartbeat)


class CompareError(ValueError):
    """A log that cannot be compared (missing, unreadable, unsupported format)."""


def percentile(values: list[float], q: float) -> float | None:
    """The sorted values' element at index round(q x (n - 1)); None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def jain(values: Iterable[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2); None for no values, 1.0 for all zeros."""
    xs = list(values)
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    return 1.0 if sq == 0 else sum(xs) ** 2 / (len(xs) * sq)


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
    """Fold a log and compute its metrics (definitions in the module docstring)."""
    ledger = Ledger()
    node_cap: dict[str, int] = {}
    capacity = allocated = 0
    tenant_alloc: dict[str, int] = {}
    fair: dict[str, int] = {}
    received: dict[str, float] = defaultdict(float)
    entitled: dict[str, float] = defaultdict(float)
    area = cap_area = 0.0
    start_ms: int | None = None
    last_t = 0
    n_events = 0
    preemptions = 0
    lost_ms = 0
    sm_sum = 0.0
    sm_n = 0
    latest_sm: dict[str, float] = {}
    latest_sum = 0.0
    alloc_series: list[tuple[float, float]] = []
    util_series: list[tuple[float, float]] = []
    leaf_tenants: set[str] = set()
    alloc_since: dict[str, int] = {}
    fair_since = 0

    for seq, subject, e in entries:
        n_events += 1
        t = e.occurred_at_ms
        if start_ms is None:
            start_ms = last_t = t
        if t > last_t:
            dt = t - last_t
            area += allocated * dt
            cap_area += capacity * dt
            last_t = t
        admit(ledger, seq, e, subject)  # the acceptance rules the live services apply
        if isinstance(e, _ALLOC_EVENTS):
            if isinstance(e, ev.GangEvicted) and e.reason in ("Priority", "Reclaim", "Backfill", "Defragment"):
                preemptions += 1
                lost_ms += e.lost_gpu_ms
            rec = ledger.allocations.get(e.allocation_id)
            if rec is not None:
                tenant = rec.tenant
                now_milli = ledger.tenant_gpu_milli.get(tenant, 0)
                old_milli = tenant_alloc.get(tenant, 0)
                if now_milli != old_milli:
                    received[tenant] += old_milli * (last_t - alloc_since.get(tenant, last_t))
                    alloc_since[tenant] = last_t
                    tenant_alloc[tenant] = now_milli
                    allocated += now_milli - old_milli
                    alloc_series.append((last_t / 1000, 100 * allocated / capacity if capacity else 0.0))
        elif isinstance(e, _NODE_EVENTS):
            name_ = e.node.name if isinstance(e, ev.NodeRegistered) else e.node
            rec = ledger.nodes.get(name_)
            cap = 0 if rec is None or rec.lost else 1000 * len(rec.info.gpus)
            if cap != node_cap.get(name_, 0):
                capacity += cap - node_cap.get(name_, 0)
                node_cap[name_] = cap
                alloc_series.append((last_t / 1000, 100 * allocated / capacity if capacity else 0.0))
        elif isinstance(e, ev.FairShareUpdated):
            tenants = {s.tenant for s in e.shares}
            parents: set[str] = set()
            for path in tenants:
                while "/" in path:
                    path = path.rsplit("/", 1)[0]
                    parents.add(path)
            leaves = tenants - parents
            leaf_tenants |= leaves
            for tenant, share in fair.items():
                entitled[tenant] += share * (last_t - fair_since)
            fair_since = last_t
            fair = {s.tenant: s.fair_share_gpu_milli for s in e.shares if s.tenant in leaves}
        elif isinstance(e, ev.GpuMetricsReported):
            for s in e.samples:
                if s.sm_active is None:
                    continue
                sm_sum += s.sm_active
                sm_n += 1
                key = s.mig_uuid or s.uuid
                latest_sum += s.sm_active - latest_sm.get(key, 0.0)
                latest_sm[key] = s.sm_active
            if latest_sm:
                util_series.append((last_t / 1000, 100 * latest_sum / len(latest_sm)))

    for tenant, share in fair.items():
        entitled[tenant] += share * (last_t - fair_since)
    for tenant, milli in tenant_alloc.items():
        received[tenant] += milli * (last_t - alloc_since.get(tenant, last_t))
    waits: dict[str, list[float]] = defaultdict(list)
    never: dict[str, int] = defaultdict(int)
    jct: list[float] = []
    states: dict[str, int] = defaultdict(int)
    for job in ledger.jobs.values():
        states[job.state] += 1
        cls = job.slo_class or job.spec.priority_class
        if job.admitted_ms is not None:
            if job.placements:
                waits[cls].append((job.placements[0][0] - job.submitted_ms) / 1000)
            else:
                never[cls] += 1
        if job.state == "completed" and job.finished_ms is not None:
            jct.append((job.finished_ms - job.submitted_ms) / 1000)
    for v in waits.values():
        v.sort()
    classes = sorted(set(waits) | set(never))
    attainment = {t: received.get(t, 0.0) / entitled[t]
                  for t in sorted(entitled) if t in leaf_tenants and entitled[t] > 0}
    end_ms = last_t if start_ms is not None else 0
    unfinished = sum(v for k, v in states.items()
                     if k not in ("completed", "failed", "rejected", "cancelled"))
    metrics: dict[str, Any] = {
        "events": n_events,
        "start_s": (start_ms or 0) / 1000,
        "end_s": end_ms / 1000,
        "jobs": {
            "submitted": len(ledger.jobs),
            "completed": states.get("completed", 0),
            "failed": states.get("failed", 0),
            "rejected": states.get("rejected", 0),
            "cancelled": states.get("cancelled", 0),
            "unfinished": unfinished,
        },
        "gpu_allocation_pct": 100 * area / cap_area if cap_area else None,
        "sm_activity_pct": 100 * sm_sum / sm_n if sm_n else None,
        "wait_s_p50_by_class": {c: percentile(waits.get(c, []), 0.5) for c in classes},
        "wait_s_p99_by_class": {c: percentile(waits.get(c, []), 0.99) for c in classes},
        "never_placed_by_class": {c: never.get(c, 0) for c in classes},
        "preemptions": preemptions,
        "lost_gpu_hours": lost_ms / 3_600_000,
        "fairness_jain": jain(attainment.values()),
        "share_attainment_by_tenant": attainment,
        "jobs_completed": len(jct),
        "jct_s_mean": sum(jct) / len(jct) if jct else None,
        "jct_s_p50": percentile(jct, 0.5),
        "jct_s_p99": percentile(jct, 0.99),
    }
    return Summary(name=name, metrics=metrics, allocation=alloc_series, utilisation=util_series,
                   waits=dict(waits))


def load(path: str | Path) -> Summary:
    """Summarize a log: JSONL, Parquet, or the log a DuckDB projection recorded."""
    import duckdb

    from replay.export import read_any
    from replay.logio import LogFormatError

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
    return {"a": {"log": a.name, "metrics": ma}, "b": {"log": b.name, "metrics": mb},
            "delta": _delta(ma, mb)}


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
    dur("span", a["end_s"] - a["start_s"], b["end_s"] - b["start_s"],
        (b["end_s"] - b["start_s"]) - (a["end_s"] - a["start_s"]))
    for k in ("submitted", "completed", "failed", "rejected", "cancelled", "unfinished"):
        num(f"jobs {k}", a["jobs"][k], b["jobs"][k], d["jobs"][k], "d")
    num("GPU allocation % (time-weighted)", a["gpu_allocation_pct"], b["gpu_allocation_pct"],
        d["gpu_allocation_pct"], ".1f")
    num("SM activity % (mean)", a["sm_activity_pct"], b["sm_activity_pct"],
        d["sm_activity_pct"], ".1f")
    for c in sorted(set(a["wait_s_p50_by_class"]) | set(b["wait_s_p50_by_class"])):
        for q in ("p50", "p99"):
            key = f"wait_s_{q}_by_class"
            dur(f"wait {q} {c}", a[key].get(c), b[key].get(c), d[key].get(c))
        na, nb = a["never_placed_by_class"].get(c, 0), b["never_placed_by_class"].get(c, 0)
        num(f"never placed {c}", na, nb, nb - na, "d")
    num("preemptions", a["preemptions"], b["preemptions"], d["preemptions"], "d")
    num("lost GPU-hours", a["lost_gpu_hours"], b["lost_gpu_hours"], d["lost_gpu_hours"], ".3f")
    num("fairness (Jain, share attainment)", a["fairness_jain"], b["fairness_jain"],
        d["fairness_jain"], ".3f")
    dur("completion time mean", a["jct_s_mean"], b["jct_s_mean"], d["jct_s_mean"])
    dur("completion time p50", a["jct_s_p50"], b["jct_s_p50"], d["jct_s_p50"])
    dur("completion time p99", a["jct_s_p99"], b["jct_s_p99"], d["jct_s_p99"])
    return out
