"""`gpuledger chaos`: the chaos soak (services/runtime/chaos.py) from the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail

app = typer.Typer()


@app.command()
def chaos(
    duration: str = typer.Option(
        "10m", "--duration", help="How long the load and the faults run: seconds, or 90s, 10m, 1h."
    ),
    seed: int = typer.Option(
        1, "--seed", help="Seeds the fault schedule, the targets and the job mix."
    ),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the report (faults, invariants, details) here ('-' = stdout)."
    ),
    nats_cluster: int | None = typer.Option(
        None,
        "--nats-cluster",
        min=3,
        max=5,
        help="Run a loopback NATS cluster of N nodes (stream at N replicas) and kill or pause its nodes too.",
    ),
    data: Path | None = typer.Option(
        None,
        "--data",
        help="Keep the cluster's data (NATS store, projection, service logs in logs/) here; default: a temporary directory, removed afterwards.",
    ),
    min_faults: int | None = typer.Option(
        None, "--min-faults", min=1, help="Inject at least this many faults (default: 12 a minute)."
    ),
) -> None:
    """Run a live, authenticated cluster (every service, each simulated node agent and the
    projector its own process, supervised as `up --processes` does) under a steady mixed job
    load (gangs, MIG instances, GPU shares, a high-priority class that preempts), kill -9,
    restart and SIGSTOP/SIGCONT its processes and NATS nodes at seeded random times, then check
    from the log and the projection: no accepted job lost, no GPU or slice held twice, no
    partial gang, every running member placed, projection == rebuild, verify 0 mismatches.

    Prints each fault and each invariant's result. Exit codes: 0 every invariant holds, 1 one
    does not, 2 invalid usage."""
    from gpuledger.services.cli.chaos_soak import run_soak
    from gpuledger.services.domain.inputs.quantities import QuantityError, seconds
    from gpuledger.services.runtime.logging import configure_logging

    try:
        duration_s = seconds("duration", int(duration) if duration.isdigit() else duration)
    except QuantityError:
        fail(f"--duration: cannot read {duration!r} (give seconds, or 90s, 10m, 1h)", 2)
    if duration_s < 20:
        fail(f"--duration: {duration_s}s is too short for a soak (at least 20s)", 2)
    import os

    os.environ.setdefault("GPULEDGER_LOG_LEVEL", "warning")
    configure_logging()
    to_stdout = json_out is not None and str(json_out) == "-"

    def say(line: str) -> None:
        typer.echo(line, err=to_stdout)

    from gpuledger.services.runtime.supervisor import StartFailed

    try:
        result = run_soak(
            duration_s=duration_s,
            seed=seed,
            data=data,
            nats_nodes=nats_cluster or 1,
            say=say,
            min_faults=min_faults,
        )
    except StartFailed as exc:
        fail(f"gpuledger chaos: {exc}", 1)
    _report(result, say)
    if json_out is not None:
        text = json.dumps(result.as_dict(), indent=2)
        if to_stdout:
            typer.echo(text)
        else:
            json_out.write_text(text + "\n")
    raise typer.Exit(0 if result.ok else 1)


def _report(result: Any, say: Callable[[str], None]) -> None:
    """The soak's summary: faults, jobs and events; activity and restarts (those no fault
    accounts for apart); then PASS or FAIL per invariant, with up to three examples."""
    skipped = sum(f.outcome != "done" for f in result.faults)
    skipped_text = f" ({skipped} could not be injected)" if skipped else ""
    say(
        f"\n{len(result.faults)} faults{skipped_text}, {result.acked} of {result.submitted} jobs "
        f"acknowledged, {result.events} events, {result.wall_s:.0f}s"
    )
    say(
        "activity: "
        + ", ".join(f"{k} {v}" for k, v in result.activity.items())
        + "; restarts: "
        + ", ".join(f"{k} {v}" for k, v in result.restarts.items() if v)
    )
    if result.unplanned_restarts:
        say(
            "restarts no fault accounts for (the process died on its own; see its log): "
            + ", ".join(f"{k} {v}" for k, v in result.unplanned_restarts.items())
        )
    for name, ok in result.invariants.items():
        d = result.details.get(name, {})
        extra = "" if ok else "  " + "; ".join(str(x) for x in (d.get("examples") or [d])[:3])
        say(f"  {'PASS' if ok else 'FAIL'}  {name}{extra}")
