"""Live commands over NATS: up, run, apply, submit, cancel, demo.

Thin: argument handling and process wiring only; every decision is made by the deciders
through the runtime's host loop.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail, fail_input
from gpuledger.services.cli.connect import (
    CREDS_HELP,
    DEFAULT_DATA,
    NATS_URL_HELP,
    URL_FILE,
    cli_bus,
    may_read_log,
    resolve_access,
    run_on_bus,
)
from gpuledger.services.cli.metrics import METRICS_ADDR_HELP, start_service_metrics
from gpuledger.services.runtime.auth import LEASE_TTL_S as DEFAULT_LEASE_S

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


def read_doc(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    from gpuledger.services.runtime.documents import DocumentError, load_document

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        doc = load_document(text) or {}
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror}", 2)
    except UnicodeDecodeError as exc:
        fail(f"{path}: cannot read: {exc}", 2)
    except DocumentError as exc:
        fail(f"{path}: {exc}", 2)
    if not isinstance(doc, dict):
        fail(f"{path}: (top level): expected a mapping of keys, got {type(doc).__name__}", 2)
    return doc


async def publish_config(
    access, doc: dict[str, Any], track=None, replicas: int | None = None
) -> int:
    """Publish `doc`'s configuration events (creating the stream first, with `replicas` when
    given; an existing stream keeps its replica count otherwise)."""
    from gpuledger.services.domain.inputs.configfile import config_events

    bus = await cli_bus(access, replicas=replicas)
    if track is not None:
        track(bus)
    try:
        n = 0
        for e in config_events(doc, producer="cli", at_ms=time.time_ns() // 1_000_000):
            await bus.publish_retrying(e)  # a new replicated stream may not answer yet
            n += 1
        return n
    finally:
        await bus.close()


# ---------------------------------------------------------------------- processes


class Cluster:
    """The control plane plus simulated agents, in-process (asyncio tasks) or as processes,
    supervised (services/runtime/supervisor.py): crashed services are restarted with back-off
    and reported, and `<data>/status.json` says how each one is doing."""

    def __init__(
        self,
        access,
        config: Path | None,
        doc: dict[str, Any],
        processes: bool,
        data: Path | None = None,
        metrics_port: int | None = None,
        metrics_addr: str = "127.0.0.1",
        store_watch: Any = None,
        nats_server: Any = None,
    ) -> None:
        import asyncio

        self.store_watch = store_watch
        self.nats_server = nats_server
        """The embedded server (or cluster) `up` started, whose failed credential reloads
        `status` shows (None: an external NATS)."""
        """A StoreWatch (services/runtime/storefull.py) probing the store once a second (None:
        `up` runs on an external NATS it may not probe)."""
        self.access, self.url, self.doc, self.processes = access, access.url, doc, processes
        self.metrics_port, self.metrics_addr = metrics_port, metrics_addr
        """With a metrics port: the aggregate exporter (a `gpuledger metrics` child process,
        so it never shares a process with the projection's writer) on it, and the services'
        own metrics on the next ports (`endpoints`)."""
        self.endpoints: list[tuple[str, str]] = []
        self._exporter = None
        self.config = None if config is None else Path(config).resolve()
        self.data = None if data is None else Path(data).resolve()
        """Where the projector keeps projection.duckdb (None: no projector), the status file,
        and with processes the children's logs (`logs/`) and heartbeats."""
        self.supervisor = None  # ProcessSupervisor with --processes
        self.tasks: list[asyncio.Task] = []
        self.stop = asyncio.Event()
        self.board = None
        self._samplers: list = []  # refresh in-process rows from their hosts / projector

    async def start(self) -> None:
        """Start every service; with processes, wait until each is ready (StartFailed with
        the child's own error when one exits or hangs at start)."""
        import asyncio

        from gpuledger.services.roles import CONTROL_PLANE, build
        from gpuledger.services.runtime.host import run_service
        from gpuledger.services.runtime.supervisor import STATUS_FILE, StatusBoard, supervise_task

        if self.data is not None:
            self.data.mkdir(parents=True, exist_ok=True)
        self.board = StatusBoard(
            None if self.data is None else self.data / STATUS_FILE,
            self.url,
            "processes" if self.processes else "in-process",
        )
        if self.processes:
            from gpuledger.services.runtime.processes import ServiceProcesses
            from gpuledger.services.runtime.supervisor import ProcessSupervisor

            base = self.data if self.data is not None else Path.cwd() / DEFAULT_DATA
            (base / "logs").mkdir(parents=True, exist_ok=True)
            procs = ServiceProcesses(self.access, config=self.config, log_dir=base / "logs")
            self.supervisor = sup = ProcessSupervisor(procs, self.board, base / "heartbeats")
            ports = iter(range((self.metrics_port or 0) + 1, 1 << 16))

            def metrics_args(name: str) -> tuple[str, ...]:
                if self.metrics_port is None:
                    return ()
                port = next(ports)
                self.endpoints.append((name, self._url(port)))
                return ("--metrics-port", str(port), "--metrics-addr", self.metrics_addr)

            for role in CONTROL_PLANE:  # `gpuledger run` holds the leader lease (default TTL)
                sup.add(role, *metrics_args(role))
            for node in self._nodes():
                sup.add("node-agent", "--node", node, *metrics_args(node), name=node)
            if self.data is not None:
                sup.add("projector", "--data", str(self.data), *metrics_args("projector"))
            self._start_exporter()
            try:
                await sup.start()
            except BaseException:
                sup.stop()
                raise
            self._write_targets()
            self.tasks.append(asyncio.create_task(self._report()))
            self._watch_store()
            return
        collector = None
        if self.metrics_port is not None:
            collector = start_service_metrics(self.metrics_port + 1, self.metrics_addr)
            self.endpoints.append(("services", self._url(self.metrics_port + 1)))
            self._start_exporter()
        if self.data is not None:
            from gpuledger.projections.nats_source import ProjectorStatus, run_projector

            st, ps = self.board.add("projector", "projector"), ProjectorStatus()
            if collector is not None:
                collector.add_projector(ps, lambda: self.board.stream_last_seq)
            db = self.data / "projection.duckdb"
            self.tasks.append(
                asyncio.create_task(
                    supervise_task(
                        st,
                        lambda: run_projector(
                            self.url,
                            db,
                            stop=self.stop,
                            status=ps,
                            connect_options=self._options("projector"),
                            serve_reads=True,
                        ),
                        self.stop,
                    )
                )
            )
            self._samplers.append(lambda st=st, ps=ps: _sample_projector(st, ps))
        services = [(role, role, lambda role=role: build(role)) for role in CONTROL_PLANE]
        if self._nodes():
            services.append(("node-agent", "agents", lambda: build("node-agent", self.doc)))
        for name, principal, make in services:
            st, hosts = self.board.add(name, name), []
            on_host = hosts.append
            if collector is not None:

                def on_host(host, hosts=hosts):
                    hosts.append(host)
                    collector.add_host(host)

            self.tasks.append(
                asyncio.create_task(
                    supervise_task(
                        st,
                        lambda make=make, on_host=on_host, principal=principal: run_service(
                            make(),
                            self.url,
                            stop=self.stop,
                            on_host=on_host,
                            lease_ttl_s=DEFAULT_LEASE_S if principal in CONTROL_PLANE else None,
                            nats_options=self._options(principal),
                        ),
                        self.stop,
                    )
                )
            )
            self._samplers.append(lambda st=st, hosts=hosts: _sample_host(st, hosts))
        self._write_targets()
        self.tasks.append(asyncio.create_task(self._report()))
        self._watch_store()

    def _watch_store(self) -> None:
        if self.store_watch is not None:
            import asyncio

            self.tasks.append(asyncio.create_task(self._probe_store()))

    async def _probe_store(self, interval_s: float = 1.0) -> None:
        """Once a second: a probe write (is the store full?), and, with the embedded server,
        its in-place restart when its store latched a write error and space is back."""
        import asyncio

        import structlog

        watch, bus = self.store_watch, None
        try:
            while not self.stop.is_set():
                try:
                    if bus is None:
                        bus = await self._watch_bus("gpuledger-up-store", self.access.options())
                    before = watch.state
                    await watch.probe(bus)
                    if watch.state != before:
                        _log_store(watch)
                    if watch.state == "full" and await watch.recover():
                        structlog.get_logger("gpuledger.up").warning(
                            "nats.restarted", reason=watch.error, restarts=watch.restarts
                        )
                except Exception as exc:  # noqa: BLE001 - the probe never stops `up`
                    structlog.get_logger("gpuledger.up").debug(
                        "store.probe_failed", error=repr(exc)
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), interval_s)
        finally:
            if bus is not None:
                with contextlib.suppress(Exception):
                    await bus.close()

    def _write_targets(self) -> None:
        """`<data>/prometheus-targets.json`: every metrics endpoint as a Prometheus file_sd
        target group (docs/operations.md), written atomically; removed by close()."""
        if self.data is None or not self.endpoints:
            return
        from gpuledger.services.runtime.status_file import write_json_atomic

        write_json_atomic(self.data / TARGETS_FILE, prometheus_targets(self.endpoints))

    async def _report(self, interval_s: float = 1.0) -> None:
        """Once a second: supervise children, sample the stream's last sequence, write the
        status file."""
        import asyncio

        from gpuledger.services.runtime.status_file import nats_nodes

        bus = None
        try:
            while not self.stop.is_set():
                if self.supervisor is not None:
                    self.supervisor.poll()
                for sample in self._samplers:
                    sample()
                try:
                    if bus is None:
                        bus = await self._watch_bus("gpuledger-up-status", self._options("auditor"))
                    info = await asyncio.wait_for(bus.stream_info(), 5)
                    self.board.saw_stream(info.state.last_seq)
                    label, aliases = _server_label(bus.nc)
                    self.board.nats_nodes = nats_nodes(info.cluster, label, aliases)
                    self.board.stream_error = None
                except Exception as exc:  # noqa: BLE001 - shown in `gpuledger status`
                    self.board.stream_error = f"{type(exc).__name__}: {exc}"[:300]
                    self.board.nats_nodes = []
                if self.store_watch is not None:
                    self.board.store = self.store_watch.document()
                self.board.nats_reload_error = _reload_error(self.nats_server)
                self.board.write()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), interval_s)
        finally:
            if bus is not None:
                with contextlib.suppress(Exception):
                    await bus.close()

    def _url(self, port: int) -> str:
        host = "127.0.0.1" if self.metrics_addr in ("0.0.0.0", "") else self.metrics_addr
        return f"http://{host}:{port}/metrics"

    def _start_exporter(self) -> None:
        """The aggregate exporter as a child process (`gpuledger metrics`), stopped by close()."""
        import subprocess

        if self.data is None or self.metrics_port is None:
            return
        self._exporter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuledger.services.cli",
                "metrics",
                "--data",
                str(self.data),
                "--port",
                str(self.metrics_port),
                "--addr",
                self.metrics_addr,
            ],
            stdout=subprocess.DEVNULL,
        )
        self.endpoints.insert(0, ("aggregate", self._url(self.metrics_port)))

    async def _watch_bus(self, name: str, options: dict[str, Any]):
        """One quiet connection attempt for `up`'s own watch loops (status, store probe): a
        loop that fails retries on its next round instead of waiting here."""
        from gpuledger.services.runtime.bus import Bus

        return await Bus.connect(
            self.url, name=name, connect_timeout=2, connect_attempts=1, quiet=True, **options
        )

    def _options(self, principal: str) -> dict[str, Any]:
        """Connection options for an in-process service running as `principal`."""
        return self.access.as_principal(principal).options()

    def _nodes(self) -> list[str]:
        from gpuledger.services.domain.inputs.configfile import node_infos

        return [n.name for n in node_infos(self.doc)]

    async def close(self) -> None:
        import asyncio

        self.stop.set()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(t, 10)
        if self.supervisor is not None:
            self.supervisor.stop()
        if self._exporter is not None:
            self._exporter.terminate()
            try:
                self._exporter.wait(10)
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                self._exporter.kill()
        if self.data is not None:
            (self.data / TARGETS_FILE).unlink(missing_ok=True)  # no endpoint is left to scrape
        if self.board is not None:
            for st in self.board.services.values():
                st.state = "stopped"
            self.board.write()


