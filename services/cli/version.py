"""`gpuledger VERSION`, the installed distribution's (standard library only: the console
script answers `--version` with it before typer is imported, services/cli/entry.py)."""

from __future__ import annotations


def version_text() -> str:
    """`gpuledger VERSION`: the installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"gpuledger {version('gpuledger')}"
    except PackageNotFoundError:
        return "gpuledger (not installed)"
