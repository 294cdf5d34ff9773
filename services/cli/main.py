"""The `gpuledger` command line: a thin layer that parses arguments and calls the packages."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(
    help="gpuledger: an event-sourced GPU cluster scheduler.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def fail_input(exc, file: object = None) -> None:
    """Print an InputError's problems, one `error: FILE: key.path: what` line each; exit 2."""
    for line in exc.lines(None if file is None else str(file)):
        typer.echo(line, err=True)
    raise typer.Exit(2)


@app.command()
def schema(
    config: bool = typer.Option(False, "--config", help="Print the JSON Schema of cluster configuration, "
                                "scenario and job files instead (for yaml-language-server)."),
) -> None:
    """Print the JSON Schema of every event a client may publish (or, with --config, of the
    files users write)."""
    if config:
        from services.domain.inputs import file_schema

        typer.echo(json.dumps(file_schema(), indent=2, sort_keys=True))
        return
    from events.schema import client_schema

    typer.echo(json.dumps(client_schema(), indent=2, sort_keys=True))


@app.command()
def simulate(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the JSON report here ('-' = stdout)."),
    log: Path | None = typer.Option(None, "--log", help="Write the event log (JSONL) here."),
    until: float | None = typer.Option(None, help="Stop at this virtual time (seconds)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No timeline on stdout."),
    check: bool = typer.Option(False, "--check", help=(
        "Checking mode: digest the state around every decide and re-run it without caches; "
        "stop with exit 1 at the first difference.")),
) -> None:
    """Run a scenario through the deciders on a virtual clock."""
    from replay.logio import write_log
    from replay.metrics import pct_text
    from replay.report import report
    from replay.scenario import ScenarioError, load
    from replay.simulator import simulate as run_sim
    from replay.timeline import format_line

    try:
        sc = load(scenario)
    except ScenarioError as exc:
        fail_input(exc)
    show = not quiet and str(json_out) != "-"

    def echo(seq, subject, event) -> None:
        line = format_line(event)
        if line is not None:
            typer.echo(line)

    from replay.checking import DecideDrift

    try:
        sim = run_sim(sc, until_ms=None if until is None else round(until * 1000),
                      on_event=echo if show else None, check=check)
    except DecideDrift as exc:
        fail(f"check: {exc}")
    data = report(sim.ledger, sim.log, sim.now_ms)
    if log is not None:
        write_log(log, sim.log)
    if json_out is not None:
        text = json.dumps(data, indent=2)
        if str(json_out) == "-":
            typer.echo(text)
        else:
            json_out.write_text(text)
    if show:
        m = data["metrics"]
        states: dict[str, int] = {}
        for j in data["jobs"]:
            states[str(j["state"])] = states.get(str(j["state"]), 0) + 1
        typer.echo(
            f"\n{len(data['jobs'])} jobs {states}; {data['events']} events; t={data['final_time_s']:.0f}s; "
            f"preemptions {m['preemptions']}, lost {m['lost_gpu_hours']:.3f} GPU-h, "
            f"allocation {pct_text(m['gpu_allocation_pct'])}"
        )


# Each module registers its commands on `app` when imported.
from services.cli import audit as _audit  # noqa: E402
from services.cli import check as _check  # noqa: E402,F401
from services.cli import live as _live  # noqa: E402,F401
from services.cli import nodes as _nodes  # noqa: E402,F401
from services.cli import whatif as _whatif  # noqa: E402,F401
from services.cli import whatif_io as _whatif_io  # noqa: E402,F401
from services.cli.bench import bench_app  # noqa: E402

_audit.register(app, nodes=False)
app.add_typer(bench_app, name="bench")
