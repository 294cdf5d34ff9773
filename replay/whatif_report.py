"""The what-if report: one recorded log replayed under several policies, as a single offline
HTML file (inline SVG charts, no scripts, no external resources).

Sections: what was replayed and what each variant changed; the comparison table (the rows
of `gpuledger compare`, one column per variant, each with its delta to the first); queue
wait by SLO class (CDF per class); GPU allocation over time; preemptions and lost GPU-hours;
per-tenant fairness (share attainment, Jain's index). Metric definitions are those of
`replay.metrics`, shared with `compare` and `simulate --json`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuledger.replay.compare import Summary, compare, rows


@dataclass
class Variant:
    label: str
    changes: list[str]
    summary: Summary
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


TEMPLATES = Path(__file__).with_name("templates")

DISPLAY = {"recorded": "gpuledger (recorded config)"}
"""Column titles of variants whose label (the `--json` key) is terse."""


def table(variants: list[Variant]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: METRIC, the first variant's value, then value (delta) of each other."""
    base = variants[0].summary
    order: list[str] = []
    cells: dict[str, list[str]] = {}
    for i, v in enumerate(variants):
        pair = rows(compare(base, v.summary))
        for label, a, b, d in pair:
            if label not in cells:
                order.append(label)
                cells[label] = [""] * len(variants)
                cells[label][0] = a
            if i:
                cells[label][i] = (
                    b
                    if d in ("n/a", "+0", "+0.0", "+0.00", "+0.000", "+0.0s") or b == "n/a"
                    else f"{b} ({d})"
                )
    header = ["metric", *(DISPLAY.get(v.label, v.label) for v in variants)]
    return header, [[label, *cells[label]] for label in order]


def _count(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,}"


def _svg(chart, runs, labels, **kw) -> str:
    buf = io.BytesIO()
    chart(runs, labels, buf, **kw)
    text = buf.getvalue().decode()
    text = text[text.index("<svg") :]  # drop the XML prolog and doctype: inline in HTML
    start, end = text.find("<metadata>"), text.find("</metadata>")
    if (
        start >= 0 and end > start
    ):  # creator and date: not needed, and the date would differ per run
        text = text[:start] + text[end + len("</metadata>") :]
    return text


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1d1d1f;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
.sub{color:#555;margin-top:0}table{border-collapse:collapse;font-size:.9rem;margin:.6rem 0}
th,td{padding:.25rem .7rem;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}thead th{background:#f4f4f6;position:sticky;top:0}
tr.group td{background:#fafafa;font-weight:600;text-align:left}
.chart svg{width:100%;height:auto}code{background:#f4f4f6;padding:0 .25rem;border-radius:3px}
.note{color:#555;font-size:.88rem}.sw{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.4rem;vertical-align:-1px}
"""


def render(
    log_name: str,
    variants: list[Variant],
    recorded_events: int,
    title: str | None = None,
    checkpoint: str | None = None,
) -> str:
    """The report as one HTML document."""
    from gpuledger.replay.plots import (
        COLORS,
        allocation_chart,
        fairness_chart,
        preemption_chart,
        wait_cdf_chart,
    )

    runs = [v.summary for v in variants]
    labels = [DISPLAY.get(v.label, v.label) for v in variants]
    base = runs[0].metrics
    header, body = table(variants)
    sections = [
        (
            "Queue wait by SLO class",
            "Fraction of placed jobs that waited at most x seconds from submission to first placement, "
            "per SLO class (symmetric-log axis above 1 s). A curve further left is better. The observed "
            "curve, when there is one, is submission to the first recorded start.",
            _svg(wait_cdf_chart, runs, labels, max_cols=2),
        ),
        (
            "GPU allocation over time",
            "Allocated share of registered GPU capacity (time-weighted bin means on long runs).",
            _svg(allocation_chart, runs, labels),
        ),
        (
            "Preemptions and lost work",
            "Gangs evicted for a higher-priority job or a quota reclaim, and the GPU-hours of work since "
            "their last checkpoint that were lost.",
            _svg(preemption_chart, runs, labels),
        ),
        (
            "Per-tenant fairness",
            "Share attainment: GPU time a tenant received divided by its fair share while it had demand "
            "(1.0 = all it was entitled to). Jain's index over tenants: 1.0 = equal attainment.",
            _svg(fairness_chart, runs, labels),
        ),
    ]
    rows_ = [
        {
            "label": labels[i],
            "color": COLORS[i % len(COLORS)],
            "changes": "; ".join(v.changes) or "none (the recorded configuration)",
            "events": v.summary.metrics["events"],
            "log_path": v.log_path or "",
        }
        for i, v in enumerate(variants)
    ]
    return (
        _environment()
        .get_template("whatif_report.html")
        .render(
            title=title,
            log_name=log_name,
            css=CSS,
            count=_count,
            recorded_events=recorded_events,
            jobs=base["jobs"]["submitted"],
            span_days=(base["end_s"] - base["start_s"]) / 86400,
            observed=any(v.label == "observed" for v in variants),
            checkpoint=checkpoint,
            variants=rows_,
            header=header,
            body=body,
            sections=sections,
        )
    )


@cache
def _environment():
    """The report's Jinja2 environment: autoescape on for every template, undefined names an
    error."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
