"""The `gpuledger` command line: a thin layer that parses arguments and calls the packages."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gpuledger.services.cli import (
    acct,
    apply,
    audit,
    auth,
    bench,
    chaos,
    check,
    demo,
    gateway,
    maintenance,
    metrics,
    nodes,
    operator,
    report,
    run,
    schedules,
    status,
    submit,
    ui,
    up,
    users,
    whatif,
    whatif_io,
)
from gpuledger.services.cli.common import fail, fail_input
from gpuledger.services.cli.helptext import reflow_tree


def _version(value: bool) -> None:
    """Eager `--version`: print `gpuledger VERSION` (the installed distribution's) and exit."""
    if value:
        from gpuledger.services.cli.version import version_text

        typer.echo(version_text())
        raise typer.Exit()


app = typer.Typer(
    help="gpuledger: an event-sourced GPU cluster scheduler.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


@app.callback()
def main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print the installed version and exit.",
    ),
) -> None:
    """gpuledger: an event-sourced GPU cluster scheduler."""


@app.command()
def schema(
    config: bool = typer.Option(
        False,
        "--config",
        help="Print the JSON Schema of cluster configuration, "
        "scenario and job files instead (for yaml-language-server).",
    ),
    projection: bool = typer.Option(
        False,
        "--projection",
        help="Print every table, view and column of "
        "the DuckDB projection with its comment (Markdown) instead.",
    ),
    update: Path | None = typer.Option(
        None,
        "--update",
        help="With --projection: rewrite the generated "
        "section of this Markdown file (docs/projections.md) instead of printing.",
    ),
) -> None:
    """Print the JSON Schema of every event a client may publish (or, with --config, of the
    files users write; with --projection, the projection's columns)."""
    if projection:
        from gpuledger.projections.catalog import catalog_markdown, update_doc

        if update is None:
            typer.echo(catalog_markdown())
            return
        try:
            changed = update_doc(update)
        except (OSError, ValueError) as exc:
            fail(str(exc), 2)
        typer.echo(f"{update}: {'updated' if changed else 'already up to date'}", err=True)
        return
    if config:
        from gpuledger.services.domain.inputs.schema import file_schema

        typer.echo(json.dumps(file_schema(), indent=2, sort_keys=True))
        return
    from gpuledger.events.schema import client_schema

    typer.echo(json.dumps(client_schema(), indent=2, sort_keys=True))


@app.command()
def simulate(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the JSON report here ('-' = stdout)."
    ),
    log: Path | None = typer.Option(None, "--log", help="Write the event log (JSONL) here."),
    until: float | None = typer.Option(None, help="Stop at this virtual time (seconds)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No timeline on stdout."),
    check: bool = typer.Option(
        False,
        "--check",
        help=(
            "Checking mode: digest the state around every decide and re-run it without caches; "
            "stop with exit 1 at the first difference."
        ),
    ),
) -> None:
    """Run a scenario through the deciders on a virtual clock."""
    from gpuledger.events.sentences import timeline_line
    from gpuledger.replay.logio import write_log
    from gpuledger.replay.metrics import pct_text
    from gpuledger.replay.report import report
    from gpuledger.replay.scenario import ScenarioError, load
    from gpuledger.replay.simulator import simulate as run_sim

    try:
        sc = load(scenario)
    except ScenarioError as exc:
        fail_input(exc)
    show = not quiet and str(json_out) != "-"

    def echo(seq, subject, event) -> None:
        line = timeline_line(event)
        if line is not None:
            typer.echo(line)

    from gpuledger.replay.checking import DecideDrift

    try:
        sim = run_sim(
            sc,
            until_ms=None if until is None else round(until * 1000),
            on_event=echo if show else None,
            check=check,
        )
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
        from gpuledger.replay.report import jobs_text

        m = data["metrics"]
        typer.echo(
            f"\n{jobs_text(data['jobs'])}; {data['events']} events; t={data['final_time_s']:.0f}s; "
            f"preemptions {m['preemptions']}, lost {m['lost_gpu_hours']:.3f} GPU-h, "
            f"allocation {pct_text(m['gpu_allocation_pct'])}"
        )


# The whole command tree, mounted explicitly: a module never registers itself on import.
app.add_typer(check.app)  # check
app.add_typer(chaos.app)  # chaos
app.add_typer(run.app)  # run
app.add_typer(apply.app)  # apply
app.add_typer(up.app)  # up
app.add_typer(status.app)  # status
app.add_typer(submit.app)  # submit, cancel, scale
app.add_typer(demo.app)  # demo
app.add_typer(operator.app)  # hold, release, requeue, update, top
operator.node_app.command("maintenance")(maintenance.maintenance_command)
app.add_typer(operator.node_app, name="node")  # node cordon, drain, uncordon, maintenance
app.add_typer(metrics.app)  # metrics
app.add_typer(whatif.app)  # export, verify, replay
app.add_typer(whatif_io.app)  # compare
app.add_typer(schedules.app)  # schedules
audit_app = typer.Typer()
audit.register(audit_app, nodes=False)  # sql, why, jobs, tenants, project
app.add_typer(audit_app)
app.command("acct")(acct.acct)
app.command("report")(report.report_command)
app.command("users")(users.users_command)
app.command("ui")(ui.ui)
app.add_typer(nodes.nodes_app, name="nodes")
app.add_typer(whatif_io.import_app, name="import")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(auth.auth_app, name="auth")
app.add_typer(gateway.gateway_app, name="gateway")

PANELS: dict[str, tuple[str, ...]] = {
    "Run": ("up", "run", "demo", "ui", "gateway", "metrics"),
    "Submit": (
        "submit",
        "cancel",
        "scale",
        "hold",
        "release",
        "requeue",
        "update",
        "top",
        "check",
        "schema",
    ),
    "Inspect": ("jobs", "why", "sql", "tenants", "users", "nodes", "acct", "report"),
    "Replay": (
        "simulate",
        "replay",
        "whatif",
        "calibrate",
        "compare",
        "export",
        "import",
        "verify",
    ),
    "Operate": ("status", "node", "apply", "schedules", "auth", "project", "bench", "chaos"),
}
"""`gpuledger --help` groups the commands under these panels (tests/cli/test_help.py checks
that every command has exactly one)."""


def group_commands(app: typer.Typer, panels: dict[str, tuple[str, ...]]) -> None:
    """Set each top-level command's `rich_help_panel` from `panels`, and list the commands in
    the panels' order (help shows the panels in the order of their first command). Sub-apps
    mounted without a name are flattened: their commands are top-level commands."""
    panel_of = {name: panel for panel, names in panels.items() for name in names}
    order = {name: i for i, name in enumerate(n for names in panels.values() for n in names)}

    def command_name(info) -> str:
        return info.name or info.callback.__name__.replace("_", "-")

    commands = list(app.registered_commands)
    groups = []
    for group in app.registered_groups:
        if isinstance(group.name, str):
            group.rich_help_panel = panel_of.get(group.name)
            groups.append(group)
        else:  # mounted without a name: its commands sit at the top level
            commands += group.typer_instance.registered_commands
    for info in commands:
        info.rich_help_panel = panel_of.get(command_name(info))
    commands.sort(key=lambda info: order.get(command_name(info), len(order)))
    app.registered_commands, app.registered_groups = commands, groups


group_commands(app, PANELS)
reflow_tree(app)