def _reload_error(server) -> str | None:
    """Why the embedded server (any node of an embedded cluster) refused its last credential
    reload, or None."""
    if server is None:
        return None
    for s in getattr(server, "nodes", None) or [server]:
        err = getattr(s, "reload_error", None)
        if err:
            return err
    return None


def _log_store(watch) -> None:
    import structlog

    log = structlog.get_logger("gpuledger.up")
    if watch.state == "full":
        log.error("store.full", error=watch.error)
    else:
        log.info("store.writable", state=watch.state)


def _server_label(nc) -> tuple[str | None, dict[str, str]]:
    """The connected NATS server's name, and a rename of its id to its address when it has no
    name of its own (a server without `server_name` calls itself by its 56-character id)."""
    info = nc._server_info or {}  # noqa: SLF001 - nats-py keeps the server's INFO here
    name, sid = info.get("server_name"), info.get("server_id")
    if name and name != sid or nc.connected_url is None:
        return name, {}
    address = nc.connected_url.netloc
    return address, ({sid: address} if sid else {})


TARGETS_FILE = "prometheus-targets.json"
"""The Prometheus file_sd target file `gpuledger up --metrics-port` writes into its data dir."""


def prometheus_targets(endpoints: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """File_sd target groups of `up`'s metrics endpoints (`(name, http://host:port/metrics)`):
    the aggregate exporter as job `gpuledger-cluster`, every other endpoint as job
    `gpuledger-services` (the jobs of deploy/prometheus/prometheus.yml and of the alert rules),
    each labelled `gpuledger_endpoint` with its name (a role, a node, `projector`, `services`)."""
    from urllib.parse import urlsplit

    groups = []
    for name, url in endpoints:
        parts = urlsplit(url)
        job = "gpuledger-cluster" if name == "aggregate" else "gpuledger-services"
        groups.append(
            {
                "targets": [parts.netloc],
                "labels": {
                    "job": job,
                    "gpuledger_endpoint": name,
                    "__metrics_path__": parts.path or "/metrics",
                },
            }
        )
    return groups


def _sample_host(st, hosts: list) -> None:
    from gpuledger.services.runtime.supervisor import host_condition

    if hosts:
        host = hosts[-1]
        st.folded_seq = host.folded_seq
        state, st.detail, st.lease = host_condition(host)
        if st.state in ("running", "refusing", "unauthorized"):
            st.state = state


def _sample_projector(st, ps) -> None:
    st.folded_seq = ps.committed_seq
    if st.state in ("running", "blocked", "refusing", "unauthorized"):
        st.state = ps.state if ps.state in ("blocked", "refusing") else "running"
        if ps.auth_failure:
            st.state = "unauthorized"
    st.detail = ps.auth_failure or ps.detail


def embedded(data: Path | None, keep: bool, doc: dict[str, Any] | None = None):
    """The embedded nats-server, authentication on: identities in `<data>/auth` (the layout of
    `gpuledger auth init`), with one per node and one CI identity per tenant of `doc`."""
    from gpuledger.services.runtime.nats_server import EmbeddedNats

    store = None
    if keep and data is not None:
        store = data / "nats"
        store.mkdir(parents=True, exist_ok=True)
    server = EmbeddedNats(store, sync_always=keep)
    if doc:
        server.auth.add(*cluster_principals(doc))
    return server


def embedded_cluster(data: Path, nodes: int, doc: dict[str, Any] | None = None):
    """A loopback NATS cluster of `nodes` nodes (services/runtime/nats_cluster.py), stores kept
    in `<data>/nats-cluster/node-<i>`, the same identities as `embedded` in `<data>/auth`."""
    from gpuledger.services.runtime.nats_cluster import EmbeddedNatsCluster

    store = data / "nats-cluster"
    store.mkdir(parents=True, exist_ok=True)
    cluster = EmbeddedNatsCluster(nodes, store, auth=data / "auth", sync_always=True)
    if doc:
        cluster.auth.add(*cluster_principals(doc))
    return cluster


def cluster_principals(doc: dict[str, Any]) -> list[str]:
    """The per-node and per-tenant identities a cluster configuration calls for."""
    from gpuledger.services.domain.inputs.configfile import node_infos, parse

    return [f"node:{n.name}" for n in node_infos(doc)] + [
        f"ci:{t.name}" for t in parse(doc).tenants
    ]


# ---------------------------------------------------------------------- commands


@app.command()
def run(
    role: str = typer.Argument(
        ..., help="admission | quota | scheduler | preemption | node-agent | projector"
    ),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP
    ),
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
    creds: Path | None = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP),
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
    """The single-writer projector as a process: stops within a few seconds on SIGTERM /
    SIGINT in any state (connecting, catching up, NATS down), exit status 0."""
    import asyncio

    from gpuledger.projections.nats_source import run_projector
    from gpuledger.services.runtime.logging import configure_logging
    from gpuledger.services.runtime.stopping import run_until_signalled

    configure_logging()
    data.mkdir(parents=True, exist_ok=True)

    from gpuledger.projections.nats_source import ProjectorStatus
    from gpuledger.services.runtime.supervisor import heartbeat_task

    status = ProjectorStatus()
    if collector is not None:
        collector.add_projector(status)

    def sample() -> dict[str, Any] | None:
        if not status.ready and status.state != "blocked":
            return None  # not ready: `up` waits for the first beat
        if status.auth_failure:
            return {
                "state": "unauthorized",
                "folded_seq": status.committed_seq,
                "detail": status.auth_failure,
            }
        return {"state": status.state, "folded_seq": status.committed_seq, "detail": status.detail}

    async def main(stop: asyncio.Event) -> None:
        beat = heartbeat_task(sample, 0.5)
        try:
            await run_projector(
                access.url,
                data / "projection.duckdb",
                stop=stop,
                status=status,
                connect_options=access.options(),
                serve_reads=True,
            )
        finally:
            if beat is not None:
                beat.cancel()

    import duckdb

    from gpuledger.projections.store import ProjectionError

    try:
        run_until_signalled(main, name="projector")
    except (ProjectionError, duckdb.Error) as exc:
        fail(f"projector: {data / 'projection.duckdb'}: {exc}".replace("\n", " "), 1)


