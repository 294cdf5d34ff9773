"""`gpuledger run ROLE`: one service against a NATS server (as compose runs each container)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.services.cli.common import fail, fail_input, read_doc
from gpuledger.services.cli.connect import (
    DEFAULT_DATA,
    CredsOption,
    NatsUrlOption,
    resolve_access,
)
from gpuledger.services.cli.metrics import METRICS_ADDR_HELP, start_service_metrics
from gpuledger.services.runtime.auth import LEASE_TTL_S as DEFAULT_LEASE_S

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


@app.command()
def run(
    role: str = typer.Argument(
        ..., help="admission | quota | scheduler | preemption | node-agent | projector"
    ),
    nats_url: NatsUrlOption = None,
    config: Path | None = typer.Option(
        None, "--config", help="Cluster configuration (node agents read their nodes here)."
    ),
    node: str | None = typer.Option(
        None, "--node", help="Node agent: the node to simulate (with --real: this node's name)."
    ),
    real: bool = typer.Option(
        False,
        "--real",
        help="Node agent: run members as real processes (NVML discovery, else the GPUs declared in --config).",
    ),
    work_dir: Path | None = typer.Option(
        None,
        "--work-dir",
        help="Real node agent: state, logs and checkpoints (default .gpuledger/agent).",
    ),
    data: Path = typer.Option(
        DEFAULT_DATA, "--data", help="Projector: keeps projection.duckdb here."
    ),
    leader_lease: float = typer.Option(
        DEFAULT_LEASE_S,
        "--leader-lease",
        min=0.5,
        help="Leader lease TTL in seconds (admission, quota, scheduler, preemption: always on). Every replica folds; only the lease holder decides, stamping its epoch; a standby takes over within about TTL + 2 s of a leader's death. Node agents take no lease (one per node).",
    ),
    instance: str | None = typer.Option(
        None,
        "--instance",
        help="This replica's name in its decisions' producer (`scheduler/INSTANCE`; default: the node, else 0); name each replica differently to tell them apart.",
    ),
    creds: CredsOption = None,
    metrics_port: int | None = typer.Option(
        None,
        "--metrics-port",
        help="Serve this service's own Prometheus metrics on http://ADDR:PORT/metrics (docs/metrics.md).",
    ),
    metrics_addr: str = typer.Option("127.0.0.1", "--metrics-addr", help=METRICS_ADDR_HELP),
    snapshot_every: int = typer.Option(
        10_000,
        "--snapshot-every",
        envvar="GPULEDGER_SNAPSHOT_EVERY",
        help="Save the folded state to the snapshot bucket after this many new events (0: no snapshots, always fold the whole log on start).",
    ),
    snapshot_interval: float = typer.Option(
        300.0,
        "--snapshot-interval",
        envvar="GPULEDGER_SNAPSHOT_INTERVAL",
        help="...or after this many seconds with anything new.",
    ),
) -> None:
    """Run one service against a NATS server (as compose runs each container)."""
    from gpuledger.services.roles import UnknownRole, build
    from gpuledger.services.runtime.host import serve

    access = resolve_access(nats_url, creds)
    collector = None if metrics_port is None else start_service_metrics(metrics_port, metrics_addr)
    if role == "projector":
        serve_projector(access, data, collector)
        return

    from gpuledger.services.domain.inputs.schema import InputError

    doc = read_doc(config)  # (outside the try: its typer.Exit is a RuntimeError)
    try:
        if instance is not None:
            from gpuledger.events.ids import validate_token

            validate_token("--instance", instance)
        service = build(
            role,
            doc,
            node=node,
            instance=instance or node or "0",
            real=real,
            work_dir=None if work_dir is None else str(work_dir),
        )
    except InputError as exc:
        fail_input(exc, config)
    except (UnknownRole, ValueError, RuntimeError) as exc:
        fail(str(exc), 2)
    from gpuledger.services.runtime.snapshots import SnapshotPolicy

    def on_host(host) -> None:
        _heartbeat_host(host)
        if collector is not None:
            collector.add_host(host)

    from gpuledger.services.roles import CONTROL_PLANE

    policy = SnapshotPolicy(
        every_events=max(1, snapshot_every), every_s=snapshot_interval, enabled=snapshot_every > 0
    )
    serve(
        service,
        access.url,
        lease_ttl_s=leader_lease if role in CONTROL_PLANE else None,
        on_host=on_host,
        nats_options=access.options(),
        snapshot_policy=policy,
    )


def _heartbeat_host(host) -> None:
    """Under `gpuledger up --processes`: report the host's folded sequence to `up`."""
    from gpuledger.services.runtime.supervisor import heartbeat_task, host_sample

    heartbeat_task(host_sample(host))


def serve_projector(access, data: Path, collector=None) -> None:
    """The projector process (projections/projector_process.py); a projection it cannot open or
    write ends in one line, exit 1."""
    import duckdb

    from gpuledger.projections.projector_process import serve_projector as serve
    from gpuledger.projections.store import ProjectionError

    try:
        serve(access, data, collector)
    except (ProjectionError, duckdb.Error) as exc:
        fail(f"projector: {data / 'projection.duckdb'}: {exc}".replace("\n", " "), 1)
