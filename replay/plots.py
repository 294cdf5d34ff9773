"""PNG charts of a what-if comparison (matplotlib, Agg backend: no display needed).

- `allocation.png`: GPU allocation % over time for A and B on one chart (time-weighted means
  per bin when a series is long), with SM activity % dashed where the logs report it.
- `wait_cdf.png`: one panel per SLO class, the empirical CDF of job wait times, A vs B
  (symmetric-log time axis, linear below 1 s, when waits exceed 10 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from gpuledger.replay.compare import Summary, human_duration  # noqa: E402

MAX_POINTS = 2000
COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


STYLES = ("-", "--", ":", "-.")
"""Line style per run after the first two (which keep solid lines, as `compare` always drew
them): runs that coincide stay visible on top of each other."""


def _style(i: int) -> str:
    return "-" if i < 2 else STYLES[(i - 1) % len(STYLES)]


def _save(fig, out) -> Any:
    """Save to a path (format from its suffix) or to a binary file object (SVG)."""
    if hasattr(out, "write"):
        fig.savefig(out, format="svg")
        plt.close(fig)
        return out
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out


def _time_unit(span_s: float) -> tuple[float, str]:
    if span_s >= 3 * 86400:
        return 86400.0, "days"
    if span_s >= 3 * 3600:
        return 3600.0, "hours"
    if span_s >= 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def step_series(
    points: list[tuple[float, float]], end_s: float, bins: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(x, y, binned): the step function itself when short, else its time-weighted mean per
    bin over [first point, end_s]."""
    if not points:
        return np.array([]), np.array([]), False
    xs = np.array([p[0] for p in points] + [max(end_s, points[-1][0])], dtype=float)
    ys = np.array([p[1] for p in points] + [points[-1][1]], dtype=float)
    if len(points) <= bins or xs[-1] <= xs[0]:
        return xs, ys, False
    edges = np.linspace(xs[0], xs[-1], bins + 1)
    # integral of the step function at each edge: cumulative area up to every change point
    seg = np.diff(xs) * ys[:-1]
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    idx = np.clip(np.searchsorted(xs, edges, side="right") - 1, 0, len(xs) - 1)
    area_at = cum[idx] + (edges - xs[idx]) * ys[idx]
    means = np.diff(area_at) / np.diff(edges)
    centres = (edges[:-1] + edges[1:]) / 2
    return centres, means, True


def allocation_plot(
    a: Summary, b: Summary, path: str | Path, labels: tuple[str, str] = ("A", "B")
) -> Path:
    return allocation_chart((a, b), labels, path)


