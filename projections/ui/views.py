"""The dashboard's pages: Jinja2 templates (`templates/`, autoescape on for every value) and
what they are given. Python here computes numbers, geometry and words; every tag is written
by a template, and every value a template writes is escaped by Jinja2, so no page builds HTML
by hand. `render_page` wraps a page's template in the shared layout (`base.html`)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuledger.events.sentences import JobRef
from gpuledger.projections.queries import gpus_text, preemption_outlook
from gpuledger.projections.ui.data import life_text
from gpuledger.services.domain.tooling.timefmt import duration

TEMPLATES = Path(__file__).with_name("templates")

STATE_COLORS = {
    "submitted": "#b0b7c3",
    "pending": "#f0a030",
    "running": "#2e9e5b",
    "preempting": "#d64541",
    "completed": "#4a6fa5",
    "failed": "#7a1f1f",
    "rejected": "#7a1f1f",
    "cancelled": "#8a8a8a",
    "timeout": "#9c5b1a",
}
KIND_COLORS = {
    "free": "#e9edf2",
    "active": "#2e7d32",
    "idle": "#f39c12",
    "unmeasured": "#5c7cfa",
    "unavailable": "#555",
}
MARK_COLORS = {
    "checkpoint": "#1565c0",
    "preempted": "#d64541",
    "evicted": "#d64541",
    "preemptor": "#6a1b9a",
    "requeued": "#f0a030",
}
PAGES = [
    ("cluster", "Cluster"),
    ("queue", "Queue"),
    ("jobs", "Jobs"),
    ("tenants", "Tenants"),
    ("whatif", "What-if"),
]


def dur(ms: float | None) -> str:
    """A duration as `gpuledger why` writes it (`45s`, `12m5s`, `2d4h`); `-` when unknown."""
    return "-" if ms is None else duration(max(0, ms))


def job_href(job_id: str) -> str:
    """The job page's path (the id percent-encoded: ids may hold any character but `.`)."""
    return "/jobs/" + quote(job_id, safe="")


@cache
def environment():
    """The Jinja2 environment of the dashboard's templates: autoescape on for every template
    (not only by file extension), undefined names an error, never a silent blank."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        dur=dur,
        job_href=job_href,
        state_colors=STATE_COLORS,
        kind_colors=KIND_COLORS,
        pages=PAGES,
        is_job_ref=lambda p: isinstance(p, JobRef),
    )
    return env


def render_page(
    template: str,
    *,
    title: str,
    active: str,
    seq: int | None,
    tenant: str | None,
    live: bool = True,
    retry_s: int | None = None,
    **context: Any,
) -> str:
    """A whole page: `template` (which extends `base.html`) with the layout's values."""
    return (
        environment()
        .get_template(template)
        .render(
            title=title,
            active=active,
            seq=seq,
            tenant=tenant,
            live=live,
            retry_s=retry_s,
            **context,
        )
    )


def error_page(
    heading: str,
    message: str,
    *,
    title: str | None = None,
    active: str = "",
    seq: int | None = None,
    tenant: str | None = None,
    retry_s: int | None = None,
    live: bool = False,
) -> str:
    """An error (or not-found) page in the layout (`live`: it follows the projector, as a job
    page that may yet appear does)."""
    return render_page(
        "error.html",
        title=title or heading,
        active=active,
        seq=seq,
        tenant=tenant,
        live=live,
        retry_s=retry_s,
        heading=heading,
        message=message,
    )


def number(v: Any, digits: int = 1) -> str:
    """A table number: floats to `digits` places without trailing zeros, `-` for none."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if v else "0"
    return str(v)


# ---------------------------------------------------------------- cluster

CELL, GAP = 24, 3


def _gpu_title(g: dict[str, Any]) -> str:
    tip = [f"{g['node']} GPU {g['gpu_index']} ({g['model']}, {g['sharing']}, clique {g['clique']})"]
    if g["sm_active"] is not None:
        tip.append(f"SM active {g['sm_active']:.0%}")
    for p in g["parts"]:
        what = p["mig_profile"] or (
            f"{gpus_text(p['gpu_milli'])} GPU" if p["gpu_milli"] < 1000 else "whole GPU"
        )
        tip.append(
            f"{p['job_id'] or 'another tenant'} ({p['tenant']}): {what}"
            + (", borrowing" if p["borrowing"] else "")
        )
    return "\n".join(tip)


def _gpu_cell(g: dict[str, Any], x: int) -> dict[str, Any]:
    """One GPU's square: its parts (allocations) as bars, MIG slice lines, marks."""
    kind = g["kind"]
    fill = KIND_COLORS.get(kind, "#999")
    # SM-active GPUs: the busier, the darker
    opacity = 0.45 + 0.55 * min(1.0, g["sm_active"]) if kind == "active" else 1.0
    slices = (
        [f"{x + i * CELL / 7:.1f}" for i in range(1, 7)] if g["sharing"] == "mig" else []
    )  # 7 compute slices: outline each, fill the ones held
    parts, off = [], 0.0
    for p in g["parts"]:
        w = CELL * min(1000, p["gpu_milli"] or 0) / 1000
        if g["sharing"] == "mig" and p["mig_start"] is not None:
            off = CELL * min(7, p["mig_start"]) / 8 if p["mig_start"] < 8 else off
        parts.append(
            {
                "x": f"{x + off:.1f}",
                "width": f"{max(w, 2):.1f}",
                "fill": fill,
                "opacity": f"{opacity:.2f}",
                "job_id": p["job_id"],  # a click on a part opens its job
            }
        )
        off += w
    return {
        "node": g["node"],
        "gpu_index": g["gpu_index"],
        "kind": kind,
        "title": _gpu_title(g),
        "x": x,
        "slices": slices,
        "parts": parts,
        "shared": g["sharing"] in ("mps", "timeslice"),  # a corner mark (tooltip says which)
        "crossed": kind == "unavailable",
    }