@app.command()
def apply(
    config: Path = typer.Argument(
        ..., help="Configuration YAML (tenants, priority classes, policy)."
    ),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP
    ),
    creds: Path | None = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP),
    replicas: int | None = typer.Option(
        None,
        "--replicas",
        min=1,
        max=5,
        help="Create the stream with (or scale it to) this many replicas (3 on a 3-node NATS cluster); default: an existing stream keeps its count, a new one has 1.",
    ),
) -> None:
    """Publish a configuration as events (what replays will see as in force from now)."""
    from gpuledger.services.domain.inputs.configfile import ConfigFileError, parse

    doc = read_doc(config)
    try:
        parse(doc)
    except ConfigFileError as exc:
        fail_input(exc, config)
    access = resolve_access(nats_url, creds)
    n = run_on_bus(lambda track: publish_config(access, doc, track, replicas=replicas))
    typer.echo(f"published {n} configuration events")


NO_SUITABLE_PEERS = 10005
"""JetStream's `no suitable peers for placement`: a cluster that has just elected its meta
leader may not know every node's JetStream yet, so a replicated stream cannot be placed."""


async def publish_config_when_placeable(
    access, doc: dict[str, Any], replicas: int | None, timeout_s: float = 30.0
) -> int:
    """`publish_config`, retried every 0.5 s for up to `timeout_s` while a NATS cluster that
    `up` has just started cannot place the stream on enough nodes yet (nothing is published
    before the stream exists, so a retry repeats nothing)."""
    import asyncio

    import nats.js.errors

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await publish_config(access, doc, replicas=replicas)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != NO_SUITABLE_PEERS or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


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
    With --processes, children log to <data>/logs/NAME.log and must start within 30 s: one
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
                store_watch=None
                if server is None
                else StoreWatch(server if isinstance(server, EmbeddedNats) else None),
                nats_server=server,
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


