"""`gpuledger bench replay`: events/s of a what-if replay of the openb trace, and the digest of
its output (so a speed change that alters a decision shows).

Each run is a fresh process that imports the trace, then times `external_inputs` + `replay`
(what `gpuledger replay` times), then hashes the JSONL log it would write. With `baseline`
(the Python of another checkout, e.g. `../base/.venv/bin/python`), the same measurement runs
in that checkout's code, alternating A B A B, and the ratio is taken pair by pair: a figure
and its baseline from the same minutes of a shared, noisy machine. Rates are given per wall
second (the goal's unit) and per CPU second of the process (less sensitive to other work on
the machine). Each side says how many of the modules it ran were compiled (`compiled_modules`,
0 for the pure-Python build; setup.py). The measurement only uses
`import_openb`, `external_inputs`, `replay` and `write_log`, which any checkout since the
importer has.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuledger.replay.bench.info import machine, median

MEASURE = r"""
import hashlib, json, sys, tempfile, time
from importlib.machinery import EXTENSION_SUFFIXES
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
compiled = [n for n, m in sys.modules.items() if n.startswith("gpuledger.")
            and str(getattr(m, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))]
print(json.dumps({"compiled_modules": len(compiled), "inputs": len(entries),
                  "events": len(sim.log), "seconds": elapsed,
                  "events_per_s": len(sim.log) / max(elapsed, 1e-9), "cpu_seconds": cpu,
                  "events_per_cpu_s": len(sim.log) / max(cpu, 1e-9), "sha256": digest}))
"""


def build(m: dict[str, Any]) -> str:
    n = m.get("compiled_modules", 0)
    return f"compiled build, {n} modules" if n else "pure Python"


def measure(python: str, pods: Path, nodes: Path) -> dict[str, Any]:
    """One replay in a fresh process of `python` (whichever gpuledger it has installed)."""
    done = subprocess.run(
        [python, "-c", MEASURE, str(pods), str(nodes)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"replay run with {python} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    for i in range(runs):
        mine.append(measure(sys.executable, pods, nodes))
        say(
            f"run {i + 1}/{runs}: {mine[-1]['events_per_s']:,.0f} events/s "
            f"({mine[-1]['events_per_cpu_s']:,.0f} per CPU second; {build(mine[-1])})"
        )
        if baseline is not None:
            base.append(measure(baseline, pods, nodes))
            say(
                f"  baseline: {base[-1]['events_per_s']:,.0f} events/s "
                f"({base[-1]['events_per_cpu_s']:,.0f} per CPU second; {build(base[-1])})"
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
        "compiled_modules": mine[0]["compiled_modules"],
        "events_per_s": {"median": median(rates), "min": min(rates), "max": max(rates)},
        "events_per_cpu_s": {
            "median": median(cpu_rates),
            "min": min(cpu_rates),
            "max": max(cpu_rates),
        },
        "seconds_median": median([m["seconds"] for m in mine]),
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
            "compiled_modules": base[0]["compiled_modules"],
            "events_per_s": {"median": median(brates), "min": min(brates), "max": max(brates)},
            "events_per_cpu_s": {"median": median(bcpu), "min": min(bcpu), "max": max(bcpu)},
            "sha256": base[0]["sha256"],
            "same_output": base[0]["sha256"] == mine[0]["sha256"],
            "ratio_median": median([a / b for a, b in zip(rates, brates, strict=True)]),
            "cpu_ratio_median": median([a / b for a, b in zip(cpu_rates, bcpu, strict=True)]),
        }
    return result
