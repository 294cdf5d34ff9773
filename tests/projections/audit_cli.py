"""The audit commands (`project`, `why`, `jobs`, ...) run as a user runs them, over the
projection of a simulated log (a helper of the tests here, not a test module)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from gpuledger.replay.logio import write_log
from gpuledger.services.cli.audit import register

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
app = typer.Typer()
register(app)
runner = CliRunner()


def projected_log(tmp_path: Path, log):
    """`gpuledger project --rebuild` of `log` into `<tmp_path>/data`; returns `run(*args)`,
    an audit command over that projection."""
    write_log(tmp_path / "log.jsonl", log)
    data = str(tmp_path / "data")
    r = runner.invoke(
        app, ["project", "--rebuild", "--log", str(tmp_path / "log.jsonl"), "--data", data]
    )
    assert r.exit_code == 0, r.output
    return lambda *args: runner.invoke(app, [*args, "--data", data])
