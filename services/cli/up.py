"""`gpuledger up`: the whole scheduler, embedded NATS (unless --nats-url), every service,
simulated agents, supervised (services/runtime/cluster.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.projections.projector_process import in_process_projector
from gpuledger.services.cli.apply import publish_config_when_placeable
from gpuledger.services.cli.common import fail, fail_input, read_doc
from gpuledger.services.cli.connect import (
    DEFAULT_DATA,
    URL_FILE,
    resolve_access,
)
from gpuledger.services.cli.metrics import METRICS_ADDR_HELP, start_service_metrics
from gpuledger.services.runtime.cluster import Cluster
from gpuledger.services.runtime.embedded import embedded, embedded_cluster

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


@app.command()
def up(
    config: Path | None = typer.Option(None, "--config", help="Cluster configuration YAML."),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        envvar="GPULEDGER_NATS_URL",
        help="Use this NATS instead of the embedded one.",
    ),
    processes: bool = typer.Option(
        False, "--processes", help="Run each service as its own OS process."
    ),
    data: Path = typer.Option(
        DEFAULT_DATA,
        "--data",
        help="Where the embedded NATS keeps its store, and its identities in <data>/auth.",
    ),
    creds: Path | None = typer.Option(
        None,
        "--creds",
        envvar="GPULEDGER_CREDS",
        help="With --nats-url: the credential every service connects with (the compose file gives each service its own).",
    ),
    metrics_port: int | None = typer.Option(
        None,
        "--metrics-port",
        help="Serve the aggregate Prometheus exporter on PORT and the services' own metrics on PORT+1 (in-process: one endpoint with a `service` label) or PORT+1, PORT+2, ... (one per child with --processes); each endpoint is printed at start and listed in <data>/prometheus-targets.json, a Prometheus file_sd target file (removed when `up` stops).",
    ),
    metrics_addr: str = typer.Option("127.0.0.1", "--metrics-addr", help=METRICS_ADDR_HELP),
    nats_cluster: int | None = typer.Option(
        None,
        "--nats-cluster",
        min=1,
        max=5,
        help="Instead of one embedded nats-server, a cluster of N on loopback (3: the production profile; stores in <data>/nats-cluster, routes authenticated) with the stream at N replicas.",
    ),
    nats_max_store: str | None = typer.Option(
        None,
        "--nats-max-store",
        help="Cap the embedded server's store (JetStream max_file_store, e.g. 64MB): writes beyond it are refused as on a full disk (`gpuledger status` says `store full`).",
    ),
) -> None:
    """Run the whole scheduler: embedded NATS (unless --nats-url), every service, simulated agents.

    Services are supervised: one that crashes is restarted with back-off (1 s doubling to
    30 s) and reported in one `service.crashed` line; `gpuledger status` shows each one.
    With --processes, children log to <data>/logs/NAME.log and must start within 30 s (and
    10 s of their own CPU time, so a busy host starts them late rather than not at all): one
    that cannot makes `up` exit at once with the child's own error (exit 2 when the child
    found its input invalid, else 1)."""
    import asyncio

    from gpuledger.services.domain.inputs.configfile import ConfigFileError, parse
    from gpuledger.services.runtime.logging import configure_logging

    doc = read_doc(config)
    try:
        parse(doc)
    except ConfigFileError as exc:
        fail_input(exc, config)
    if nats_cluster is not None and nats_url is not None:
        fail("--nats-cluster starts its own NATS cluster: leave out --nats-url", 2)
    if nats_max_store is not None:
        from gpuledger.services.runtime.nats_server import storage_size

        if nats_url is not None or nats_cluster is not None:
            fail(
                "--nats-max-store caps the one embedded nats-server: leave out --nats-url and --nats-cluster",
                2,
            )
        try:
            storage_size(nats_max_store)
        except ValueError as exc:
            fail(f"--nats-max-store: {exc}", 2)
    configure_logging()

    async def main() -> None:
        import signal

        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        server = None
        if nats_cluster is not None:
            data.mkdir(parents=True, exist_ok=True)
            server = await asyncio.to_thread(embedded_cluster(data, nats_cluster, doc=doc).start)
            access = server.access("admin")
            (data / URL_FILE).write_text(server.url + "\n")
        elif nats_url is None:
            server = embedded(data, keep=True, doc=doc)
            server.max_file_store = nats_max_store
            server.start()
            access = server.access("admin")
            (data / URL_FILE).write_text(server.url + "\n")
        else:
            access = resolve_access(nats_url, creds, data)
        url = access.url
        logs = f"; service logs in {data / 'logs'}" if processes else ""
        what = (
            "NATS"
            if nats_cluster is None
            else f"NATS cluster of {nats_cluster} (stream at {nats_cluster} replicas)"
        )
        typer.echo(
            f"gpuledger up: {what} at {url}; projection in {data / 'projection.duckdb'}{logs}; "
            "`gpuledger status` shows each service (Ctrl-C to stop)",
            err=True,
        )
        try:
            from gpuledger.services.runtime.nats_server import EmbeddedNats
            from gpuledger.services.runtime.storefull import StoreWatch

            await publish_config_when_placeable(access, doc, nats_cluster)
            cluster = Cluster(
                access,
                config,
                doc,
                processes,
                data=data,
                metrics_port=metrics_port,
                metrics_addr=metrics_addr,
                store_watch=StoreWatch(
                    server if isinstance(server, EmbeddedNats) else None, url=url
                ),
                nats_server=server,
                service_metrics=start_service_metrics,
                projector=in_process_projector,
            )
            try:
                await cluster.start()
                for name, endpoint in cluster.endpoints:
                    typer.echo(f"metrics: {name} {endpoint}", err=True)
                await stop.wait()
            finally:
                await cluster.close()
        finally:
            if server is not None:
                (data / URL_FILE).unlink(missing_ok=True)
                server.stop()

    from gpuledger.services.runtime.supervisor import StartFailed

    try:
        asyncio.run(main())
    except StartFailed as exc:
        fail(f"gpuledger up: {exc}", 2 if exc.code == 2 else 1)
