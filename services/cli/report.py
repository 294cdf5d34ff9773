"""`gpuledger report`: a window's GPU-hours like Slurm's `sreport cluster utilization` and
`user top` (argument handling and formatting only; the numbers are projections/report.py's,
the SQL macros of projections/report.sql)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from enum import StrEnum
from typing import Any

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.output import render_table
from gpuledger.services.cli.reading import DEFAULT_DATA, DataOption, DbOption, _query, db_path

NOTE = (
    "planned down: maintenance windows (gpuledger node maintenance); reserved: windows held "
    "for a tenant (--tenant), idle"
)


class ReportFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def parse_instant(text: str, option: str, tz: str) -> int:
    """`2026-12-01`, `2026-12-01T08:00`, with an offset or `Z` (else in zone `tz`), or epoch
    ms, to epoch ms; a bad one exits 2 with one line."""
    if text.isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        fail(f"{option}: {text!r} is not a time (YYYY-MM-DD[THH:MM[:SS]][+HH:MM|Z] or epoch ms)", 2)
    if t.tzinfo is None:
        t = t.replace(tzinfo=_zone(tz))
    return int(t.timestamp() * 1000)


def _zone(tz: str):
    from gpuledger.services.domain.policy.schedules import zone

    try:
        return zone(tz)
    except ValueError as exc:
        fail(f"--tz: {exc}", 2)


def _iso(ms: int, tz: str) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=_zone(tz)).isoformat(timespec="seconds")


def _h(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}%"


def table_text(doc: dict[str, Any]) -> str:
    """The report as sreport-like tables: the split, then tenants, users and models."""
    u = doc["utilisation"]
    parts = [
        f"Cluster utilisation {doc['start']} - {doc['end']}: "
        f"{_h(doc['reported_gpu_hours'])} GPU-hours reported",
        render_table(
            ["CATEGORY", "GPU-HOURS", "PERCENT"],
            [[c.replace("_", "-"), _h(u[c]["gpu_hours"]), _pct(u[c]["pct"])] for c in u],
        ),
        f"({NOTE})",
        "",
        "Top tenants",
        render_table(
            ["TENANT", "JOBS", "GPU-HOURS", "PERCENT", "RESERVED"],
            [
                [
                    r["tenant"],
                    r["jobs"],
                    _h(r["gpu_hours"]),
                    _pct(r["pct"]),
                    _h(r["reserved_gpu_hours"]),
                ]
                for r in doc["tenants"]
            ],
        ),
        "",
        "Top users",
        render_table(
            ["TENANT", "USER", "JOBS", "GPU-HOURS", "PERCENT"],
            [
                [r["tenant"], r["user"], r["jobs"], _h(r["gpu_hours"]), _pct(r["pct"])]
                for r in doc["users"]
            ],
        ),
        "",
        "By GPU model",
        render_table(
            ["MODEL", "ALLOCATED", "IDLE", "DOWN", "REPORTED", "ALLOCATED-%"],
            [
                [
                    r["model"],
                    _h(r["allocated_gpu_hours"]),
                    _h(r["idle_gpu_hours"]),
                    _h(r["down_gpu_hours"]),
                    _h(r["reported_gpu_hours"]),
                    _pct(r["allocated_pct"]),
                ]
                for r in doc["models"]
            ],
        ),
    ]
    return "\n".join(parts)


CSV_COLUMNS = ("section", "tenant", "user", "model", "category", "jobs", "gpu_hours", "pct")


def csv_text(doc: dict[str, Any]) -> str:
    """The report as one CSV table, a row per number: `section` is utilisation, tenant (its
    allocated row, and a reserved row where its windows held GPUs idle), user or model (a
    model's row per category: allocated, idle, down, planned_down, reserved, reported)."""
    out = io.StringIO()
    w = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for c, v in doc["utilisation"].items():
        w.writerow({"section": "utilisation", "category": c, **v})
    w.writerow(
        {"section": "utilisation", "category": "reported", "gpu_hours": doc["reported_gpu_hours"]}
    )
    for r in doc["tenants"]:
        reserved = r["reserved_gpu_hours"]
        allocated = {k: v for k, v in r.items() if k != "reserved_gpu_hours"}
        w.writerow({"section": "tenant", "category": "allocated", **allocated})
        if reserved:
            row = {"tenant": r["tenant"], "category": "reserved", "gpu_hours": reserved}
            w.writerow({"section": "tenant", **row})
    for r in doc["users"]:
        w.writerow({"section": "user", "category": "allocated", **r})
    for r in doc["models"]:
        for c in ("allocated", "idle", "down", "planned_down", "reserved", "reported"):
            pct = r["allocated_pct"] if c == "allocated" else None
            w.writerow(
                {
                    "section": "model",
                    "model": r["model"],
                    "category": c,
                    "gpu_hours": r[f"{c}_gpu_hours"],
                    "pct": pct,
                }
            )
    return out.getvalue().rstrip("\n")


def report_command(
    start: str | None = typer.Option(
        None,
        "--start",
        "-S",
        help="Window start: YYYY-MM-DD[THH:MM[:SS]], with +HH:MM or Z, else in --tz; or epoch "
        "ms (default: the log's first event).",
    ),
    end: str | None = typer.Option(
        None, "--end", "-E", help="Window end, the same forms (default: now, the last event)."
    ),
    tz: str = typer.Option(
        "UTC", "--tz", help="IANA zone of times without an offset, and of the output."
    ),
    top: int = typer.Option(10, "--top", min=1, help="Tenants and users listed (most first)."),
    output: ReportFormat = typer.Option(
        ReportFormat.table, "-o", "--output", help="table, csv or json."
    ),
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
) -> None:
    """Cluster utilisation of a window like Slurm's sreport: reported GPU-hours split into
    allocated, idle, down (nodes lost), planned down (maintenance windows) and
    reserved (windows held for a tenant, idle), in GPU-hours and %; the top tenants (allocated
    and reserved GPU-hours) and users by allocated GPU-hours; per
    GPU model. The same numbers are SQL (`utilisation_between(start_ms, end_ms)` and the
    `report_*` views). Exit codes: 2 invalid options, 4 projection busy."""
    _zone(tz)
    start_ms = parse_instant(start, "--start", tz) if start else None
    end_ms = parse_instant(end, "--end", tz) if end else None
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        fail("--end is not after --start", 2)
    from gpuledger.projections.report import report, window

    def rows(con) -> dict[str, Any]:
        w = window(con, start_ms, end_ms)
        if w[1] <= w[0]:
            fail(f"the window is empty ({_iso(w[0], tz)} - {_iso(w[1], tz)})", 2)
        return report(con, *w, top=top)

    doc = _query(db_path(db, data), rows)
    doc = {"start": _iso(doc["start_ms"], tz), "end": _iso(doc["end_ms"], tz), **doc}
    if output == ReportFormat.json:
        typer.echo(json.dumps(doc, indent=2))
    elif output == ReportFormat.csv:
        typer.echo(csv_text(doc))
    else:
        typer.echo(table_text(doc))
