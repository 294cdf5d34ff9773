"""`gpuledger bench replay`: events/s of a what-if replay of the openb trace, and the digest of
its output (so a speed change that alters a decision shows).

Each run is a fresh process that imports the trace, then times `external_inputs` + `replay`
(what `gpuledger replay` reports as its own time), then hashes the JSONL log it would write.
Each run also times the whole command as a user meets it: `gpuledger replay LOG --out OUT` in
a fresh process (start-up, reading the log, the replay, writing, the fidelity report) on the
trace imported once by `gpuledger import alibaba-openb`, wall and CPU seconds of that process
(`command`). With `baseline` (the Python of another checkout, e.g.
`../base/.venv/bin/python`), the same measurements run in that checkout's code on the same
imported log, alternating A B A B, and the ratio is taken pair by pair: a figure and its
baseline from the same minutes of a shared, noisy machine. Rates are given per wall second
(the goal's unit) and per CPU second of the process (less sensitive to other work on the
machine). The measurement only uses `import_openb`, `external_inputs`, `replay`,
`write_log` and the `import` and `replay` commands, which any checkout since the importer has.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuledger.replay.bench.info import machine, median

MEASURE = r"""
import hashlib, json, sys, tempfile, time
from pathlib import Path
from gpuledger.replay.importers import import_openb
from gpuledger.replay.logio import write_log
from gpuledger.replay.whatif import external_inputs, replay
pods, nodes = sys.argv[1], sys.argv[2]
entries = import_openb(pods, nodes).entries()
started, cpu = time.perf_counter(), time.process_time()
sim = replay(external_inputs(entries))
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
with tempfile.TemporaryDirectory() as d:
    out = Path(d) / "replay.jsonl"
    write_log(out, sim.log)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
print(json.dumps({"inputs": len(entries),
                  "events": len(sim.log), "seconds": elapsed,
                  "events_per_s": len(sim.log) / max(elapsed, 1e-9), "cpu_seconds": cpu,
                  "events_per_cpu_s": len(sim.log) / max(cpu, 1e-9), "sha256": digest}))
"""


def measure(python: str, pods: Path, nodes: Path) -> dict[str, Any]:
    """One replay in a fresh process of `python` (whichever gpuledger it has installed)."""
    done = subprocess.run(
        [python, "-c", MEASURE, str(pods), str(nodes)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"replay run with {python} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def import_trace(pods: Path, nodes: Path, out: Path) -> None:
    """`gpuledger import alibaba-openb` of the trace into `out` (and its observation file)."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", "import", "alibaba-openb"]
        + ["--pods", str(pods), "--nodes", str(nodes), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"importing the trace failed: {done.stderr.strip()[-2000:]}")


def measure_command(python: str, log: Path) -> dict[str, float]:
    """`gpuledger replay LOG` of `python`'s checkout as a user runs it, one fresh process:
    its wall seconds, its CPU seconds (user + system) and events written per wall second."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "replay.jsonl"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [python, "-m", "gpuledger.services.cli", "replay", str(log), "--out", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"`replay` with {python} failed: {done.stderr.strip()[-2000:]}")
        with out.open("rb") as f:
            events = sum(1 for _ in f)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": wall, "cpu_seconds": cpu, "events_per_s": events / max(wall, 1e-9)}


def spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


def profile_once(pods: Path, nodes: Path, out: Path) -> None:
    """One replay in this process under cProfile; the stats go to `out` (`python -m pstats`)."""
    import cProfile

    from gpuledger.replay.importers import import_openb
    from gpuledger.replay.whatif import external_inputs, replay

    entries = import_openb(pods, nodes).entries()
    prof = cProfile.Profile()
    prof.enable()
    try:
        replay(external_inputs(entries))
    finally:
        prof.disable()
        prof.dump_stats(str(out))


def run(
    pods: Path,
    nodes: Path,
    runs: int = 3,
    baseline: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda m: None)
    mine: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-replay-") as tmp:
        log = Path(tmp) / "openb.jsonl"
        import_trace(pods, nodes, log)
        for i in range(runs):
            mine.append(
                {
                    **measure(sys.executable, pods, nodes),
                    "command": measure_command(sys.executable, log),
                }
            )
            say(
                f"run {i + 1}/{runs}: {mine[-1]['events_per_s']:,.0f} events/s "
                f"({mine[-1]['events_per_cpu_s']:,.0f} per CPU second); the command "
                f"{mine[-1]['command']['seconds']:.2f} s"
            )
            if baseline is not None:
                base.append(
                    {**measure(baseline, pods, nodes), "command": measure_command(baseline, log)}
                )
                say(
                    f"  baseline: {base[-1]['events_per_s']:,.0f} events/s "
                    f"({base[-1]['events_per_cpu_s']:,.0f} per CPU second); the command "
                    f"{base[-1]['command']['seconds']:.2f} s"
                )
    rates = [m["events_per_s"] for m in mine]
    cpu_rates = [m["events_per_cpu_s"] for m in mine]
    result: dict[str, Any] = {
        "benchmark": "replay",
        "pods": str(pods),
        "nodes": str(nodes),
        "runs": runs,
        "inputs": mine[0]["inputs"],
        "events": mine[0]["events"],
        "events_per_s": spread(rates),
        "events_per_cpu_s": spread(cpu_rates),
        "seconds_median": median([m["seconds"] for m in mine]),
        "command": {k: spread([m["command"][k] for m in mine]) for k in mine[0]["command"]},
        "sha256": mine[0]["sha256"],
        "deterministic": len({m["sha256"] for m in mine}) == 1,
        "goal_events_per_s": 50_000,
        "machine": machine(),
    }
    if baseline is not None:
        brates = [b["events_per_s"] for b in base]
        bcpu = [b["events_per_cpu_s"] for b in base]
        result["baseline"] = {
            "python": baseline,
            "events_per_s": spread(brates),
            "events_per_cpu_s": spread(bcpu),
            "command": {k: spread([b["command"][k] for b in base]) for k in base[0]["command"]},
            "sha256": base[0]["sha256"],
            "same_output": base[0]["sha256"] == mine[0]["sha256"],
            "ratio_median": median([a / b for a, b in zip(rates, brates, strict=True)]),
            "cpu_ratio_median": median([a / b for a, b in zip(cpu_rates, bcpu, strict=True)]),
            # the whole command, pair by pair: baseline seconds / these seconds (> 1: faster)
            "command_ratio": spread(
                [
                    b["command"]["seconds"] / m["command"]["seconds"]
                    for m, b in zip(mine, base, strict=True)
                ]
            ),
            "command_cpu_ratio": spread(
                [
                    b["command"]["cpu_seconds"] / m["command"]["cpu_seconds"]
                    for m, b in zip(mine, base, strict=True)
                ]
            ),
        }
    return result
