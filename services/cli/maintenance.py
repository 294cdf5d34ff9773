"""`gpuledger node maintenance`: the operator's maintenance windows (issue 42; Slurm
`scontrol create reservation flags=maint`): plan one on some nodes, list them, cancel one.

A window is checked against the log as the services fold it (fold/maintenance.py's
`problem`: unknown node, end before start, an id taken, an overlap with a live window on a
node they share) before anything is published; a bad one is one line and exit 2, nothing
published. Times must say their zone (`Z`, `+02:00`) unless `--tz` names one: a window's
start is an instant, and a naive time read in the wrong zone would take nodes down at the
wrong hour.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.connect import cli_bus, may_read_log, run_on_bus
from gpuledger.services.cli.operator import CREDS_OPT, NATS_OPT, expand_nodes
from gpuledger.services.cli.output import render_table


def parse_zoned(text: str, option: str, tz: str | None) -> int:
    """An ISO time with its zone (`2026-12-08T06:00Z`, `...+01:00`), or a naive one in `tz`,
    to epoch ms; exit 2 with one line otherwise."""
    from gpuledger.services.cli.report import _zone
    from gpuledger.services.domain.inputs.reservations import zoned_ms

    try:
        return zoned_ms(text, None if tz is None else _zone(tz))
    except ValueError as exc:
        fail(f"{option}: {exc}{', or give --tz' if 'has no zone' in str(exc) else ''}", 2)


def _iso(ms: int, tz: str | None) -> str:
    from gpuledger.services.cli.report import _zone

    return datetime.fromtimestamp(ms / 1000, tz=_zone(tz or "UTC")).isoformat(timespec="minutes")


async def _folded(bus):
    """The log folded as the services fold it (acceptance rules included)."""
    from gpuledger import events as ev
    from gpuledger.services.domain.fold.acceptance import admit
    from gpuledger.services.domain.fold.ledger import Ledger
    from gpuledger.services.domain.fold.refusals import Refused

    ledger = Ledger()
    async for rec in bus.read_all():
        try:
            admit(ledger, rec.seq, ev.at_receipt(ev.decode(rec.data), rec.received_ms), rec.subject)
        except (ev.UndecodableEvent, Refused):
            continue  # dead-lettered by the services too
    return ledger


def window_rows(ledger, now_ms: int, tz: str | None) -> list[dict]:
    """The windows of the log, by start then id, with their phase at `now_ms`."""
    out = []
    for w in sorted(ledger.maintenance.values(), key=lambda w: (w.start_ms, w.window_id)):
        out.append(
            {
                "window": w.window_id,
                "nodes": list(w.nodes),
                "start": _iso(w.start_ms, tz),
                "end": _iso(w.end_ms, tz),
                "until": _iso(w.until_ms, tz),
                "phase": w.phase(now_ms),
                "reason": w.reason,
                "tenant": w.tenant,
            }
        )
    return out


def maintenance_command(
    nodes: str | None = typer.Argument(
        None, help="Nodes: names and ranges, e.g. node-[1-8],gpu-a (to plan a window)."
    ),
    start: str | None = typer.Option(
        None, "--start", help="Start: YYYY-MM-DDTHH:MM with Z or +HH:MM (or naive, with --tz)."
    ),
    end: str | None = typer.Option(None, "--end", help="End, as --start; after it."),
    tz: str | None = typer.Option(
        None, "--tz", help="IANA zone of times without an offset, and of --list's times."
    ),
    name: str | None = typer.Option(
        None, "--name", help="The window's id (default: maint-<start>-<nodes' hash>)."
    ),
    reason: str = typer.Option("", "--reason", help="Why, in your words."),
    tenant: str | None = typer.Option(
        None,
        "--tenant",
        help="Hold the nodes for this tenant: its jobs may start there; not planned down.",
    ),
    list_: bool = typer.Option(False, "--list", help="List the windows (every phase)."),
    cancel: str | None = typer.Option(None, "--cancel", help="Cancel the window of this id."),
    output: str = typer.Option("table", "-o", "--output", help="--list: table or json."),
    nats_url: str | None = NATS_OPT,
    creds: Path | None = CREDS_OPT,
) -> None:
    """Plan a maintenance window on nodes (Slurm `scontrol create reservation flags=maint`):
    until it starts, the scheduler starts on them only jobs whose time limit (without one,
    duration hint plus 50 %) ends before it (a job with neither: none; others wait with reason
    `Maintenance`, naming the window); while it is in force they are planned down (`gpuledger
    nodes`: maintenance; `gpuledger report`: planned down); at its end they return. `--list` shows the windows,
    `--cancel ID` ends one now. With `--tenant T` the window holds the nodes for T instead:
    T's jobs may start there before and during it, the others' as above, and what others run
    there leaves at its start; its nodes read `reserved` and its idle GPU time is reported as
    reserved. The operator only. Exit 2 for bad input (a malformed range
    or time, a time without a zone, end not after start or in the past, an unknown node, a
    window overlapping another on the same nodes, an unknown window to cancel), 1 for a
    credential that is not the operator's; nothing is published then."""
    from gpuledger.services.cli.connect import resolve_access
    from gpuledger.services.runtime.auth import principal_of_creds

    modes = sum((list_, cancel is not None, nodes is not None))
    if modes != 1:
        fail("give NODES with --start and --end, or --list, or --cancel ID", 2)
    if output not in ("table", "json"):
        fail(f"unknown output format {output!r} (table, json)", 2)
    if len(reason) > 500:
        fail("--reason: at most 500 characters", 2)
    if tz is not None:
        from gpuledger.services.cli.report import _zone

        _zone(tz)
    names: list[str] = []
    start_ms = end_ms = 0
    now = time.time_ns() // 1_000_000
    if nodes is not None:
        if start is None or end is None:
            fail("a window needs --start and --end", 2)
        try:
            names = expand_nodes(nodes)
        except ValueError as exc:
            fail(str(exc), 2)
        start_ms, end_ms = parse_zoned(start, "--start", tz), parse_zoned(end, "--end", tz)
        if end_ms <= start_ms:
            fail(f"--end {end} is not after --start {start}", 2)
        if end_ms <= now:
            fail(f"--end {end} is in the past", 2)
    access = resolve_access(nats_url, creds)
    if not may_read_log(access):
        principal = None if access.creds is None else principal_of_creds(access.creds)
        fail(f"only the operator plans maintenance; this credential is {principal!r}", 1)

    async def main(track):
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            ledger = await _folded(bus)
            if list_:
                return _list(ledger, now, tz, output)
            if cancel is not None:
                return await _cancel(bus, ledger, cancel, reason, now)
            return await _plan(bus, ledger, names, start_ms, end_ms, name, reason, now, tenant)
        finally:
            await bus.close()

    run_on_bus(main)


