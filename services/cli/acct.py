"""`gpuledger acct`: sacct-like accounting from the projection (argument handling and
formatting only; the rows are the `job_accounting` view, projections/queries.acct_rows)."""

from __future__ import annotations

import datetime as dt
import difflib
from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.reading import DEFAULT_DATA, _connect, db_path


def _time(v: dt.datetime | None) -> str:
    return "Unknown" if v is None else v.strftime("%Y-%m-%dT%H:%M:%S")


def _clock(s: float | None) -> str:
    """sacct's elapsed format: [D-]HH:MM:SS."""
    if s is None:
        return "00:00:00"
    s = int(round(s))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{sec:02d}"


def _num(v: float | None, digits: int = 2) -> str:
    if v is None:
        return ""
    return str(int(v)) if float(v).is_integer() else f"{v:.{digits}f}"


# sacct field name -> (width, value of a job_accounting row)
FIELDS: dict[str, tuple[int, Any]] = {
    "JobID": (16, lambda r: r["job_id"]),
    "JobName": (16, lambda r: r["job_id"]),
    "Account": (12, lambda r: r["tenant"] or ""),
    "Tenant": (12, lambda r: r["tenant"] or ""),
    "User": (10, lambda r: r.get("user") or "-"),
    "QOS": (11, lambda r: r["priority_class"] or ""),
    "Class": (11, lambda r: r["priority_class"] or ""),
    "State": (10, lambda r: r["state"].upper()),
    "Reason": (22, lambda r: r["reason"] or "None"),
    "AllocGPUs": (9, lambda r: _num(r["gpus"])),
    "NNodes": (6, lambda r: str(len(r["nodes"].split(","))) if r["nodes"] else "0"),
    "NodeList": (20, lambda r: r["nodes"] or "None assigned"),
    "Submit": (19, lambda r: _time(r["submitted_at"])),
    "Eligible": (19, lambda r: _time(r["admitted_at"])),
    "Start": (19, lambda r: _time(r["started_at"])),
    "End": (19, lambda r: _time(r["ended_at"])),
    "Elapsed": (10, lambda r: _clock(r["elapsed_s"])),
    "Planned": (10, lambda r: _clock(r["total_wait_s"])),
    "GPUHours": (9, lambda r: _num(r["gpu_hours"], 3)),
    "LostGPUHours": (12, lambda r: _num(r["lost_gpu_hours"], 3)),
    "Preemptions": (11, lambda r: str(r["preemptions"] or 0)),
    "Attempts": (8, lambda r: str(r["attempts"] or 0)),
}
DEFAULT_FIELDS = "JobID,Account,QOS,State,AllocGPUs,Submit,Start,End,Elapsed,Planned"
_BY_LOWER = {k.lower(): k for k in FIELDS}


def parse_fields(spec: str) -> list[tuple[str, int]]:
    """`JobID,State%20,...` -> [(field, width)] (sacct's `%N` sets a width)."""
    out = []
    for raw in spec.split(","):
        name, _, width = raw.strip().partition("%")
        key = _BY_LOWER.get(name.lower())
        if key is None:
            near = difflib.get_close_matches(name, list(FIELDS), n=1)
            fail(
                f"-o: unknown field {name!r}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; fields: {','.join(FIELDS)}",
                2,
            )
        if width and not width.isdigit():
            fail(f"-o: {raw.strip()!r}: the width after % must be a number", 2)
        out.append((key, int(width) if width else FIELDS[key][0]))
    return out


def parse_time(text: str, option: str) -> int:
    """sacct-style time: YYYY-MM-DD[THH:MM[:SS]] (UTC) -> epoch ms."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        fail(f"{option}: {text!r} is not a time (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], UTC)", 2)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def render(
    rows: list[dict[str, Any]],
    fields: list[tuple[str, int]],
    *,
    parsable: bool,
    parsable2: bool,
    noheader: bool,
) -> str:
    lines = []
    if parsable or parsable2:
        end = "|" if parsable else ""
        if not noheader:
            lines.append("|".join(f for f, _ in fields) + end)
        lines += ["|".join(FIELDS[f][1](r) for f, _ in fields) + end for r in rows]
        return "\n".join(lines)

    def cell(text: str, w: int) -> str:  # sacct truncates with '+'
        return text.rjust(w) if len(text) <= w else text[: w - 1] + "+"

    if not noheader:
        lines.append(" ".join(cell(f, w) for f, w in fields))
        lines.append(" ".join("-" * w for _, w in fields))
    lines += [" ".join(cell(FIELDS[f][1](r), w) for f, w in fields) for r in rows]
    return "\n".join(lines)


def acct(
    starttime: str | None = typer.Option(
        None,
        "--starttime",
        "-S",
        help="Jobs not finished before this time (YYYY-MM-DD[THH:MM[:SS]], UTC).",
    ),
    endtime: str | None = typer.Option(
        None, "--endtime", "-E", help="Jobs submitted before this time."
    ),
    format_: str = typer.Option(
        DEFAULT_FIELDS,
        "--format",
        "-o",
        help="Comma-separated fields, a width as Field%N: " + ",".join(FIELDS) + ".",
    ),
    parsable: bool = typer.Option(
        False, "--parsable", "-p", help="'|' after every field (sacct -p)."
    ),
    parsable2: bool = typer.Option(
        False, "--parsable2", "-P", help="'|' between fields (sacct -P)."
    ),
    noheader: bool = typer.Option(False, "--noheader", "-n", help="No header lines."),
    accounts: str | None = typer.Option(
        None, "--accounts", "-A", "--tenant", help="Only this tenant (and its children)."
    ),
    state: str | None = typer.Option(
        None, "--state", "-s", help="Only jobs in this state (pending, running, completed, ...)."
    ),
    db: Path | None = typer.Option(None, "--db", help="Projection database."),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="Data directory."),
) -> None:
    """Accounting like Slurm's sacct: one line per job with submit, start and end times,
    elapsed run time, total wait (Planned: all waits, requeues included), GPUs and GPU-hours.
    Times are UTC. Exit codes: 2 invalid options, 4 projection busy."""
    fields = parse_fields(format_)
    start = parse_time(starttime, "--starttime") if starttime else None
    end = parse_time(endtime, "--endtime") if endtime else None
    if start is not None and end is not None and end < start:
        fail("--endtime is before --starttime", 2)
    from gpuledger.projections.queries import acct_rows

    con = _connect(db_path(db, data))
    try:
        rows = acct_rows(
            con, start_ms=start, end_ms=end, tenant=accounts, state=state.lower() if state else None
        )
    finally:
        con.close()
    text = render(rows, fields, parsable=parsable, parsable2=parsable2, noheader=noheader)
    if text:
        typer.echo(text)