@app.command()
def status(
    job: str | None = typer.Argument(
        None,
        help="A job id: its status from the admission service over NATS (what a CI step "
        "needs) instead of the services of `gpuledger up`.",
        show_default=False,
    ),
    data: Path = typer.Option(
        DEFAULT_DATA, "--data", help="The data directory `gpuledger up` runs in."
    ),
    output: str = typer.Option("table", "-o", "--output", help="table, json or yaml."),
    no_headers: bool = typer.Option(False, "--no-headers", help="Leave out the header line."),
    wait_for: str | None = typer.Option(
        None,
        "--wait-for",
        help="With JOB: wait until it is `running` (placed, or already past it) or `finished` "
        "(completed); a failed, rejected or cancelled job ends the wait with exit 1.",
        show_default=False,
    ),
    timeout: float = typer.Option(30.0, "--timeout", help="With JOB: seconds to wait."),
    tenant: str | None = typer.Option(
        None,
        "--tenant",
        help="With JOB: the job's tenant (default: the tenant of a CI credential, else the "
        "tenant that submitted it).",
    ),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP
    ),
    creds: Path | None = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP),
) -> None:
    """Each service `gpuledger up` supervises: state (starting, running, blocked, restarting,
    failed, stopped; unauthorized: the server refuses its key, rotated or removed), pid,
    restarts, folded sequence, lag behind the stream, leader lease
    (leader, standby; - for node agents and the projector), last error; then each NATS node
    that holds the stream: leader or replica, current, behind or offline, its lag, when last
    heard from; `store full` while the event store refuses writes (its disk or its cap is
    full), and a credential reload the embedded server refused. Exit 1 when `up` is not running,
    a service is not running, a NATS node is offline, the stream has no leader, the store is
    full or a credential reload was refused.

    With JOB: the job's state, reason and priority, asked of the admission service over NATS
    (a tenant's CI credential may ask about its own jobs; nothing is read from disk). Exit
    codes: 0 known and not failed (with --wait-for: reached), 1 failed, rejected, cancelled or
    unknown (reason on stderr), 2 invalid input, 3 NATS or the admission service
    unreachable, 4 not reached within --timeout."""
    if job is not None:
        _job_status(job, tenant, nats_url, creds, data, output, no_headers, wait_for, timeout)
        return
    if wait_for is not None:
        fail("--wait-for needs a JOB: `gpuledger status JOB --wait-for running|finished`", 2)
    from gpuledger.services.cli.audit import humanize_ms, render_table
    from gpuledger.services.runtime.status_file import STATUS_FILE, now_ms, pid_alive, read_json

    path = data / STATUS_FILE
    doc = read_json(path)
    if doc is None:
        fail(f"no status at {path}: start `gpuledger up` here (or pass --data)", 1)
    now = now_ms()
    up_running = pid_alive(doc.get("up_pid")) and now - doc.get("updated_at_ms", 0) < 15_000
    rows = doc.get("services", [])
    if output in ("json", "yaml"):
        from gpuledger.services.cli.audit import _emit_structured

        _emit_structured({**doc, "up_running": up_running}, output)
    else:
        lines = [
            [
                r["name"],
                r["state"],
                r.get("pid") or "-",
                r.get("restarts", 0),
                "-" if r.get("folded_seq") is None else r["folded_seq"],
                "-" if r.get("lag") is None else r["lag"],
                f"{r['idle_s']}s" if r.get("idle_s") else "-",  # no progress for (issue 44)
                humanize_ms(now - r["started_at_ms"]) if r.get("started_at_ms") else "-",
                r.get("lease") or "-",
                r.get("last_error") or r.get("detail") or "",
            ]
            for r in rows
        ]
        typer.echo(
            render_table(
                [
                    *("NAME", "STATE", "PID", "RESTARTS", "SEQ", "LAG", "IDLE", "AGE", "LEASE"),
                    "LAST-ERROR",
                ],
                lines,
                no_headers=no_headers,
            )
        )
        nodes = doc.get("nats_nodes") or []
        if nodes:
            typer.echo("")
            typer.echo(
                render_table(
                    ["NATS-NODE", "ROLE", "STATE", "LAG", "LAST-SEEN"],
                    [
                        [
                            n["name"],
                            n["role"],
                            n["state"],
                            "-" if n.get("lag") is None else n["lag"],
                            "-"
                            if n.get("seen_ms_ago") is None
                            else humanize_ms(n["seen_ms_ago"]) + " ago",
                        ]
                        for n in nodes
                    ],
                    no_headers=no_headers,
                )
            )
        stream = doc.get("stream_last_seq")
        typer.echo(
            f"stream at seq {stream if stream is not None else '?'}"
            + (f" ({doc['stream_error']})" if doc.get("stream_error") else "")
            + f"; status written {humanize_ms(now - doc.get('updated_at_ms', now))} ago by "
            f"`gpuledger up` (pid {doc.get('up_pid')})",
            err=True,
        )
    store = doc.get("store") or {}
    if up_running and store.get("state") == "full":
        since = store.get("since_ms")
        typer.echo(
            f"store full: {store.get('error')}"
            + ("" if since is None else f" (for {humanize_ms(now - since)})")
            + "; writes are refused until space is freed, then everything resumes by itself",
            err=True,
        )
    if up_running and doc.get("nats_reload_error"):
        typer.echo(
            f"NATS credential reload failed: {doc['nats_reload_error']} (the server still "
            "admits the identities it loaded before; fix the auth directory)",
            err=True,
        )
    if not up_running:
        age = humanize_ms(now - doc.get("updated_at_ms", now))
        if pid_alive(doc.get("up_pid")):
            typer.echo(
                f"warning: `gpuledger up` (pid {doc.get('up_pid')}) is running but has not "
                f"updated {path} for {age} (it cannot write there: is the disk full?)",
                err=True,
            )
        else:
            typer.echo(
                f"warning: `gpuledger up` (pid {doc.get('up_pid')}) is not running: this status "
                f"is from {age} ago",
                err=True,
            )
        raise typer.Exit(1)
    if store.get("state") == "full" or doc.get("nats_reload_error"):
        raise typer.Exit(1)
    if any(r["state"] != "running" for r in rows):
        raise typer.Exit(1)
    if any(n["state"] in ("offline", "no-leader") for n in doc.get("nats_nodes") or []):
        raise typer.Exit(1)


