"""`gpuledger nodes ...`: node inventory commands (thin: calls services.node_agent)."""

from __future__ import annotations

import json

import typer

from services.cli.main import app, fail

nodes_app = typer.Typer(help="Node inventory.", no_args_is_help=True)
app.add_typer(nodes_app, name="nodes")


@nodes_app.command()
def discover(
    output: str = typer.Option("table", "-o", "--output", help="table | json"),
    host: str | None = typer.Option(None, "--host", help="Prefix of host-local NVLink clique names (default: short hostname)."),
) -> None:
    """Print this host's GPUs as NVML reports them (registers nothing)."""
    import msgspec

    from services.node_agent.nvml_discovery import NvmlUnavailable, describe
    from services.node_agent.nvml_discovery import discover as nvml_discover

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
