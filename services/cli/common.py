"""Shared helpers of the CLI modules: one-line errors and exit codes (no commands here)."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 1) -> None:
    """Print `error: MESSAGE` on stderr and exit with CODE (1 by default)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def fail_input(exc, file: object = None) -> None:
    """Print an InputError's problems, one `error: FILE: key.path: what` line each; exit 2."""
    for line in exc.lines(None if file is None else str(file)):
        typer.echo(line, err=True)
    raise typer.Exit(2)