def _node_status(status: tuple[str, int | None, str | None, str | None], now_ms: int) -> str:
    """`drained for 5m: firmware update`, `reserved (ml) for 10m: launch` (the `node_status`
    view's); "" while ready."""
    state, since_ms, reason, tenant = status
    if state == "ready":
        return ""
    who = f" ({tenant})" if tenant else ""
    held = "" if since_ms is None else f" for {duration(max(0, now_ms - since_ms))}"
    return f"{state}{who}{held}" + (f": {reason}" if reason else "")


def _node_row(
    node: str, cliques: dict[str, list[dict[str, Any]]], status: str = ""
) -> dict[str, Any]:
    x, cells, labels = 0, [], []
    for clique, gpus in cliques.items():
        labels.append({"x": x, "text": clique})
        for g in gpus:
            cells.append(_gpu_cell(g, x))
            x += CELL + GAP
        x += 3 * GAP
    return {
        "name": node,
        "status": status,
        "width": max(x - 3 * GAP, 60),
        "cells": cells,
        "labels": labels,
    }


def _frag_row(f: dict[str, Any]) -> dict[str, Any]:
    """A fragmentation row's cells; stranded GPUs and share are defined against pending work,
    so with no pending job they read `no pending work` (the view counts every free GPU then)."""
    equiv = f["free_gpu_equiv"]
    return {
        **f,
        "free_equiv": "-" if equiv is None else f"{equiv:.2f}".rstrip("0").rstrip("."),
        "share": "-" if f["stranded_ratio"] is None else f"{f['stranded_ratio']:.0%}",
    }


def cluster_page(d: dict[str, Any], **layout: Any) -> str:
    legend = [
        ("active", "allocated, SM-active"),
        ("idle", f"idle-but-allocated (SM < {d['idle_threshold']:.0%})"),
        ("unmeasured", "allocated, no SM sample"),
        ("free", "free"),
        (
            "unavailable",
            "lost, unhealthy, or free on a node taking no work (cordoned, drained, maintenance)",
        ),
    ]
    leaves = [
        {
            "title": "no leaf switch" if leaf == "none" else f"leaf switch {leaf}",
            "nodes": [
                _node_row(node, cliques, _node_status(d["statuses"][node], d["now_ms"]))
                for node, cliques in nodes.items()
            ],
        }
        for leaf, nodes in d["leaves"].items()
    ]
    return render_page(
        "cluster.html",
        title="Cluster",
        active="cluster",
        c=d["counts"],
        legend=legend,
        leaves=leaves,
        frag=[_frag_row(f) for f in d["fragmentation"]],
        cell=CELL,
        **layout,
    )


# ---------------------------------------------------------------- queue


def queue_page(
    d: dict[str, Any], tenant_filter: str | None, class_filter: str | None, **layout: Any
) -> str:
    rows = [
        {
            **r,
            "gpus": gpus_text(r["gpu_milli"]),
            "waiting": dur((r["waiting_s"] or 0) * 1000),
            "outlook": preemption_outlook(r),  # as `gpuledger why` words it
        }
        for r in d["rows"]
    ]
    return render_page(
        "queue.html",
        title="Queue",
        active="queue",
        d=d,
        rows=rows,
        tenant_filter=tenant_filter,
        class_filter=class_filter,
        **layout,
    )


# ---------------------------------------------------------------- job