def _job_status(
    job_id: str,
    tenant: str | None,
    nats_url: str | None,
    creds: Path | None,
    data: Path,
    output: str,
    no_headers: bool,
    wait_for: str | None,
    timeout: float,
) -> None:
    """`gpuledger status JOB`: one job's status from the admission service (exit codes in
    `client_requests.job_status_outcome`)."""
    from gpuledger.services.runtime.client_requests import (
        WAIT_FOR,
        StatusQueryError,
        job_owner,
        job_status_outcome,
    )

    if wait_for is not None and wait_for not in WAIT_FOR:
        fail(f"--wait-for: expected one of {', '.join(WAIT_FOR)}, got {wait_for!r}", 2)
    if output not in ("table", "json", "yaml"):
        fail(f"-o: expected table, json or yaml, got {output!r}", 2)
    if not timeout > 0:
        fail(f"--timeout: expected a positive number of seconds, got {timeout:g}", 2)
    access, tenant = job_request_target(job_id, tenant, nats_url, creds, data)
    show_changes = wait_for is not None and output == "table"

    def changed(st) -> None:
        if show_changes:
            what = st.state if st.known else "unknown (not folded yet, or not this tenant's)"
            reason = f" {st.reason}: {st.message}" if st.reason else ""
            typer.echo(f"{job_id}: {what}{reason}", err=True)

    async def main(track):
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            owner = tenant
            if owner is None:  # not a CI credential: whichever tenant submitted the job
                owner = await job_owner(bus, None, job_id, read_log=True)
                if owner is None:
                    fail(f"no job {job_id!r}: nothing was submitted under this id (UnknownJob)", 1)
            return await job_status_outcome(
                bus, owner, job_id, wait_for=wait_for, timeout=timeout, on_change=changed
            )
        except StatusQueryError as exc:
            fail(str(exc), 2)
        finally:
            await bus.close()

    outcome = run_on_bus(main, timeout + 10)
    st = outcome.job_status
    if st is not None and st.known and outcome.status not in ("timeout",):
        if output in ("json", "yaml"):
            import msgspec

            from gpuledger.services.cli.audit import _emit_structured

            doc = msgspec.to_builtins(st)
            doc.pop("spec", None)
            _emit_structured(doc, output)
        else:
            from gpuledger.services.cli.audit import render_table

            row = [st.job_id, st.tenant, st.state, st.priority, st.reason or "", st.message]
            typer.echo(
                render_table(
                    ["NAME", "TENANT", "STATE", "PRIORITY", "REASON", "MESSAGE"],
                    [row],
                    no_headers=no_headers,
                )
            )
    if outcome.code == 1 and st is not None and st.known:
        fail(f"job {outcome.text}", 1)  # failed, rejected or cancelled: the reason on stderr
    if outcome.error:
        fail(outcome.text, outcome.code)
    raise typer.Exit(outcome.code)


