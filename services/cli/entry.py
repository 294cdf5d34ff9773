"""The `gpuledger` console script (and `python -m gpuledger.services.cli`).

`gpuledger --version` is answered here, before typer, rich or any command module is imported
(goal: <= 150 ms, measured by `gpuledger bench cli`); everything else goes to the typer app in
services/cli/main.py, whose command modules import their heavy dependencies (duckdb, pyarrow,
numpy, matplotlib, starlette) only inside the commands that use them
(tests/cli/test_startup.py checks both).

The read commands people run most (`jobs`, `why`, `sql`, `tenants`) start through a one-command
app built from the same function (`LIGHT`), skipping the import of every other command module
and typer's conversion of the whole tree; tests/cli/test_startup.py checks that each has the
same parameters either way.

A command whose install extra is missing (`gpuledger up` on the light client) exits with one
line naming the extra to install (services/cli/extras.py), checked before the command runs or
at the import that fails.
"""

from __future__ import annotations

import os
import sys

from gpuledger.services.cli.version import version_text

LIGHT: dict[str, tuple[str, str]] = {
    "jobs": ("gpuledger.services.cli.jobs", "jobs_command"),
    "why": ("gpuledger.services.cli.why", "why_command"),
    "sql": ("gpuledger.services.cli.sql", "sql_command"),
    "tenants": ("gpuledger.services.cli.tenants", "tenants_command"),
}
"""Commands started without the rest of the tree: name -> (module, function), the function
services/cli/main.py mounts under that name."""
COMPLETE_ENV = "_GPULEDGER_COMPLETE"
"""Set by the shell completion scripts: completion always goes through the whole tree."""


def light_app(name: str):
    """A typer app holding only the command `name` of LIGHT, as `gpuledger NAME`."""
    import importlib

    import typer

    from gpuledger.services.cli.helptext import reflow_tree

    module, function = LIGHT[name]
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def gpuledger() -> None:
        """gpuledger: an event-sourced GPU cluster scheduler."""

    app.command(name)(getattr(importlib.import_module(module), function))
    return reflow_tree(app)


def main(argv: list[str] | None = None) -> None:
    """Run the command line on `argv` (default: the process's arguments)."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        sys.stdout.write(version_text() + "\n")
        return
    from gpuledger.projections.served import ServedError
    from gpuledger.projections.served import failure as served_failure
    from gpuledger.services.cli import extras

    refusal = extras.check_before(args)
    if refusal is not None:
        sys.stderr.write(f"error: {refusal}\n")
        raise SystemExit(extras.EXIT_MISSING_EXTRA)
    try:
        if args and args[0] in LIGHT and COMPLETE_ENV not in os.environ:
            light_app(args[0])(args=args, prog_name="gpuledger")
            return
        from gpuledger.services.cli.main import app

        app(args=args)
    except ServedError as exc:  # a read through the projector any command made (sql, jobs, why)
        line, code = served_failure(exc)
        sys.stderr.write(f"error: {line}\n")
        raise SystemExit(code) from None
    except ModuleNotFoundError as exc:
        refusal = extras.missing_extra(args, exc)
        if refusal is None:
            raise
        sys.stderr.write(f"error: {refusal}\n")
        raise SystemExit(extras.EXIT_MISSING_EXTRA) from None
