"""Server-rendered HTML and inline SVG for the dashboard's pages (no template engine, no
script needed to read a page; everything from the projection is escaped)."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote

from gpuledger.projections.queries import gpus_text, preemption_outlook
from gpuledger.services.domain.tooling.timefmt import duration

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
PAGES = [
    ("cluster", "Cluster"),
    ("queue", "Queue"),
    ("jobs", "Jobs"),  # projections/ui/jobs.py (a Jinja2 template)
    ("tenants", "Tenants"),
    ("whatif", "What-if"),
]


def e(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def dur(ms: float | None) -> str:
    """A duration as `gpuledger why` writes it (`45s`, `12m5s`, `2d4h`); `-` when unknown."""
    return "-" if ms is None else duration(max(0, ms))


def job_link(job_id: str | None) -> str:
    if not job_id:
        return '<span class="muted">a job of another tenant</span>'
    return f'<a class="job" href="/jobs/{quote(job_id, safe="")}">{e(job_id)}</a>'


def layout(
    title: str,
    active: str,
    body: str,
    *,
    seq: int | None,
    tenant: str | None,
    live: bool = True,
    retry_s: int | None = None,
) -> str:
    nav = "".join(
        f'<a href="/{p}"{" class=active" if p == active else ""}>{e(label)}</a>'
        for p, label in PAGES
        if not (tenant and p == "whatif")
    )
    who = (
        f'<span class="scope">tenant view: <b>{e(tenant)}</b></span>'
        if tenant
        else '<span class="scope">auditor view: all tenants</span>'
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)} · gpuledger</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/ui.css"></head>
<body data-seq="{e(seq)}" data-live="{"1" if live else "0"}"{f' data-retry="{retry_s}"' if retry_s else ""}>
<header><span class="brand">gpuledger</span><nav>{nav}</nav>{who}
{f'<span id="live" class="live" title="updates while the projector runs">seq {e(seq)}</span>' if seq is not None else ""}</header>
<main id="main">{body}</main>
<script src="/static/ui.js"></script>
</body></html>"""


