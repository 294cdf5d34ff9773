"""`gpuledger demo`: embedded NATS, a small simulated cluster and a scripted scenario played
live, with a readable timeline at the end."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer

from gpuledger.projections.projector_process import in_process_projector
from gpuledger.services.cli.common import fail, fail_input, read_doc
from gpuledger.services.cli.connect import (
    DEFAULT_DATA,
    cli_bus,
)
from gpuledger.services.runtime.cluster import Cluster
from gpuledger.services.runtime.embedded import embedded

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


DEMO_MARK = "DEMO"


def prepare_demo_data(data: Path) -> None:
    """The demo starts from nothing: it clears a previous demo's store and projection in
    `data`, and refuses to touch a directory holding anything else."""
    import shutil

    store, db, mark = data / "nats", data / "projection.duckdb", data / DEMO_MARK
    if (store.exists() or db.exists()) and not mark.exists():
        fail(
            f"{data} holds a store that a demo did not create; use --data with another directory", 2
        )
    shutil.rmtree(store, ignore_errors=True)
    for f in (db, data / "projection.duckdb.wal"):
        f.unlink(missing_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    mark.write_text("created by gpuledger demo; the next demo run replaces this directory's data\n")


@app.command()
def demo(
    processes: bool = typer.Option(
        False, "--processes", help="Run each service as its own OS process."
    ),
    scenario_file: Path | None = typer.Option(
        None, "--scenario", help="Another scenario to play live."
    ),
    timeout: float = typer.Option(90.0, help="Give up after this many seconds."),
    data: Path = typer.Option(
        DEFAULT_DATA, "--data", help="Keeps the NATS store and the projection here."
    ),
) -> None:
    """Embedded NATS, a small simulated cluster, a scripted scenario with a preemption, and
    a readable timeline at the end. Afterwards `gpuledger why`, `jobs` and `sql` read its
    projection in --data (a previous demo's data there is replaced)."""
    import asyncio

    from gpuledger import events as ev
    from gpuledger.events.sentences import timeline_line
    from gpuledger.projections.store import wait_for_projection
    from gpuledger.replay import live_player
    from gpuledger.replay.report import job_rows
    from gpuledger.replay.scenario import ScenarioError, load
    from gpuledger.services.runtime.logging import configure_logging

    os.environ.setdefault("GPULEDGER_LOG_LEVEL", "warning")
    configure_logging()
    path = (
        scenario_file or Path(__file__).resolve().parents[2] / "replay" / "scenarios" / "demo.yaml"
    )
    try:
        sc = load(path)
    except ScenarioError as exc:
        fail_input(exc)
    doc = read_doc(path)
    job_ids = [e.job.job_id for _, e in sc.inputs if isinstance(e, ev.JobSubmitted)]

    prepare_demo_data(data)

    async def main() -> None:
        with embedded(data, keep=True, doc=doc) as server:
            typer.echo(
                f"embedded NATS at {server.url} (authentication on: identities in {data / 'auth'}); "
                f"playing scenario {sc.name!r} live..."
            )
            bus = await cli_bus(server.access("admin"))
            cluster = Cluster(
                server.access("admin"),
                path,
                doc,
                processes,
                data=data,
                projector=in_process_projector,
            )
            try:
                await live_player.publish_config(bus, sc)
                await cluster.start()
                await live_player.wait_for_nodes(bus, [n.name for n in sc.nodes], 30)
                started = time.monotonic()
                await live_player.play(bus, sc)
                ledger = await live_player.wait_for_jobs(bus, job_ids, timeout)
                _, log = await live_player.fold(bus)
                origin = min(
                    (e.occurred_at_ms for _, _, e in log if isinstance(e, ev.JobSubmitted)),
                    default=0,
                )
                typer.echo("\nTIMELINE")
                for _, _, e in log:
                    line = timeline_line(e, origin)
                    if line is not None:
                        typer.echo(line)
                typer.echo("\nSUMMARY")
                typer.echo(
                    f"{'JOB':<12}{'TENANT':<10}{'CLASS':<12}{'STATE':<11}{'PLACED':>7}{'PREEMPTED':>10}  LOST GPU-s"
                )
                for row in job_rows(ledger):
                    lost = sum(p["lost_gpu_s"] for p in row["preemptions"])
                    typer.echo(
                        f"{row['id']:<12}{row['tenant']:<10}{row['priority_class']:<12}{row['state']:<11}"
                        f"{len(row['placements']):>7}{len(row['preemptions']):>10}  {lost:.1f}"
                    )
                typer.echo(
                    f"\n{len(log)} events on the bus; wall time {time.monotonic() - started:.1f}s"
                )
                await wait_for_projection(data / "projection.duckdb", log[-1][0] if log else 0, 20)
                typer.echo(
                    f"projection: {data / 'projection.duckdb'} — try `gpuledger why pretrain`, "
                    '`gpuledger jobs`, `gpuledger sql "SELECT * FROM who_preempted"`'
                )
            finally:
                await cluster.close()
                await bus.close()

    from gpuledger.services.runtime.supervisor import StartFailed

    try:
        asyncio.run(main())
    except StartFailed as exc:
        fail(f"gpuledger demo: {exc}", 2 if exc.code == 2 else 1)
