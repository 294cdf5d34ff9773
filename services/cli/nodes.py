"""`gpuledger nodes ...`: node inventory commands (thin: calls services.node_agent)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gpuledger.projections.queries import gpus_text, nodes_rows
from gpuledger.services.cli.common import fail
from gpuledger.services.cli.output import (
    NoHeadersOption,
    Output,
    OutputOption,
    _print_rows,
    humanize_ms,
)
from gpuledger.services.cli.reading import DEFAULT_DATA, DataOption, DbOption, _query, db_path

nodes_app = typer.Typer(
    help="Nodes: the projected table (default) or this host's GPUs (discover).",
    invoke_without_command=True,
)


@nodes_app.callback()
def nodes_table(
    ctx: typer.Context,
    output: str = typer.Option("table", "-o", "--output", help="table, wide, json or yaml."),
    no_headers: bool = typer.Option(False, "--no-headers"),
    db: Path | None = typer.Option(None, "--db", help="Projection database."),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="Data directory."),
) -> None:
    """List nodes from the projection: NAME STATUS SINCE GPUS ALLOCATED FREE MODEL AGE."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        fmt = Output(output)
    except ValueError:
        fail(f"unknown output format {output!r} (table, wide, json, yaml)", 2)
    nodes_command(output=fmt, no_headers=no_headers, db=db, data=data)


@nodes_app.command()
def discover(
    output: str = typer.Option("table", "-o", "--output", help="table | json"),
    host: str | None = typer.Option(
        None, "--host", help="Prefix of host-local NVLink clique names (default: short hostname)."
    ),
) -> None:
    """Print this host's GPUs as NVML reports them (registers nothing)."""
    import msgspec

    from gpuledger.services.node_agent.nvml_discovery import NvmlUnavailable, describe
    from gpuledger.services.node_agent.nvml_discovery import discover as nvml_discover

    if output not in ("table", "json"):
        fail(f"unknown output format {output!r} (table, json)", 2)
    try:
        inventory = nvml_discover(host=host)
    except NvmlUnavailable as exc:
        fail(str(exc), 3)
    if output == "json":
        typer.echo(json.dumps(msgspec.to_builtins(inventory), indent=2))
    else:
        typer.echo(describe(inventory))


def _node_table(rows, wide):
    headers = ["NAME", "STATUS", "SINCE", "GPUS", "ALLOCATED", "FREE", "MODEL", "AGE"]
    if wide:
        headers += [
            "POOL",
            "LEAF",
            "CLIQUES",
            "RUNNING",
            "LAST-HEARTBEAT",
            "SIMULATED",
            "MAINTENANCE",
            "STATUS-REASON",
        ]
    out = []
    for r in rows:
        line = [
            r["node"],
            r["status"],
            "" if r["since_ms"] is None else humanize_ms(r["now_ms"] - r["since_ms"]),
            r["gpus"],
            gpus_text(r["allocated_milli"]),
            gpus_text(r["free_milli"] if r["status"] in ("ready", "reserved") else 0),
            r["models"] or "",
            humanize_ms(r["now_ms"] - r["registered_at_ms"]),
        ]
        if wide:
            hb = r["last_heartbeat_ms"]
            line += [
                r["pool"],
                r["leaf_switch"] or "",
                r["cliques"],
                r["running_members"],
                humanize_ms(r["now_ms"] - hb) + " ago" if hb is not None else "<never>",
                r["simulated"],
                r["maintenance"] or "",
                r["reason"] or "",
            ]
        out.append(line)
    return headers, out


def nodes_command(
    output: OutputOption = Output.table,
    no_headers: NoHeadersOption = False,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
) -> None:
    """List nodes: NAME STATUS SINCE GPUS ALLOCATED FREE MODEL AGE."""
    _print_rows(_query(db_path(db, data), nodes_rows), _node_table, output, no_headers)