def table(headers: list[str], rows: list[list[str]], *, cls: str = "", id_: str = "") -> str:
    """Cells are already HTML."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    return (
        f'<table class="{cls}"{f" id={chr(34)}{id_}{chr(34)}" if id_ else ""}>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def badge(state: str | None, text: str | None = None) -> str:
    """The state as a coloured badge; `text` shows instead of the state (a service's
    `running 2/3`, as `gpuledger jobs` and `why` write it)."""
    return (
        f'<span class="badge" style="background:{STATE_COLORS.get(state or "", "#999")}">'
        f"{e(text or state)}</span>"
    )


# ---------------------------------------------------------------- cluster

CELL, GAP = 24, 3


def _gpu_svg(g: dict[str, Any], x: int, y: int) -> str:
    kind = g["kind"]
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
    out = [
        f'<g class="gpu gpu-{kind}" data-node="{e(g["node"])}" data-gpu="{g["gpu_index"]}"'
        f' data-kind="{kind}"><title>{e(chr(10).join(tip))}</title>',
        f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" rx="3" fill="{KIND_COLORS["free"]}"'
        f' stroke="#9aa5b1" stroke-width="1"/>',
    ]
    fill = KIND_COLORS.get(kind, "#999")
    # SM-active GPUs: the busier, the darker
    opacity = 0.45 + 0.55 * min(1.0, g["sm_active"]) if kind == "active" else 1.0
    if g["sharing"] == "mig":  # 7 compute slices: outline each, fill the ones held
        for i in range(1, 7):
            sx = x + i * CELL / 7
            out.append(
                f'<line x1="{sx:.1f}" y1="{y}" x2="{sx:.1f}" y2="{y + CELL}" stroke="#c5ccd6"/>'
            )
    off = 0.0
    for p in g["parts"]:
        w = CELL * min(1000, p["gpu_milli"] or 0) / 1000
        if g["sharing"] == "mig" and p["mig_start"] is not None:
            off = CELL * min(7, p["mig_start"]) / 8 if p["mig_start"] < 8 else off
        part = (
            f'<rect class="part" x="{x + off:.1f}" y="{y + 2}" width="{max(w, 2):.1f}"'
            f' height="{CELL - 4}" fill="{fill}" fill-opacity="{opacity:.2f}" rx="2"/>'
        )
        if p["job_id"]:  # a click on a part opens its job
            part = f'<a href="/jobs/{quote(p["job_id"], safe="")}">{part}</a>'
        out.append(part)
        off += w
    if g["sharing"] in ("mps", "timeslice"):  # shared GPUs: a corner mark (tooltip says which)
        out.append(f'<path d="M{x + CELL - 8} {y} h8 v8 z" fill="#52606d"/>')
    if kind == "unavailable":
        out.append(
            f'<line x1="{x}" y1="{y}" x2="{x + CELL}" y2="{y + CELL}" stroke="#fff" stroke-width="2"/>'
        )
    out.append("</g>")
    return "".join(out)


def cluster_page(d: dict[str, Any], tenant: str | None) -> str:
    c = d["counts"]
    legend = "".join(
        f'<span class="key"><i style="background:{KIND_COLORS[k]}"></i>{e(label)}: '
        f'<b data-count="{k}">{c[k]}</b></span>'
        for k, label in (
            ("active", "allocated, SM-active"),
            ("idle", f"idle-but-allocated (SM < {d['idle_threshold']:.0%})"),
            ("unmeasured", "allocated, no SM sample"),
            ("free", "free"),
            ("unavailable", "lost or unhealthy"),
        )
    )
    legend += (
        '<span class="key">MIG GPUs: 7 slices; shared (MPS, time-sliced) GPUs: a dark corner, '
        "each share drawn as its part of the GPU</span>"
    )
    summary = (
        f'<p class="summary"><b data-count="gpus">{c["gpus"]}</b> GPUs: '
        f'<b data-count="allocated">{c["allocated"]}</b> wholly allocated, '
        f'<b data-count="partial">{c["partial"]}</b> partly (MIG slices or shares), '
        f"<b>{c['idle']}</b> idle-but-allocated, <b>{c['free']}</b> free.</p>"
    )
    blocks = []
    for leaf, nodes in d["leaves"].items():
        rows = []
        for node, cliques in nodes.items():
            x, cells, labels = 0, [], []
            for clique, gpus in cliques.items():
                start = x
                for g in gpus:
                    cells.append(_gpu_svg(g, x, 0))
                    x += CELL + GAP
                labels.append(
                    f'<text x="{start}" y="{CELL + 13}" class="clique">{e(clique)}</text>'
                )
                x += 3 * GAP
            width = max(x - 3 * GAP, 60)
            rows.append(
                f'<div class="node"><div class="nodename">{e(node)}</div>'
                f'<svg width="{width}" height="{CELL + 16}" role="img" aria-label="{e(node)} GPUs">'
                f"{''.join(cells)}{''.join(labels)}</svg></div>"
            )
        title = "no leaf switch" if leaf == "none" else f"leaf switch {leaf}"
        blocks.append(
            f'<section class="leaf"><h3>{e(title)}</h3><div class="nodes">{"".join(rows)}</div>'
            "</section>"
        )
    frag_rows = [
        [
            e(f["node"]) if f["node"] != "*" else "<b>all</b>",
            e(f["clique"]),
            e(f["models"]),
            e(f["free_gpus"]),
            e(
                f"{f['free_gpu_equiv']:.2f}".rstrip("0").rstrip(".")
                if f["free_gpu_equiv"] is not None
                else "-"
            ),
            e(f["partial_gpus"]),
            *_stranded_cells(f),
            e(f["pending_jobs"]),
        ]
        for f in d["fragmentation"]
    ]
    frag = table(
        [
            "node",
            "NVLink clique",
            "models",
            "free GPUs",
            "free GPU-equiv.",
            "partly used",
            "stranded GPUs",
            "stranded share",
            "pending jobs",
        ],
        frag_rows,
        id_="fragmentation",
    )
    return (
        f"<h1>Cluster</h1>{summary}<div class=legend>{legend}</div>"
        f'<div id="heatmap">{"".join(blocks) or "<p class=muted>no nodes registered</p>"}</div>'
        f"<h2>Fragmentation per NVLink clique</h2><p class=muted>Stranded: free capacity that "
        f"pending jobs exist for but cannot use (model, memory, clique size, share or MIG size); "
        f"with no pending job nothing is stranded.</p>{frag}"
    )


def _stranded_cells(f: dict[str, Any]) -> list[str]:
    """The stranded GPUs and share of a fragmentation row: defined against pending work, so
    with no pending job they read `no pending work` (the view counts every free GPU then)."""
    if not f["pending_jobs"]:
        return ['<span class="muted">no pending work</span>', '<span class="muted">-</span>']
    share = f"{f['stranded_ratio']:.0%}" if f["stranded_ratio"] is not None else "-"
    return [e(f["stranded_gpus"]), e(share)]


# ---------------------------------------------------------------- queue


def _select(name: str, options: list[str], current: str | None, all_label: str) -> str:
    opts = [f'<option value="">{e(all_label)}</option>'] + [
        f'<option value="{e(o)}"{" selected" if o == current else ""}>{e(o)}</option>'
        for o in options
    ]
    return f'<select name="{e(name)}" data-autosubmit="1">{"".join(opts)}</select>'


def queue_page(
    d: dict[str, Any], tenant: str | None, tenant_filter: str | None, class_filter: str | None
) -> str:
    rows = []
    for r in d["rows"]:
        outlook = preemption_outlook(r)  # as `gpuledger why` words it
        help_ = "<br>".join(e(x) for x in outlook) if outlook else '<span class="muted">-</span>'
        by = (
            job_link(r["last_preemptor"])
            if r["last_preemptor"]
            else ('<span class="muted">another tenant</span>' if r["preemptions"] else "")
        )
        rows.append(
            [
                e(r["queue_position"]),
                job_link(r["job_id"]),
                e(r["tenant"]),
                e(r["priority_class"]),
                e(gpus_text(r["gpu_milli"])),
                e(dur((r["waiting_s"] or 0) * 1000)),
                f'<span class="reason">{e(r["reason"])}</span>',
                e(r["message"]),
                help_,
                by,
            ]
        )
    form = (
        '<form class="filters" method="get" action="/queue">'
        + ("" if tenant else _select("tenant", d["tenants"], tenant_filter, "all tenants"))
        + _select("class", d["classes"], class_filter, "all classes")
        + "<noscript><button>filter</button></noscript></form>"
    )
    return (
        f"<h1>Queue</h1>{form}<p class=summary><b id=pending-count>{len(d['rows'])}</b> jobs waiting</p>"
        + table(
            [
                "#",
                "job",
                "tenant",
                "class",
                "GPUs",
                "waiting",
                "reason",
                "message",
                "preemption",
                "preempted by",
            ],
            rows,
            id_="queue",
        )
    )


# ---------------------------------------------------------------- job


def _timeline_svg(d: dict[str, Any]) -> str:
    t0, t1 = d["start_ms"], max(d["end_ms"], d["start_ms"] + 1)
    width, left = 900, 10

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * (width - 2 * left)

    bands = []
    for s in d["spans"]:
        x0, x1 = x(s["from_ms"]), x(s["to_ms"])
        bands.append(
            f'<rect x="{x0:.1f}" y="20" width="{max(x1 - x0, 1.5):.1f}" height="26"'
            f' fill="{STATE_COLORS.get(s["state"], "#999")}"><title>{e(s["state"])}: '
            f"{e(dur(s['from_ms'] - t0))} to {e(dur(s['to_ms'] - t0))}</title></rect>"
        )
        if x1 - x0 > 60:
            bands.append(f'<text x="{x0 + 4:.1f}" y="37" class="band">{e(s["state"])}</text>')
    marks = []
    for it in d["life"]:
        if it["at_ms"] is None or it["kind"] in ("started", "exited", "other"):
            continue
        xm = x(it["at_ms"])
        color = {
            "checkpoint": "#1565c0",
            "preempted": "#d64541",
            "evicted": "#d64541",
            "preemptor": "#6a1b9a",
            "requeued": "#f0a030",
        }.get(it["kind"], "#333")
        marks.append(
            f'<g class="mark"><line x1="{xm:.1f}" y1="12" x2="{xm:.1f}" y2="54" stroke="{color}"'
            f' stroke-width="2"/><circle cx="{xm:.1f}" cy="10" r="4" fill="{color}"/>'
            f"<title>{e(dur(it['at_ms'] - t0))}: {e(it['text'].replace('{', '').replace('}', ''))}"
            "</title></g>"
        )
    axis = (
        f'<text x="{left}" y="70" class="axis">+0s</text>'
        f'<text x="{width - left}" y="70" class="axis" text-anchor="end">+{e(dur(t1 - t0))}</text>'
    )
    return (
        f'<svg id="timeline" width="{width}" height="76" role="img" aria-label="job timeline">'
        f"{''.join(bands)}{''.join(marks)}{axis}</svg>"
    )


def _life_text(it: dict[str, Any]) -> str:
    text = e(it["text"])
    for k, job_id in it["links"].items():
        text = text.replace("{" + k + "}", job_link(job_id))
    return text


def job_page(d: dict[str, Any]) -> str:
    r = d["report"]
    head = (
        f'<h1>Job <span id="job-name">{e(r["job"])}</span> {badge(r["state"], r.get("state_text"))}</h1>'
        f'<p class="facts">tenant <b>{e(r["tenant"])}</b> · class <b>{e(r["priority_class"])}</b>'
        f" · priority <b>{e(r['priority'])}</b> · <b>{e(r['gpus'])}</b> GPUs · attempts "
        f"{e(r['attempts'])}</p>"
    )
    if r["reason"]:
        head += (
            f'<p class="why"><span class="reason">{e(r["reason"])}</span> '
            f'<span id="message">{e(r["message"])}</span></p>'
        )
    p = r.get("pending")
    if p:
        head += (
            f"<p>Waiting {e(dur(p['waiting_s'] * 1000))}; queue position "
            f"<b>{e(p['queue_position'])}</b></p>"
        )
        # the preemption outlook exactly as `gpuledger why` words it
        head += "".join(f'<p class="preemption">{e(x)}</p>' for x in preemption_outlook(p))
        if isinstance(p["node_histogram"], dict) and p["node_histogram"]:
            head += (
                "<p>Nodes: "
                + e(", ".join(f"{v} {k}" for k, v in p["node_histogram"].items()))
                + "</p>"
            )
    if r.get("allocation"):
        a = r["allocation"]
        head += f"<p>Allocation {e(a['id'])} on {e(a['nodes'])} ({e(a['gpus'])} GPUs)</p>"
    pre = []
    for i, x in enumerate(r["preempted"], 1):
        alts = ""
        if isinstance(x["alternatives"], list) and x["alternatives"]:
            alts = (
                "<ul>"
                + "".join(
                    f"<li>{e(', '.join(a.get('victims', [])) if isinstance(a, dict) else a)}: "
                    f"{e(a.get('rejected', a.get('reason', '')) if isinstance(a, dict) else '')}</li>"
                    for a in x["alternatives"]
                )
                + "</ul>"
            )
        lost = x["lost_gpu_seconds"] or 0
        pre.append(
            f'<div class="card preempted"><h3>Preempted #{i} by {job_link(x["by"])} '
            f'<span class="muted">(tenant {e(x["by_tenant"])}, priority {e(x["by_priority"])})</span></h3>'
            f'<p>reason <span class="reason">{e(x["reason"])}</span>, allocation {e(x["allocation"])},'
            f" outcome {e(x['outcome'])}</p><p>why: {e(x['message'])}</p>"
            f'<p>lost work: <b class="lost">{lost:.0f} GPU-seconds</b> ({lost / 3600:.2f} GPU-hours);'
            f" checkpointed: {'yes' if x['checkpointed'] else 'no'}"
            + (
                f"; resumes from {x['saved_progress_s']:.0f}s of progress"
                if x["saved_progress_s"]
                else ""
            )
            + "</p>"
            + (f"<p>alternatives considered and rejected:</p>{alts}" if alts else "")
            + "</div>"
        )
    for x in r["preempted_others"]:
        pre.append(
            f'<div class="card preemptor"><p>Preempted {job_link(x["victim"])} ({e(x["reason"])},'
            f" lost {x['lost_gpu_seconds'] or 0:.0f} GPU-seconds)</p></div>"
        )
    life = "".join(
        f'<li class="life-{e(it["kind"])}"><span class="t">+{e(dur((it["at_ms"] or d["start_ms"]) - d["start_ms"]))}'
        f"</span> {_life_text(it)}</li>"
        for it in d["life"]
    )
    refused = "".join(
        f"<li>{e(x['request'])} from {e(x['tenant'])}: {e(x['reason'])}: {e(x['message'])}</li>"
        for x in r.get("refused") or []
    )
    history = " → ".join(
        e(t["to"]) + (f"({e(t['reason'])})" if t["reason"] else "") for t in r["transitions"]
    )
    legend = "".join(
        f'<span class="key"><i style="background:{c}"></i>{e(s)}</span>'
        for s, c in STATE_COLORS.items()
        if any(x["state"] == s for x in d["spans"])
    )
    return (
        head
        + f'<h2>Timeline</h2><div class="legend">{legend}</div>{_timeline_svg(d)}'
        + "".join(pre)
        + f'<h2>Life</h2><ol id="life">{life}</ol>'
        + (f"<h2>Refused requests</h2><ul>{refused}</ul>" if refused else "")
        + f'<p class="muted">History: {history}</p>'
        + f'<p class="muted">The same facts as <code>gpuledger why {e(r["job"])}</code>.</p>'
    )


# ---------------------------------------------------------------- tenants


def _chart(series: list[dict[str, Any]], limit: float | None, t0: int, t1: int) -> str:
    """Guarantee, limit, fair share, allocated and borrowed (GPUs) over time, as steps."""
    width, height, pad = 560, 150, 30
    keys = [
        ("guaranteed_gpu_milli", "guaranteed", "#4a6fa5", "6 3"),
        ("fair_share_gpu_milli", "fair share", "#6a1b9a", "2 2"),
        ("allocated_gpu_milli", "allocated", "#2e9e5b", ""),
        ("borrowed_gpu_milli", "borrowed", "#f39c12", ""),
    ]
    top = max([1.0] + [(r[k] or 0) / 1000 for r in series for k, *_ in keys] + [limit or 0])
    t1 = max(t1, t0 + 1)

    def x(t):
        return pad + (t - t0) / (t1 - t0) * (width - pad - 10)

    def y(v):
        return height - 20 - v / top * (height - 35)

    lines = []
    for k, label, color, dash in keys:
        pts, prev = [], None
        for r in series:
            v = (r[k] or 0) / 1000
            if prev is not None:
                pts.append(f"{x(r['at_ms']):.1f},{y(prev):.1f}")
            pts.append(f"{x(r['at_ms']):.1f},{y(v):.1f}")
            prev = v
        if prev is not None:
            pts.append(f"{x(t1):.1f},{y(prev):.1f}")
        lines.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"'
            f' points="{" ".join(pts)}"><title>{e(label)}</title></polyline>'
        )
    if limit is not None:
        lines.append(
            f'<line x1="{pad}" x2="{width - 10}" y1="{y(limit):.1f}" y2="{y(limit):.1f}"'
            f' stroke="#d64541" stroke-dasharray="4 4"><title>limit</title></line>'
        )
    axis = (
        f'<text x="{pad - 4}" y="{y(top) + 4:.1f}" text-anchor="end" class="axis">{top:g}</text>'
        f'<text x="{pad - 4}" y="{y(0) + 4:.1f}" text-anchor="end" class="axis">0</text>'
        f'<line x1="{pad}" x2="{width - 10}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#bbb"/>'
        f'<text x="{pad}" y="{height - 4}" class="axis">+0s</text>'
        f'<text x="{width - 10}" y="{height - 4}" text-anchor="end" class="axis">+{e(dur(t1 - t0))}</text>'
    )
    return f'<svg width="{width}" height="{height}" class="chart">{axis}{"".join(lines)}</svg>'


def _n(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if v else "0"
    return str(v)


def tenants_page(d: dict[str, Any]) -> str:
    rows = [
        [
            f"<b>{e(r['tenant'])}</b>",
            e(_n(r["guaranteed_gpus"])),
            e(_n(r["limit_gpus"])),
            e(_n(r["fair_share_gpus"])),
            e(_n(r["allocated_gpus_now"])),
            e(_n(max(0.0, (r["allocated_gpus_now"] or 0) - (r["guaranteed_gpus"] or 0)))),
            e(_n(r["allocated_gpu_hours"], 2)),
            e(_n(r["borrowed_gpu_hours"], 2)),
            e(_n(r["lost_gpu_hours"], 3)),
            e(r["times_preempted"]),
            e(r["running_jobs"]),
            e(r["pending_jobs"]),
        ]
        for r in d["rows"]
    ]
    t_all = [s["at_ms"] for ser in d["series"].values() for s in ser]
    t0 = min(t_all) if t_all else 0
    t1 = max([d["now_ms"]] + t_all) if t_all else 1
    legend = (
        '<div class="legend"><span class="key"><i style="background:#4a6fa5"></i>guaranteed</span>'
        '<span class="key"><i style="background:#d64541"></i>limit</span>'
        '<span class="key"><i style="background:#6a1b9a"></i>fair share</span>'
        '<span class="key"><i style="background:#2e9e5b"></i>allocated</span>'
        '<span class="key"><i style="background:#f39c12"></i>borrowed</span></div>'
    )
    charts = "".join(
        f'<div class="card"><h3>{e(t)}</h3>{_chart(ser, d["limits"].get(t), t0, t1)}</div>'
        for t, ser in d["series"].items()
    )
    daily = table(
        ["day", "tenant", "GPU-hours", "on borrowed placements", "jobs"],
        [
            [
                e(r["day"]),
                e(r["tenant"]),
                e(_n(r["gpu_hours"], 2)),
                e(_n(r["borrowing_gpu_hours"], 2)),
                e(r["jobs"]),
            ]
            for r in d["daily"]
        ],
        id_="daily",
    )
    pre = table(
        ["day", "tenant", "preemptions", "lost GPU-hours"],
        [
            [e(r["day"]), e(r["tenant"]), e(r["preemptions"]), e(_n(r["lost_gpu_hours"], 3))]
            for r in d["preemptions"]
        ],
    )
    return (
        "<h1>Tenants</h1>"
        + table(
            [
                "tenant",
                "guaranteed",
                "limit",
                "fair share",
                "allocated now",
                "borrowed now",
                "GPU-hours",
                "borrowed GPU-h",
                "lost GPU-h",
                "preempted",
                "running",
                "pending",
            ],
            rows,
            id_="tenants",
        )
        + f"<h2>Guarantee, limit, fair share, allocated and borrowed over time (GPUs)</h2>{legend}"
        + f'<div class="charts">{charts or "<p class=muted>no fair-share updates yet</p>"}</div>'
        + f"<h2>GPU-hours per day</h2>{daily}<h2>Preemptions per day</h2>{pre}"
    )


# ---------------------------------------------------------------- what-if


def whatif_page(
    logs: list[str],
    a: str | None,
    b: str | None,
    result: dict[str, Any] | None,
    error: str | None,
    enabled: bool,
) -> str:
    if not enabled:
        return (
            "<h1>What-if</h1><p>Start the dashboard with <code>--whatif-dir DIR</code> (a folder "
            "of replay logs: JSONL, Parquet or DuckDB) to compare two of them here.</p>"
        )

    def sel(name, cur):
        return (
            f'<select name="{name}">'
            + "".join(
                f'<option{" selected" if x == cur else ""} value="{e(x)}">{e(x)}</option>'
                for x in logs
            )
            + "</select>"
        )

    form = (
        f'<form class="filters" method="get" action="/whatif">A {sel("a", a)} B {sel("b", b)}'
        "<button>compare</button></form>"
    )
    out = f"<h1>What-if</h1>{form}"
    if error:
        out += f'<p class="error">{e(error)}</p>'
    if result:
        out += table(
            ["metric", f"A: {a}", f"B: {b}", "delta (B - A)"],
            [[e(c) for c in row] for row in result["rows"]],
            id_="compare",
        )
        out += (
            '<div class="charts">'
            + "".join(
                f'<figure><img alt="{e(name)}" src="data:image/png;base64,{png}"><figcaption>{e(name)}'
                f"</figcaption></figure>"
                for name, png in result["plots"]
            )
            + "</div>"
        )
    return out


def error_page(title: str, message: str) -> str:
    return f'<h1>{e(title)}</h1><p class="error">{e(message)}</p>'
