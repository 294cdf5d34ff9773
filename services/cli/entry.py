"""The `gpuledger` console script (and `python -m gpuledger.services.cli`).

`gpuledger --version` is answered here, before typer, rich or any command module is imported
(goal: <= 150 ms, measured by `gpuledger bench cli`); everything else goes to the typer app in
services/cli/main.py, whose command modules import their heavy dependencies (duckdb, pyarrow,
numpy, matplotlib, starlette) only inside the commands that use them
(tests/cli/test_startup.py checks both).
"""

from __future__ import annotations

import sys

from gpuledger.services.cli.version import version_text


def main(argv: list[str] | None = None) -> None:
    """Run the command line on `argv` (default: the process's arguments)."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        sys.stdout.write(version_text() + "\n")
        return
    from gpuledger.services.cli.main import app

    app(args=args)