def allocation_chart(runs: Sequence[Summary], labels: Sequence[str], path) -> Any:
    """GPU allocation % over time, one line per run (SM activity dashed where reported)."""
    starts = [s.metrics["start_s"] for s in runs]
    ends = [s.metrics["end_s"] for s in runs]
    origin = min(starts)
    unit, unit_name = _time_unit(max(ends) - origin)
    fig, ax = plt.subplots(figsize=(11, 4.8), dpi=110)
    for i, (s, label, color) in enumerate(zip(runs, labels, COLORS, strict=False)):
        x, y, binned = step_series(s.allocation, s.metrics["end_s"])
        if len(x):
            mean = s.metrics["gpu_allocation_pct"]
            text = (
                f"{label} allocation (mean {mean:.1f}%)"
                if mean is not None
                else f"{label} allocation"
            )
            lw = 2.2 if i == 0 and len(runs) > 2 else 1.4
            if binned:
                ax.plot((x - origin) / unit, y, color=color, lw=lw - 0.2, ls=_style(i), label=text)
            else:
                ax.step(
                    (x - origin) / unit,
                    y,
                    where="post",
                    color=color,
                    lw=lw,
                    ls=_style(i),
                    label=text,
                )
        if s.utilisation:
            ux, uy, binned = step_series(s.utilisation, s.metrics["end_s"])
            mean = s.metrics["sm_activity_pct"]
            style = dict(
                color=color,
                lw=1.0,
                ls="--",
                alpha=0.85,
                label=f"{label} SM activity (mean {mean:.1f}%)",
            )
            if binned:
                ax.plot((ux - origin) / unit, uy, **style)
            else:
                ax.step((ux - origin) / unit, uy, where="post", **style)
    peak = max([v for s in runs for _, v in s.allocation + s.utilisation] or [100.0])
    ax.set_ylim(0, min(105.0, max(10.0, 1.15 * peak)))
    ax.set_xlabel(f"time since start ({unit_name})")
    ax.set_ylabel("% of registered GPU capacity")
    ax.set_title(
        "GPU allocation over time"
        + (" and SM activity" if any(s.utilisation for s in runs) else "")
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def wait_cdf_plot(
    a: Summary, b: Summary, path: str | Path, labels: tuple[str, str] = ("A", "B")
) -> Path:
    return wait_cdf_chart((a, b), labels, path)


def wait_cdf_chart(runs: Sequence[Summary], labels: Sequence[str], path, max_cols: int = 3) -> Any:
    """One panel per SLO class: the wait-time CDF of every run."""
    classes = sorted(set().union(*(s.waits for s in runs))) or ["(no placed jobs)"]
    n = len(classes)
    cols = min(n, max_cols)
    rows_ = -(-n // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(5.2 * cols, 4.0 * rows_), dpi=110, squeeze=False)
    for i, cls in enumerate(classes):
        ax = axes[i // cols][i % cols]
        top = max([w for s in runs for w in s.waits.get(cls, [])] or [0.0])
        for i, (s, label, color) in enumerate(zip(runs, labels, COLORS, strict=False)):
            w = np.array(s.waits.get(cls, []), dtype=float)
            if not len(w):
                continue
            n_jobs = len(w)
            y = np.concatenate([[0.0], np.arange(1, n_jobs + 1) / n_jobs])
            x = np.concatenate([[w[0]], w])
            p50 = human_duration(s.metrics["wait_s_p50_by_class"].get(cls))
            p99 = human_duration(s.metrics["wait_s_p99_by_class"].get(cls))
            ax.step(
                x,
                y,
                where="post",
                color=color,
                lw=2.4 if i == 0 and len(runs) > 2 else 1.5,
                ls=_style(i),
                label=f"{label}: n={n_jobs}, p50 {p50}, p99 {p99}",
            )
        if top > 10:
            ax.set_xscale("symlog", linthresh=1.0)  # linear below 1 s (many zero waits), log above
            ax.set_xlim(0, top * 2)  # room right of the longest wait, so its step shows
        elif top == 0:
            ax.set_xlim(-0.05, 1.0)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"wait-time CDF: {cls}")
        ax.set_xlabel("wait (seconds, submit to first placement)")
        ax.set_ylabel("fraction of placed jobs")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=8)
    for j in range(n, rows_ * cols):
        axes[j // cols][j % cols].axis("off")
    fig.tight_layout()
    return _save(fig, path)


def preemption_chart(runs: Sequence[Summary], labels: Sequence[str], path) -> Any:
    """Preemptions and lost GPU-hours per run (bars)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), dpi=110)
    colors = [COLORS[i % len(COLORS)] for i in range(len(runs))]
    pre = [s.metrics["preemptions"] for s in runs]
    lost = [s.metrics["lost_gpu_hours"] for s in runs]
    for ax, values, title, fmt in (
        (left, pre, "preemptions (Priority, Reclaim)", "{:d}"),
        (right, lost, "GPU-hours of work lost to preemption", "{:.2f}"),
    ):
        bars = ax.barh(range(len(runs)), values, color=colors)
        ax.set_yticks(range(len(runs)), labels, fontsize=9)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        top = max(values or [0]) or 1
        ax.set_xlim(0, top * 1.25)
        for b, v in zip(bars, values, strict=True):
            ax.text(
                b.get_width() + top * 0.02,
                b.get_y() + b.get_height() / 2,
                fmt.format(v),
                va="center",
                fontsize=9,
            )
    fig.tight_layout()
    return _save(fig, path)


def fairness_chart(
    runs: Sequence[Summary], labels: Sequence[str], path, max_tenants: int = 24
) -> Any:
    """Share attainment per tenant (received / entitled GPU time; 1.0 = all it was entitled
    to), grouped bars per run; Jain's index in the legend. The `max_tenants` tenants with the
    lowest attainment in the first run are shown."""
    tenants = sorted(
        set().union(*(s.metrics.get("share_attainment_by_tenant") or {} for s in runs))
    )
    base = runs[0].metrics.get("share_attainment_by_tenant") or {}
    tenants = sorted(tenants, key=lambda t: (base.get(t) if base.get(t) is not None else 9e9, t))[
        :max_tenants
    ]
    fig, ax = plt.subplots(figsize=(11, 3.8), dpi=110)
    if not tenants:
        ax.text(0.5, 0.5, "no tenant had a positive entitlement", ha="center", va="center")
        ax.axis("off")
        return _save(fig, path)
    width = 0.8 / len(runs)
    x = np.arange(len(tenants))
    for i, (s, label) in enumerate(zip(runs, labels, strict=True)):
        att = s.metrics.get("share_attainment_by_tenant") or {}
        ys = [att.get(t) if att.get(t) is not None else 0.0 for t in tenants]
        jain_v = s.metrics.get("fairness_jain")
        jt = "n/a" if jain_v is None else f"{jain_v:.3f}"
        ax.bar(
            x + (i - (len(runs) - 1) / 2) * width,
            ys,
            width,
            color=COLORS[i % len(COLORS)],
            label=f"{label} (Jain {jt})",
        )
    ax.axhline(1.0, color="#444", lw=0.8, ls=":")
    top = max(
        [
            v
            for s in runs
            for v in (s.metrics.get("share_attainment_by_tenant") or {}).values()
            if v is not None
        ]
        or [1.0]
    )
    ax.set_ylim(0, max(1.0, top) * 1.35)
    ax.set_xticks(
        x,
        tenants,
        rotation=30 if len(tenants) > 6 else 0,
        ha="right" if len(tenants) > 6 else "center",
        fontsize=9,
    )
    ax.set_ylabel("share attainment")
    ax.set_title("per-tenant fairness: GPU time received / fair share while it had demand")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, loc="upper center", ncol=min(len(runs), 4))
    fig.tight_layout()
    return _save(fig, path)


def write_plots(
    a: Summary, b: Summary, directory: str | Path, labels: tuple[str, str] = ("A", "B")
) -> list[Path]:
    """Write every chart into `directory` (created if needed); returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    return [
        allocation_plot(a, b, d / "allocation.png", labels),
        wait_cdf_plot(a, b, d / "wait_cdf.png", labels),
    ]