def _echo_outcome(outcome) -> int:
    """Print a client request's outcome the CLI's way; its exit code (errors exit here)."""
    if outcome.error:
        fail(outcome.text, outcome.code)
    typer.echo(outcome.text, err=outcome.status not in ("admitted", "cancel_requested"))
    return outcome.code


@app.command()
def submit(
    file: Path = typer.Argument(..., help="Job YAML/JSON file, or - for standard input."),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Wait for the admission decision; exit 1 on rejection."
    ),
    timeout: float = typer.Option(30.0, help="Seconds to wait with --wait."),
    creds: Path | None = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP),
) -> None:
    """Publish JobSubmitted. A job id is created once per tenant (another tenant may use the
    same id): re-submitting the same content is a no-op (safe CI retries); a job id the
    tenant already used for other content exits 1 with `JobIdConflict` and what differs. Exit codes: 0 submitted (and with --wait
    admitted), 1 rejected or refused (reason on stderr), 2 invalid input, 3 NATS unreachable,
    4 no decision within --timeout, 5 the event store is full (nothing was stored; retry once
    space is freed)."""
    from gpuledger import events as ev
    from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec
    from gpuledger.services.domain.tooling.stamp import submission
    from gpuledger.services.runtime.client_requests import StatusQueryError, submit_job

    try:
        spec = job_spec(read_doc(file))
        event = submission(spec, producer="cli", now_ms=time.time_ns() // 1_000_000)
        ev.subject_for(event)
    except JobFileError as exc:
        fail_input(exc, file)
    except ev.InvalidId as exc:
        fail(f"{file}: {exc}", 2)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        fail(f"{file}: {' '.join(str(exc).split())[:300]}", 2)  # never a traceback

    access = resolve_access(nats_url, creds)

    async def main(track) -> int:
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            outcome = await submit_job(
                bus,
                event,
                wait=wait,
                timeout=timeout,
                on_published=_echo_outcome,
                read_log=may_read_log(access),
            )
        except StatusQueryError as exc:
            fail(str(exc), 2)
        finally:
            await bus.close()
        return _echo_outcome(outcome) if wait else outcome.code  # (the publish was echoed)

    raise typer.Exit(run_on_bus(main, timeout + 10))


def job_request_target(
    job_id: str,
    tenant: str | None,
    nats_url: str | None,
    creds: Path | None,
    data: Path = DEFAULT_DATA,
):
    """`(access, tenant)` of a request about one job (cancel, scale): the job id and tenant
    validated (exit 2), and without `--tenant` the tenant of a tenant's CI credential (None
    for other identities: the tenant that submitted the job)."""
    from gpuledger import events as ev

    try:
        ev.subjects.submit_filter(job_id)  # validates the job id
        if tenant is not None:
            ev.validate_tenant(tenant)
    except ev.InvalidId as exc:
        fail(str(exc), 2)
    access = resolve_access(nats_url, creds, data)
    if tenant is None and access.creds is not None:
        from gpuledger.services.runtime.auth import principal_of_creds

        kind, _, name = (principal_of_creds(access.creds) or "").partition(":")
        tenant = name if kind == "ci" else None
    return access, tenant


@app.command()
def cancel(
    job_id: str = typer.Argument(...),
    tenant: str | None = typer.Option(
        None, "--tenant", help="The job's tenant (default: the tenant that submitted it)."
    ),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP
    ),
    creds: Path | None = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP),
) -> None:
    """Publish JobCancelled for a submitted job, named by the id its tenant submitted (ids
    are per tenant: the operator passes --tenant where several tenants use the id). A job id
    the tenant does not have (another tenant's job of that id included) is refused: exit 1
    with `UnknownJob`, and nothing is published."""
    access, tenant = job_request_target(job_id, tenant, nats_url, creds)
    from gpuledger.services.runtime.client_requests import StatusQueryError, cancel_job

    async def main(track):
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            return await cancel_job(bus, tenant, job_id, read_log=may_read_log(access))
        except StatusQueryError as exc:
            fail(str(exc), 2)
        finally:
            await bus.close()

    _echo_outcome(run_on_bus(main))


