"""`gpuledger nodes ...`: node inventory commands (thin: calls services.node_agent)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail

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
    data: Path = typer.Option(Path(".gpuledger"), "--data", help="Data directory."),
) -> None:
    """List nodes from the projection: NAME STATUS GPUS ALLOCATED FREE MODEL AGE."""
    if ctx.invoked_subcommand is not None:
        return
    from gpuledger.services.cli.audit import Output, nodes_command

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
