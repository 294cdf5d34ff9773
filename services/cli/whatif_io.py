"""What-if I/O commands: `import alibaba-openb` (trace -> log) and `compare A B` (two logs).

Thin: argument handling and output only; the work is in `replay.importers` and
`replay.compare`. services/cli/main.py mounts `import_app` and `app` on the main app.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail

import_app = typer.Typer(
    help="Import a public trace as a log of external inputs (replay it with `gpuledger replay`).",
    no_args_is_help=True,
)

# `compare`; services/cli/main.py mounts it and `import_app` (as `import`) on the `gpuledger` app.
app = typer.Typer()


@import_app.command("alibaba-openb")
def import_alibaba_openb(
    pods: Path = typer.Option(..., "--pods", help="Pod list CSV (openb_pod_list_*.csv)."),
    nodes: Path = typer.Option(..., "--nodes", help="Node list CSV (openb_node_list_*.csv)."),
    out: Path = typer.Option(..., "--out", help="Log to write (JSONL)."),
    default_duration: int | None = typer.Option(
        None, "--default-duration", help="Run time (s) of pods without time columns; default: until cancelled."),
    limit: int | None = typer.Option(None, "--limit", help="Import only the first N pods."),
    output: str = typer.Option("table", "-o", "--output", help="Summary format: table or json."),
) -> None:
    """Alibaba openb GPU trace (cluster-trace-gpu-v2023) -> JSONL log: configuration, nodes,
    submissions at creation_time, cancels of pods deleted before scheduling."""
    from gpuledger.replay.importers import TraceImportError, import_openb
    from gpuledger.replay.logio import write_log
    from gpuledger.replay.openb.trace import missing_message

    for path in (pods, nodes):
        if not path.is_file():
            fail(missing_message(path, "pass its files with --pods and --nodes"), 2)
    started = time.perf_counter()
    try:
        result = import_openb(pods, nodes, default_duration_s=default_duration, limit=limit)
    except TraceImportError as exc:
        fail(str(exc), 2)
    try:
        write_log(out, result.entries())
    except OSError as exc:
        fail(f"{out}: {exc}", 2)
    summary = {"out": str(out), **result.summary(), "wall_s": round(time.perf_counter() - started, 3)}
    if output == "json":
        typer.echo(json.dumps(summary, indent=2))
        return
    classes = ", ".join(f"{k} {v}" for k, v in summary["by_class"].items())
    shapes = ", ".join(f"{k} {v}" for k, v in summary["by_shape"].items())
    typer.echo(
        f"wrote {summary['events']} events to {out} in {summary['wall_s']:.2f}s: "
        f"{summary['nodes']} nodes ({summary['gpus']} GPUs), {summary['jobs']} jobs "
        f"({classes}; {shapes}), {summary['cancels']} cancels"
    )


@app.command("compare")
def compare_cmd(
    a: Path = typer.Argument(..., help="Baseline log (JSONL)."),
    b: Path = typer.Argument(..., help="What-if log (JSONL)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the comparison as JSON here ('-' = stdout)."),
    plots: Path | None = typer.Option(None, "--plots", help="Write PNG charts into this directory."),
    output: str = typer.Option("table", "-o", "--output", help="table or json (on stdout)."),
) -> None:
    """Side-by-side metrics of two logs: allocation and SM activity, wait p50/p99 per SLO
    class, preemptions and lost GPU-hours, fairness (Jain), completion times; DELTA = B - A."""
    from gpuledger.replay.compare import CompareError, compare, load, rows

    if output not in ("table", "json"):
        fail(f"-o must be table or json, not {output!r}", 2)
    try:
        sa, sb = load(a), load(b)
    except CompareError as exc:
        fail(str(exc), 2)
    result = compare(sa, sb)
    written: list[Path] = []
    if plots is not None:
        from gpuledger.replay.plots import write_plots

        written = write_plots(sa, sb, plots, labels=(f"A ({a.name})", f"B ({b.name})"))
        result["plots"] = [str(p) for p in written]
    if json_out is not None:
        text = json.dumps(result, indent=2)
        if str(json_out) == "-":
            sys.stdout.write(text + "\n")
        else:
            json_out.write_text(text + "\n")
    if output == "json":
        if str(json_out) != "-":
            sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    if str(json_out) == "-":
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"A = {a}   B = {b}", title_justify="left")
    table.add_column("METRIC")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    table.add_column("DELTA", justify="right")
    for row in rows(result):
        table.add_row(*row)
    console = Console()
    console.print(table)
    for p in written:
        console.print(f"wrote {p}")