def _list(ledger, now: int, tz: str | None, output: str) -> None:
    rows = window_rows(ledger, now, tz)
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    headers = ["WINDOW", "NODES", "START", "END", "PHASE", "REASON"]
    body = [
        [r["window"], ",".join(r["nodes"]), r["start"], r["until"], r["phase"], r["reason"]]
        for r in rows
    ]
    typer.echo(render_table(headers, body) if body else "No maintenance windows.")


async def _cancel(bus, ledger, window_id: str, reason: str, now: int) -> None:
    from gpuledger import events as ev
    from gpuledger.events.ids import InvalidId, validate_token
    from gpuledger.services.domain.tooling.stamp import stamp

    try:
        validate_token("window", window_id)
    except InvalidId as exc:
        fail(str(exc), 2)
    w = ledger.maintenance.get(window_id)
    if w is None or w.cancelled_ms is not None:
        fail(f"no window {window_id!r} to cancel (UnknownWindow)", 2)
    event = stamp(
        ev.MaintenanceCancelled,
        key=f"{window_id}@{now}",
        producer="cli",
        now_ms=now,
        correlation_id=window_id,
        window_id=window_id,
        reason=reason,
    )
    await bus.publish(event)
    typer.echo(f"maintenance window {window_id} cancelled")


async def _plan(bus, ledger, names, start_ms, end_ms, name, reason, now, tenant) -> None:
    import hashlib

    from gpuledger import events as ev
    from gpuledger.events.ids import InvalidId, validate_token
    from gpuledger.services.domain.fold.maintenance import problem
    from gpuledger.services.domain.tooling.stamp import stamp

    if name is None:
        digest = hashlib.sha256(",".join(sorted(names)).encode()).hexdigest()[:6]
        stamp_ = datetime.fromtimestamp(start_ms / 1000, UTC).strftime("%Y%m%dT%H%M")
        name = f"maint-{stamp_}-{digest}"
    try:
        validate_token("window", name)
        if tenant is not None:
            validate_token("tenant", tenant)
    except InvalidId as exc:
        fail(str(exc), 2)
    if tenant is not None and tenant not in ledger.config.tenants:
        fail(f"--tenant: no tenant {tenant!r} is configured (UnknownTenant)", 2)
    event = stamp(
        ev.MaintenanceScheduled,
        key=f"{name}@{now}",
        producer="cli",
        now_ms=now,
        correlation_id=name,
        window_id=name,
        nodes=tuple(names),
        start_ms=start_ms,
        end_ms=end_ms,
        reason=reason,
        **({} if tenant is None else {"tenant": tenant}),
    )
    refusal = problem(ledger, event)
    if refusal is not None:
        fail(f"{refusal.message} ({refusal.code})", 2)
    await bus.publish(event)
    typer.echo(
        f"maintenance window {name} on {', '.join(sorted(names))} from "
        f"{_iso(start_ms, 'UTC')} to {_iso(end_ms, 'UTC')}"
        + (f", held for tenant {tenant}" if tenant else "")
    )
