"""The cluster `gpuledger up` runs: the control plane plus simulated agents, in-process
(asyncio tasks) or as processes, supervised (services/runtime/supervisor.py), with its status
file, store probe and Prometheus targets.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from gpuledger.services.runtime.auth import LEASE_TTL_S as DEFAULT_LEASE_S
from gpuledger.services.runtime.status_file import DEFAULT_DATA


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
        service_metrics: Any = None,
        projector: Any = None,
    ) -> None:
        import asyncio

        self.store_watch = store_watch
        self.nats_server = nats_server
        """The embedded server (or cluster) `up` started, whose failed credential reloads
        `status` shows (None: an external NATS)."""
        """A StoreWatch (services/runtime/storefull.py) probing the store once a second, the
        embedded server's or an external one's (None: no probe)."""
        self.access, self.url, self.doc, self.processes = access, access.url, doc, processes
        self.metrics_port, self.metrics_addr = metrics_port, metrics_addr
        """With a metrics port: the aggregate exporter (a `gpuledger metrics` child process,
        so it never shares a process with the projection's writer) on it, and the services'
        own metrics on the next ports (`endpoints`)."""
        self.service_metrics = service_metrics
        """With a metrics port: `(port, addr) -> ServiceCollector`, serving the services' own
        metrics (the CLI's `start_service_metrics`, which exits 2 when the port is taken)."""
        self.projector = projector
        """In-process with a data directory: `(url, db, stop, options) -> (status, run)`, the
        projector as a supervised task (projections/projector_process.py
        `in_process_projector`; the projections sit above the runtime, so it is passed in)."""
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
            collector = self.service_metrics(self.metrics_port + 1, self.metrics_addr)
            self.endpoints.append(("services", self._url(self.metrics_port + 1)))
            self._start_exporter()
        if self.data is not None:
            if self.projector is None:
                raise ValueError("an in-process cluster with a data directory needs its projector")
            st = self.board.add("projector", "projector")
            ps, run = self.projector(
                self.url,
                self.data / "projection.duckdb",
                self.stop,
                lambda: self._options("projector"),
            )
            if collector is not None:
                collector.add_projector(ps, lambda: self.board.stream_last_seq)
            self.tasks.append(asyncio.create_task(supervise_task(st, run, self.stop)))
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
                await self._pause(interval_s)
        finally:
            await _close_quietly(bus)

    async def _pause(self, interval_s: float) -> None:
        """Wait `interval_s`, or less when `up` is stopping (a watch loop's round)."""
        import asyncio

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), interval_s)

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
                await self._pause(interval_s)
        finally:
            await _close_quietly(bus)

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


async def _close_quietly(bus) -> None:
    """Close a watch loop's bus, if it ever connected; its errors do not stop `up`."""
    if bus is not None:
        with contextlib.suppress(Exception):
            await bus.close()


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
