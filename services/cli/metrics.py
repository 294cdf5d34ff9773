"""`gpuledger metrics`: the aggregate Prometheus exporter over the projection, and the
generator of docs/metrics.md (`--docs`)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.connect import DEFAULT_DATA

app = typer.Typer()

METRICS_ADDR_HELP = "Address the /metrics endpoint listens on (0.0.0.0: every interface)."


def start_aggregate(data: Path, port: int, addr: str = "127.0.0.1"):
    """Serve the aggregate exporter for `<data>/projection.duckdb` on ADDR:PORT (a daemon
    thread); returns the HTTP server."""
    from gpuledger.projections.exporter import ProjectionCollector
    from gpuledger.services.runtime.metrics import new_registry, serve_metrics

    return serve_metrics(port, new_registry(ProjectionCollector(data / "projection.duckdb")), addr)


def start_service_metrics(port: int, addr: str = "127.0.0.1"):
    """Serve a fresh ServiceCollector on ADDR:PORT; returns the collector (register hosts
    with `add_host`, the projector with `add_projector`)."""
    from gpuledger.services.runtime.metrics import ServiceCollector, new_registry, serve_metrics

    collector = ServiceCollector()
    try:
        serve_metrics(port, new_registry(collector), addr)
    except OSError as exc:
        fail(f"--metrics-port {port}: {exc}", 2)
    return collector


@app.command()
def metrics(
    data: Path = typer.Option(
        DEFAULT_DATA, "--data", help="The data directory holding projection.duckdb."
    ),
    port: int = typer.Option(9400, "--port", help="Port of the /metrics endpoint."),
    addr: str = typer.Option("127.0.0.1", "--addr", help=METRICS_ADDR_HELP),
    docs: bool = typer.Option(
        False,
        "--docs",
        help="Print docs/metrics.md (every metric: name, type, labels, meaning) and exit.",
    ),
) -> None:
    """Serve cluster-level Prometheus metrics read from the projection (pending workloads,
    admission waits, preemptions, quota, GPU allocation vs SM activity, fragmentation, dead
    letters). The projection is opened read-only at most once a second and closed at once, so
    the projector is never held up. Stops on Ctrl-C or SIGTERM."""
    if docs:
        from gpuledger.projections.exporter import render_docs

        typer.echo(render_docs(), nl=False)
        return
    try:
        server = start_aggregate(data, port, addr)
    except OSError as exc:
        fail(f"--port {port}: {exc}", 2)
    typer.echo(
        f"gpuledger metrics: http://{addr}:{port}/metrics (projection "
        f"{data / 'projection.duckdb'}; Ctrl-C to stop)",
        err=True,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.shutdown()
