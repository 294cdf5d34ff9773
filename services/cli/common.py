"""Shared helpers of the CLI modules: one-line errors and exit codes (no commands here)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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


def read_doc(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    from gpuledger.services.runtime.documents import DocumentError, load_document

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        doc = load_document(text) or {}
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror}", 2)
    except UnicodeDecodeError as exc:
        fail(f"{path}: cannot read: {exc}", 2)
    except DocumentError as exc:
        fail(f"{path}: {exc}", 2)
    if not isinstance(doc, dict):
        fail(f"{path}: (top level): expected a mapping of keys, got {type(doc).__name__}", 2)
    return doc