def _timeline(d: dict[str, Any]) -> dict[str, Any]:
    """The job's state bands and event marks on one time axis (SVG coordinates)."""
    t0, t1 = d["start_ms"], max(d["end_ms"], d["start_ms"] + 1)
    width, left = 900, 10

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * (width - 2 * left)

    bands = []
    for s in d["spans"]:
        x0, x1 = x(s["from_ms"]), x(s["to_ms"])
        bands.append(
            {
                "x": f"{x0:.1f}",
                "width": f"{max(x1 - x0, 1.5):.1f}",
                "fill": STATE_COLORS.get(s["state"], "#999"),
                "state": s["state"],
                "title": f"{s['state']}: {dur(s['from_ms'] - t0)} to {dur(s['to_ms'] - t0)}",
                "label_x": f"{x0 + 4:.1f}" if x1 - x0 > 60 else None,
            }
        )
    marks = []
    for it in d["life"]:
        if it["at_ms"] is None or it["kind"] in ("started", "exited", "other"):
            continue
        marks.append(
            {
                "x": f"{x(it['at_ms']):.1f}",
                "color": MARK_COLORS.get(it["kind"], "#333"),
                "title": f"{dur(it['at_ms'] - t0)}: {life_text(it['parts'], d['job_id'])}",
            }
        )
    return {"width": width, "left": left, "bands": bands, "marks": marks, "span": dur(t1 - t0)}


def job_page(d: dict[str, Any], **layout: Any) -> str:
    r = d["report"]
    p = r.get("pending")
    histogram = (
        ", ".join(f"{v} {k}" for k, v in p["node_histogram"].items())
        if p and isinstance(p["node_histogram"], dict)
        else ""
    )
    preempted = [
        {
            **x,
            "lost": x["lost_gpu_seconds"] or 0,
            "alternatives": x["alternatives"] if isinstance(x["alternatives"], list) else [],
        }
        for x in r["preempted"]
    ]
    life = [{**it, "t": dur((it["at_ms"] or d["start_ms"]) - d["start_ms"])} for it in d["life"]]
    return render_page(
        "job.html",
        title=f"Job {r['job']}",
        active="",
        r=r,
        job_id=d["job_id"],
        pending=p,
        outlook=preemption_outlook(p) if p else [],
        histogram=histogram,
        preempted=preempted,
        life=life,
        timeline=_timeline(d),
        legend=[
            (s, c) for s, c in STATE_COLORS.items() if any(x["state"] == s for x in d["spans"])
        ],
        **layout,
    )


# ---------------------------------------------------------------- tenants

CHART_KEYS = [
    ("guaranteed_gpu_milli", "guaranteed", "#4a6fa5", "6 3"),
    ("fair_share_gpu_milli", "fair share", "#6a1b9a", "2 2"),
    ("allocated_gpu_milli", "allocated", "#2e9e5b", ""),
    ("borrowed_gpu_milli", "borrowed", "#f39c12", ""),
]


def _chart(series: list[dict[str, Any]], limit: float | None, t0: int, t1: int) -> dict[str, Any]:
    """Guarantee, limit, fair share, allocated and borrowed (GPUs) over time, as steps."""
    width, height, pad = 560, 150, 30
    top = max([1.0] + [(r[k] or 0) / 1000 for r in series for k, *_ in CHART_KEYS] + [limit or 0])
    t1 = max(t1, t0 + 1)

    def x(t):
        return pad + (t - t0) / (t1 - t0) * (width - pad - 10)

    def y(v):
        return height - 20 - v / top * (height - 35)

    lines = []
    for k, label, color, dash in CHART_KEYS:
        pts, prev = [], None
        for r in series:
            v = (r[k] or 0) / 1000
            if prev is not None:
                pts.append(f"{x(r['at_ms']):.1f},{y(prev):.1f}")
            pts.append(f"{x(r['at_ms']):.1f},{y(v):.1f}")
            prev = v
        if prev is not None:
            pts.append(f"{x(t1):.1f},{y(prev):.1f}")
        lines.append({"label": label, "color": color, "dash": dash, "points": " ".join(pts)})
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "lines": lines,
        "limit_y": None if limit is None else f"{y(limit):.1f}",
        "top": f"{top:g}",
        "top_y": f"{y(top) + 4:.1f}",
        "zero_y": f"{y(0):.1f}",
        "zero_label_y": f"{y(0) + 4:.1f}",
        "span": dur(t1 - t0),
    }


def tenants_page(d: dict[str, Any], **layout: Any) -> str:
    t_all = [s["at_ms"] for ser in d["series"].values() for s in ser]
    t0 = min(t_all) if t_all else 0
    t1 = max([d["now_ms"]] + t_all) if t_all else 1
    charts = [(t, _chart(ser, d["limits"].get(t), t0, t1)) for t, ser in d["series"].items()]
    rows = [
        {
            **r,
            "borrowed_now": max(0.0, (r["allocated_gpus_now"] or 0) - (r["guaranteed_gpus"] or 0)),
        }
        for r in d["rows"]
    ]
    return render_page(
        "tenants.html",
        title="Tenants",
        active="tenants",
        d=d,
        rows=rows,
        charts=charts,
        n=number,
        **layout,
    )


# ---------------------------------------------------------------- what-if


def whatif_page(
    logs: list[str],
    a: str | None,
    b: str | None,
    result: dict[str, Any] | None,
    error: str | None,
    enabled: bool,
    **layout: Any,
) -> str:
    return render_page(
        "whatif.html",
        title="What-if",
        active="whatif",
        logs=logs,
        a=a,
        b=b,
        result=result,
        error=error,
        enabled=enabled,
        **layout,
    )