@app.command()
def scale(
    job_id: str = typer.Argument(..., help="The service (a job submitted with kind: service)."),
    replicas: int = typer.Option(..., "--replicas", min=0, help="Replicas wanted from now on."),
    tenant: str | None = typer.Option(
        None, "--tenant", help="The service's tenant (default: the tenant that submitted it)."
    ),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP
    ),
    creds: Path | None = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP),
) -> None:
    """Publish ServiceScaled: a service's replica count from now on. New replicas are queued
    one at a time (a high-priority service may preempt lower-priority work for them); the
    highest replicas stop first when scaling down. A job id nobody submitted is refused:
    exit 1 with `UnknownJob`, and nothing is published; a job that is not a service is
    refused by admission (`RequestRefused`, `InvalidSpec`)."""
    from gpuledger import events as ev
    from gpuledger.services.domain.tooling.stamp import stamp

    access, tenant = job_request_target(job_id, tenant, nats_url, creds)

    async def main(track) -> None:
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            owner = tenant
            if owner is None:
                stored = await bus.last_message(ev.subjects.submit_filter(job_id))
                target = None if stored is None else ev.subjects.client_target(stored.subject)
                owner = None if target is None else target[1]
            if owner is None:
                fail(
                    f"no job {job_id!r}: nothing was submitted under this id; nothing to scale "
                    "(UnknownJob)",
                    1,
                )
            now = time.time_ns() // 1_000_000
            event = stamp(
                ev.ServiceScaled,
                key=f"{owner}:{job_id}@{now}",  # ids are per tenant
                producer="cli",
                now_ms=now,
                correlation_id=job_id,
                job_id=job_id,
                tenant=owner,
                replicas=replicas,
            )
            from gpuledger.services.runtime.intake import publish_client_event

            await publish_client_event(bus, event)  # a CI key asks the intake (issue 44)
        finally:
            await bus.close()

    run_on_bus(main)
    typer.echo(f"scale of {job_id} to {replicas} replicas requested")


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
            cluster = Cluster(server.access("admin"), path, doc, processes, data=data)
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
