"""`gpuledger bench cli`: how long the command line takes to start, as a user meets it.

Each figure is the median wall time of N runs of the installed console script (a fresh
process each): `python -c pass` (the interpreter alone, the baseline measured in the same run),
`gpuledger --version` (goal: <= 150 ms) and `gpuledger jobs` on a small projection (goal:
<= 300 ms). The projection is the demo scenario's log, simulated and projected into a
temporary directory first (or `--db` names one). Runs alternate between the commands, so a
change of machine load touches each alike.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOALS_S = {"version": 0.150, "jobs": 0.300}
"""Issue 32's start-up goals."""


def cli_command() -> list[str]:
    """The console script next to this Python (what `pip install` puts on PATH), else
    `python -m gpuledger.services.cli`."""
    script = Path(sys.executable).with_name("gpuledger")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "gpuledger.services.cli"]


def demo_projection(work: Path) -> Path:
    """The demo scenario simulated and projected into `work/projection.duckdb`."""
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "demo.yaml"
    log, db = work / "demo.jsonl", work / "projection.duckdb"
    for args in (
        ["simulate", str(scenario), "--log", str(log), "--quiet"],
        ["project", "--log", str(log), "--db", str(db), "--json"],
    ):
        done = subprocess.run([*cli_command(), *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"gpuledger {args[0]} failed: {done.stderr.strip()[-800:]}")
    return db


def _wall(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, done.returncode


def measure(
    runs: int = 15, db: Path | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Median start-up times (seconds) of the interpreter, `--version` and `jobs`."""
    from gpuledger.replay.bench.info import machine, median

    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-cli-") as tmp:
        if db is None:
            if progress:
                progress("projecting the demo scenario ...")
            db = demo_projection(Path(tmp))
        commands = {
            "python": [sys.executable, "-c", "pass"],
            "version": [*cli_command(), "--version"],
            "jobs": [*cli_command(), "jobs", "--db", str(db)],
        }
        times: dict[str, list[float]] = {k: [] for k in commands}
        codes: dict[str, set[int]] = {k: set() for k in commands}
        for cmd in commands.values():  # one warm-up each (file cache), not counted
            _wall(cmd)
        for i in range(runs):
            for name, cmd in commands.items():
                wall, code = _wall(cmd)
                times[name].append(wall)
                codes[name].add(code)
            if progress:
                progress(f"run {i + 1}/{runs}")
    med = {k: round(median(v), 4) for k, v in times.items()}
    return {
        "runs": runs,
        "command": cli_command(),
        "median_s": med,
        "min_s": {k: round(min(v), 4) for k, v in times.items()},
        "over_python_s": {k: round(med[k] - med["python"], 4) for k in GOALS_S},
        "goal_s": GOALS_S,
        "within_goal": {k: med[k] <= goal for k, goal in GOALS_S.items()},
        "exit_codes": {k: sorted(v) for k, v in codes.items()},
        "machine": machine(),
    }
