"""`gpuledger bench cli`: how long the command line takes to start, as a user meets it.

Each figure is the median wall time of N runs of the installed console script (a fresh
process each): `python -c pass` (the interpreter alone, the baseline measured in the same run),
`gpuledger --version` (goal: <= 150 ms), `gpuledger jobs` on a small projection (goal:
<= 300 ms) and `gpuledger jobs` on a projection of 100,000 jobs read through the process that
holds it for writing, as through a running projector (`jobs_100k`, goal: <= 300 ms; its default
`--limit` of 100 rows). The small projection is the demo scenario's log, simulated and
projected into a temporary directory first (or `--db` names one); the large one is the
projector benchmark's synthetic log folded until it holds that many jobs (or `--large-db`).
Runs alternate between the commands, so a change of machine load touches each alike;
`jobs_100k_direct` (the same command opening the file itself, no projector running) is
measured in a phase of its own before the serving process starts.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOALS_S = {"version": 0.150, "jobs": 0.300, "jobs_100k": 0.300}
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


def large_projection(path: Path, jobs: int = 100_000) -> dict[str, Any]:
    """Fold the projector benchmark's synthetic log into `path` until it holds `jobs` jobs
    (in a child process: `python -m gpuledger.replay.bench.projector jobs PATH N`)."""
    import json

    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.replay.bench.projector", "jobs", str(path), str(jobs)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the large projection failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def serve(db: Path) -> subprocess.Popen:
    """A process holding `db` for writing and serving reads of it, as a running projector
    does (`python -m gpuledger.projections.serving`); stop it by closing its stdin."""
    p = subprocess.Popen(
        [sys.executable, "-m", "gpuledger.projections.serving", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline() if p.stdout else ""
    if not line.startswith("serving "):
        p.kill()
        p.wait()
        raise RuntimeError(f"the serving process did not start (exit {p.poll()})")
    return p


def _wall(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0, done.returncode


def _alternate(
    commands: dict[str, list[str]],
    runs: int,
    times: dict[str, list[float]],
    codes: dict[str, set[int]],
    progress: Callable[[str], None] | None,
    env: dict[str, str] | None = None,
) -> None:
    for cmd in commands.values():  # one warm-up each (file cache), not counted
        _wall(cmd, env)
    for i in range(runs):
        for name, cmd in commands.items():
            wall, code = _wall(cmd, env)
            times.setdefault(name, []).append(wall)
            codes.setdefault(name, set()).add(code)
        if progress:
            progress(f"run {i + 1}/{runs}")


def measure(
    runs: int = 15,
    db: Path | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    large_jobs: int = 100_000,
    large_db: Path | None = None,
) -> dict[str, Any]:
    """Median start-up times (seconds) of the interpreter, `--version` and `jobs` (and, unless
    `large_jobs` is 0, of `jobs` over a projection of that many jobs)."""
    import os

    from gpuledger.replay.bench.info import machine, median

    times: dict[str, list[float]] = {}
    codes: dict[str, set[int]] = {}
    large: dict[str, Any] = {}
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
        if large_jobs or large_db is not None:
            if large_db is None:
                if progress:
                    progress(f"projecting {large_jobs:,} synthetic jobs ...")
                large_db = Path(tmp) / "large.duckdb"
                large["built"] = large_projection(large_db, large_jobs)
            big = [*cli_command(), "jobs", "--db", str(large_db)]
            direct = {**os.environ, "GPULEDGER_DIRECT_READS": "1"}
            _alternate({"jobs_100k_direct": big}, max(3, runs // 3), times, codes, None, direct)
            holder = serve(large_db)
            try:
                _alternate({**commands, "jobs_100k": big}, runs, times, codes, progress)
            finally:
                if holder.stdin:
                    holder.stdin.close()
                holder.wait(30)
            large["db"] = str(large_db)
        else:
            _alternate(commands, runs, times, codes, progress)
    med = {k: round(median(v), 4) for k, v in times.items()}
    goals = {k: g for k, g in GOALS_S.items() if k in med}
    return {
        "runs": runs,
        "command": cli_command(),
        "median_s": med,
        "min_s": {k: round(min(v), 4) for k, v in times.items()},
        "over_python_s": {k: round(med[k] - med["python"], 4) for k in goals},
        "goal_s": goals,
        "within_goal": {k: med[k] <= goal for k, goal in goals.items()},
        "exit_codes": {k: sorted(v) for k, v in codes.items()},
        "large_projection": large or None,
        "machine": machine(),
    }
