"""PNG charts of a what-if comparison (matplotlib, Agg backend: no display needed).

- `allocation.png`: GPU allocation % over time for A and B on one chart (time-weighted means
  per bin when a series is long), with SM activity % dashed where the logs report it.
- `wait_cdf.png`: one panel per SLO class, the empirical CDF of job wait times, A vs B
  (symmetric-log time axis, linear below 1 s, when waits exceed 10 s).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from gpuledger.replay.compare import Summary, human_duration  # noqa: E402

MAX_POINTS = 2000
COLORS = ("#1f77b4", "#d62728")


def _time_unit(span_s: float) -> tuple[float, str]:
    if span_s >= 3 * 86400:
        return 86400.0, "days"
    if span_s >= 3 * 3600:
        return 3600.0, "hours"
    if span_s >= 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def step_series(points: list[tuple[float, float]], end_s: float, bins: int = MAX_POINTS
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


def allocation_plot(a: Summary, b: Summary, path: str | Path, labels: tuple[str, str] = ("A", "B")) -> Path:
    starts = [s.metrics["start_s"] for s in (a, b)]
    ends = [s.metrics["end_s"] for s in (a, b)]
    origin = min(starts)
    unit, unit_name = _time_unit(max(ends) - origin)
    fig, ax = plt.subplots(figsize=(11, 4.8), dpi=110)
    for s, label, color in zip((a, b), labels, COLORS, strict=True):
        x, y, binned = step_series(s.allocation, s.metrics["end_s"])
        if len(x):
            mean = s.metrics["gpu_allocation_pct"]
            text = f"{label} allocation (mean {mean:.1f}%)" if mean is not None else f"{label} allocation"
            if binned:
                ax.plot((x - origin) / unit, y, color=color, lw=1.2, label=text)
            else:
                ax.step((x - origin) / unit, y, where="post", color=color, lw=1.4, label=text)
        if s.utilisation:
            ux, uy, binned = step_series(s.utilisation, s.metrics["end_s"])
            mean = s.metrics["sm_activity_pct"]
            style = dict(color=color, lw=1.0, ls="--", alpha=0.85,
                         label=f"{label} SM activity (mean {mean:.1f}%)")
            if binned:
                ax.plot((ux - origin) / unit, uy, **style)
            else:
                ax.step((ux - origin) / unit, uy, where="post", **style)
    peak = max([v for s in (a, b) for _, v in s.allocation + s.utilisation] or [100.0])
    ax.set_ylim(0, min(105.0, max(10.0, 1.15 * peak)))
    ax.set_xlabel(f"time since start ({unit_name})")
    ax.set_ylabel("% of registered GPU capacity")
    ax.set_title("GPU allocation over time" + (" and SM activity" if a.utilisation or b.utilisation else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def wait_cdf_plot(a: Summary, b: Summary, path: str | Path, labels: tuple[str, str] = ("A", "B")) -> Path:
    classes = sorted(set(a.waits) | set(b.waits)) or ["(no placed jobs)"]
    n = len(classes)
    cols = min(n, 3)
    rows_ = -(-n // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(5.2 * cols, 4.0 * rows_), dpi=110, squeeze=False)
    for i, cls in enumerate(classes):
        ax = axes[i // cols][i % cols]
        top = max([w for s in (a, b) for w in s.waits.get(cls, [])] or [0.0])
        for s, label, color in zip((a, b), labels, COLORS, strict=True):
            w = np.array(s.waits.get(cls, []), dtype=float)
            if not len(w):
                continue
            n_jobs = len(w)
            y = np.concatenate([[0.0], np.arange(1, n_jobs + 1) / n_jobs])
            x = np.concatenate([[w[0]], w])
            p50 = human_duration(s.metrics["wait_s_p50_by_class"].get(cls))
            p99 = human_duration(s.metrics["wait_s_p99_by_class"].get(cls))
            ax.step(x, y, where="post", color=color, lw=1.5,
                    label=f"{label}: n={n_jobs}, p50 {p50}, p99 {p99}")
        if top > 10:
            ax.set_xscale("symlog", linthresh=1.0)  # linear below 1 s (many zero waits), log above
            ax.set_xlim(left=0)
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
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def write_plots(a: Summary, b: Summary, directory: str | Path, labels: tuple[str, str] = ("A", "B")) -> list[Path]:
    """Write every chart into `directory` (created if needed); returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    return [allocation_plot(a, b, d / "allocation.png", labels),
            wait_cdf_plot(a, b, d / "wait_cdf.png", labels)]
