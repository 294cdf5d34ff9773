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

from gpuledger.replay.compare import Summary, common_completion, compare, rows
from gpuledger.replay.fidelity import (
    ERROR_MARK,
    Fidelity,
    below_error,
    fidelity,
    metric_values,
)


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


def roles(variants: list[Variant]) -> tuple[Variant | None, Variant | None]:
    """(observed, reference): the observed column when there is one; the baseline
    (`recorded`) that effects are measured from, else the first replayed variant."""
    seen = next((v for v in variants if v.label == "observed"), None)
    replays = [v for v in variants if v.label != "observed"]
    ref = next((v for v in replays if v.label == "recorded"), replays[0] if replays else None)
    return seen, ref


def fidelity_of(variants: list[Variant]) -> Fidelity | None:
    """The baseline's fidelity, when there are an observed column and a baseline."""
    seen, ref = roles(variants)
    if seen is None or ref is None or ref.label != "recorded":
        return None
    return fidelity(seen.summary, ref.summary)


def table(
    variants: list[Variant], fid: Fidelity | None = None
) -> tuple[list[str], list[list[str]]]:
    """Header and rows: METRIC, observed (if any), the reference (the baseline), then for
    every other variant its value, its effect (variant - reference) and its difference to
    observed. An effect smaller than the baseline's error on that metric (`fidelity`) is
    marked `(< error)`. Completion times are over the jobs completed in every column."""
    seen, ref = roles(variants)
    if ref is None:  # only the observed column
        ref = variants[0]
    n, jct = common_completion([v.summary for v in variants])
    jct_of = {id(v): c for v, c in zip(variants, jct, strict=True)}
    ref_vals = metric_values(ref.summary.metrics)

    def pair(a: Variant, b: Variant) -> list[tuple[str, str, str, str]]:
        return rows(compare(a.summary, b.summary), (n, jct_of[id(a)], jct_of[id(b)]))

    base_rows = pair(ref, ref)
    order = [r[0] for r in base_rows]
    cells: dict[str, list[str]] = {r[0]: [r[1]] for r in base_rows}
    header = ["metric"]
    if seen is not None:
        for label, value, _, _ in pair(seen, ref):
            cells.setdefault(label, [""]).insert(0, value)
            if label not in order:
                order.append(label)
        header.append(DISPLAY.get(seen.label, seen.label))
    header.append(DISPLAY.get(ref.label, ref.label))
    width = len(header) - 1
    _pad(cells, order, width)
    others = [v for v in variants if v is not ref and v is not seen]

    def add(v: Variant) -> None:
        """Variant `v`'s columns: its value, its effect, its difference to observed."""
        width = len(header) - 1
        vs = "vs baseline" if ref.label == "recorded" else f"vs {ref.label}"
        header.extend([DISPLAY.get(v.label, v.label), vs])
        vs_obs = {} if seen is None else {r[0]: r[3] for r in pair(seen, v)}
        if seen is not None:
            header.append("vs observed")
        var_vals = metric_values(v.summary.metrics)
        for label, _, value, d in pair(ref, v):
            if label not in cells:
                order.append(label)
                cells[label] = [""] * width
            effect = _effect(ref_vals, var_vals, label)
            mark = ERROR_MARK if below_error(fid, label, effect) else ""
            cells[label] += [value, d + mark]
            if seen is not None:
                cells[label].append(vs_obs.get(label, ""))
        _pad(cells, order, len(header) - 1)

    for v in others:
        add(v)
    return header, [[label, *cells[label]] for label in order]


def _pad(cells: dict[str, list[str]], order: list[str], width: int) -> None:
    """Fill every metric's row with empty cells up to `width` columns."""
    for label in order:
        cells[label] += [""] * (width - len(cells[label]))


def _effect(ref_vals: dict, var_vals: dict, label: str):
    """Variant minus reference on metric `label` (None: either has no value for it)."""
    if label not in var_vals or label not in ref_vals:
        return None
    a, b = ref_vals[label][1], var_vals[label][1]
    return None if a is None or b is None else b - a


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
tr.group td{background:#fafafa;font-weight:600;text-align:left}tr.outside td{background:#fdecea;color:#8a1c12}
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
    from gpuledger.replay.fidelity import FIDELITY_HEADER, summary_line, table_rows
    from gpuledger.replay.plots import (
        COLORS,
        allocation_chart,
        fairness_chart,
        preemption_chart,
        wait_cdf_chart,
    )

    runs = [v.summary for v in variants]
    labels = [DISPLAY.get(v.label, v.label) for v in variants]
    seen, ref = roles(variants)
    base = (ref or variants[0]).summary.metrics
    fid = fidelity_of(variants)
    header, body = table(variants, fid)
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
            observed_jobs=None if seen is None else seen.summary.metrics["jobs"]["submitted"],
            fidelity=None
            if fid is None
            else {
                "header": FIDELITY_HEADER,
                "rows": table_rows(fid),
                "summary": summary_line(fid),
                "outside": len(fid.outside),
            },
            reference=DISPLAY.get(ref.label, ref.label) if ref is not None else "",
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
