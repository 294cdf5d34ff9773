"""Live commands over NATS: up, run, apply, submit, cancel, demo.

Thin: argument handling and process wiring only; every decision is made by the deciders
through the runtime's host loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
import yaml

import events as ev
from services.cli.main import app, fail

DEFAULT_DATA = Path(".gpuledger")
URL_FILE = "nats-url"
NATS_URL_HELP = "NATS server URL (default: $GPULEDGER_NATS_URL, else the one `gpuledger up` runs in ./.gpuledger)."


def resolve_url(url: str | None, data: Path = DEFAULT_DATA) -> str:
    """The NATS URL to use: the given one, else the embedded server `gpuledger up` recorded."""
    if url:
        return url
    recorded = data / URL_FILE
    if recorded.exists():
        return recorded.read_text().strip()
    fail(f"no NATS server: pass --nats-url (or set GPULEDGER_NATS_URL), or start `gpuledger up` here "
         f"(it records its URL in {recorded})", 2)


def read_doc(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        doc = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{path}: {exc}", 2)
    if not isinstance(doc, dict):
        fail(f"{path}: expected a mapping at the top level", 2)
    return doc


async def cli_bus(url: str, ensure: bool = True):
    """A bus for a one-shot command: a few quick connection attempts, then a clear error
    (services, unlike commands, retry forever)."""
    import nats.errors

    from services.runtime.bus import Bus

    try:
        bus = await Bus.connect(url, name="gpuledger-cli", connect_attempts=3,
                                max_reconnect_attempts=2, connect_timeout=2, quiet=True)
    except (nats.errors.Error, OSError) as exc:
        fail(f"cannot reach NATS at {url}: {exc.__class__.__name__} {exc}".rstrip(), 3)
    if ensure:
        await bus.ensure_stream()
    return bus




async def publish_config(url: str, doc: dict[str, Any]) -> int:
    from services.domain.configfile import config_events

    bus = await cli_bus(url)
    try:
        n = 0
        for e in config_events(doc, producer="cli", at_ms=time.time_ns() // 1_000_000):
            await bus.publish(e)
            n += 1
        return n
    finally:
        await bus.close()


# ---------------------------------------------------------------------- processes


class Cluster:
    """The control plane plus simulated agents, in-process (asyncio tasks) or as processes."""

    def __init__(self, url: str, config: Path | None, doc: dict[str, Any], processes: bool,
                 data: Path | None = None) -> None:
        self.url, self.config, self.doc, self.processes = url, config, doc, processes
        self.data = data
        """Where the projector keeps projection.duckdb (None: no projector)."""
        self.children = None  # ServiceProcesses with --processes
        self.tasks: list[asyncio.Task] = []
        self.stop = asyncio.Event()

    async def start(self) -> None:
        from services.roles import CONTROL_PLANE, build
        from services.runtime.host import run_service

        if self.processes:
            from services.runtime.processes import ServiceProcesses

            self.children = ServiceProcesses(self.url, config=self.config)
            for role in CONTROL_PLANE:
                self.children.start(role)
            for node in self._nodes():
                self.children.start("node-agent", "--node", node, name=node)
            if self.data is not None:
                self.children.start("projector", "--data", str(self.data))
            return
        if self.data is not None:
            from projections.nats_source import run_projector

            self.data.mkdir(parents=True, exist_ok=True)
            self.tasks.append(asyncio.create_task(
                run_projector(self.url, self.data / "projection.duckdb", stop=self.stop)))
        for role in CONTROL_PLANE:
            self.tasks.append(asyncio.create_task(run_service(build(role), self.url, stop=self.stop)))
        if self._nodes():
            agent = build("node-agent", self.doc)
            self.tasks.append(asyncio.create_task(run_service(agent, self.url, stop=self.stop)))

    def _nodes(self) -> list[str]:
        from services.domain.configfile import node_infos

        return [n.name for n in node_infos(self.doc)]

    async def close(self) -> None:
        self.stop.set()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(t, 10)
        if self.children is not None:
            self.children.stop()


def embedded(data: Path | None, keep: bool):
    from services.runtime.nats_server import EmbeddedNats

    store = None
    if keep and data is not None:
        store = data / "nats"
        store.mkdir(parents=True, exist_ok=True)
    return EmbeddedNats(store, sync_always=keep)


# ---------------------------------------------------------------------- commands


@app.command()
def run(
    role: str = typer.Argument(..., help="admission | quota | scheduler | preemption | node-agent | projector"),
    nats_url: str | None = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP),
    config: Path | None = typer.Option(None, "--config", help="Cluster configuration (node agents read their nodes here)."),
    node: str | None = typer.Option(None, "--node", help="Node agent: the node to simulate (with --real: this node's name)."),
    real: bool = typer.Option(False, "--real", help="Node agent: run members as real processes (NVML discovery, else the GPUs declared in --config)."),
    work_dir: Path | None = typer.Option(None, "--work-dir", help="Real node agent: state, logs and checkpoints (default .gpuledger/agent)."),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="Projector: keeps projection.duckdb here."),
    leader_lease: float | None = typer.Option(None, "--leader-lease", help="Run as one of several replicas: decide only while holding the service's leader lease (TTL seconds)."),
) -> None:
    """Run one service against a NATS server (as compose runs each container)."""
    from services.roles import UnknownRole, build
    from services.runtime.host import serve

    nats_url = resolve_url(nats_url)
    if role == "projector":
        serve_projector(nats_url, data)
        return

    try:
        service = build(role, read_doc(config), node=node, instance=node or "0", real=real,
                        work_dir=None if work_dir is None else str(work_dir))
    except (UnknownRole, ValueError, RuntimeError) as exc:
        fail(str(exc), 2)
    serve(service, nats_url, lease_ttl_s=leader_lease)


def serve_projector(url: str, data: Path) -> None:
    """The single-writer projector as a process: stops within a few seconds on SIGTERM /
    SIGINT in any state (connecting, catching up, NATS down), exit status 0."""
    from projections.nats_source import run_projector
    from services.runtime.logging import configure_logging
    from services.runtime.stopping import run_until_signalled

    configure_logging()
    data.mkdir(parents=True, exist_ok=True)

    async def main(stop: asyncio.Event) -> None:
        await run_projector(url, data / "projection.duckdb", stop=stop)

    run_until_signalled(main, name="projector")


@app.command()
def apply(
    config: Path = typer.Argument(..., help="Configuration YAML (tenants, priority classes, policy)."),
    nats_url: str | None = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP),
) -> None:
    """Publish a configuration as events (what replays will see as in force from now)."""
    from services.domain.configfile import ConfigFileError

    try:
        n = asyncio.run(publish_config(resolve_url(nats_url), read_doc(config)))
    except ConfigFileError as exc:
        fail(str(exc), 2)
    typer.echo(f"published {n} configuration events")


@app.command()
def up(
    config: Path | None = typer.Option(None, "--config", help="Cluster configuration YAML."),
    nats_url: str | None = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help="Use this NATS instead of the embedded one."),
    processes: bool = typer.Option(False, "--processes", help="Run each service as its own OS process."),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="Where the embedded NATS keeps its store."),
) -> None:
    """Run the whole scheduler: embedded NATS (unless --nats-url), every service, simulated agents."""
    from services.runtime.logging import configure_logging

    configure_logging()
    doc = read_doc(config)

    async def main() -> None:
        import signal

        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        server = None
        url = nats_url
        if url is None:
            server = embedded(data, keep=True).start()
            url = server.url
            (data / URL_FILE).write_text(url + "\n")
        typer.echo(f"gpuledger up: NATS at {url}; projection in {data / 'projection.duckdb'} "
                   "(Ctrl-C to stop)", err=True)
        try:
            await publish_config(url, doc)
            cluster = Cluster(url, config, doc, processes, data=data)
            await cluster.start()
            try:
                await stop.wait()
            finally:
                await cluster.close()
        finally:
            if server is not None:
                (data / URL_FILE).unlink(missing_ok=True)
                server.stop()

    asyncio.run(main())


@app.command()
def submit(
    file: Path = typer.Argument(..., help="Job YAML/JSON file, or - for standard input."),
    nats_url: str | None = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP),
    wait: bool = typer.Option(False, "--wait", help="Wait for the admission decision; exit 1 on rejection."),
    timeout: float = typer.Option(30.0, help="Seconds to wait with --wait."),
) -> None:
    """Publish JobSubmitted (idempotent by job id: a retried submission is the same job)."""
    from services.domain.jobfile import JobFileError, job_spec
    from services.domain.stamp import submission
    from services.runtime.bus import AlreadyExists

    try:
        spec = job_spec(read_doc(file))
        event = submission(spec, producer="cli", now_ms=time.time_ns() // 1_000_000)
        ev.subject_for(event)
    except (JobFileError, ev.InvalidId) as exc:
        fail(str(exc), 2)

    url = resolve_url(nats_url)

    async def main() -> int:
        bus = await cli_bus(url)
        try:
            try:
                seq = await bus.create_once(event)
            except AlreadyExists:
                fail(f"job {spec.job_id} already exists with a different submission", 3)
            typer.echo(f"submitted {spec.job_id} (seq {seq})", err=True)
            if not wait:
                return 0
            deadline = time.monotonic() + timeout
            async for rec in bus.follow(seq):
                with contextlib.suppress(ev.UndecodableEvent):
                    e = ev.decode(rec.data)
                    if isinstance(e, ev.JobAdmitted) and e.job_id == spec.job_id:
                        typer.echo(f"admitted {spec.job_id} (priority {e.priority})")
                        return 0
                    if isinstance(e, ev.JobRejected) and e.job_id == spec.job_id:
                        typer.echo(f"rejected {spec.job_id}: {e.reason}: {e.message}", err=True)
                        return 1
                if time.monotonic() > deadline:
                    break
            typer.echo(f"no admission decision for {spec.job_id} within {timeout:g}s", err=True)
            return 4
        finally:
            await bus.close()

    raise typer.Exit(asyncio.run(asyncio.wait_for(main(), timeout + 10)))


@app.command()
def cancel(
    job_id: str = typer.Argument(...),
    tenant: str = typer.Option(..., "--tenant"),
    nats_url: str | None = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP),
) -> None:
    """Publish JobCancelled."""
    from services.domain.stamp import stamp

    event = stamp(ev.JobCancelled, key=job_id, producer="cli", now_ms=time.time_ns() // 1_000_000,
                  correlation_id=job_id, job_id=job_id, tenant=tenant)

    url = resolve_url(nats_url)

    async def main() -> None:
        bus = await cli_bus(url)
        try:
            await bus.publish(event)
        finally:
            await bus.close()

    asyncio.run(main())
    typer.echo(f"cancel requested for {job_id}")


DEMO_MARK = "DEMO"


def prepare_demo_data(data: Path) -> None:
    """The demo starts from nothing: it clears a previous demo's store and projection in
    `data`, and refuses to touch a directory holding anything else."""
    import shutil

    store, db, mark = data / "nats", data / "projection.duckdb", data / DEMO_MARK
    if (store.exists() or db.exists()) and not mark.exists():
        fail(f"{data} holds a store that a demo did not create; use --data with another directory", 2)
    shutil.rmtree(store, ignore_errors=True)
    for f in (db, data / "projection.duckdb.wal"):
        f.unlink(missing_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    mark.write_text("created by gpuledger demo; the next demo run replaces this directory's data\n")


@app.command()
def demo(
    processes: bool = typer.Option(False, "--processes", help="Run each service as its own OS process."),
    scenario_file: Path | None = typer.Option(None, "--scenario", help="Another scenario to play live."),
    timeout: float = typer.Option(90.0, help="Give up after this many seconds."),
    data: Path = typer.Option(DEFAULT_DATA, "--data", help="Keeps the NATS store and the projection here."),
) -> None:
    """Embedded NATS, a small simulated cluster, a scripted scenario with a preemption, and
    a readable timeline at the end. Afterwards `gpuledger why`, `jobs` and `sql` read its
    projection in --data (a previous demo's data there is replaced)."""
    from replay import live_player
    from replay.report import job_rows
    from replay.scenario import ScenarioError, load
    from replay.timeline import format_line
    from services.runtime.logging import configure_logging

    os.environ.setdefault("GPULEDGER_LOG_LEVEL", "warning")
    configure_logging()
    path = scenario_file or Path(__file__).resolve().parents[2] / "replay" / "scenarios" / "demo.yaml"
    try:
        sc = load(path)
    except ScenarioError as exc:
        fail(str(exc), 2)
    doc = read_doc(path)
    job_ids = [e.job.job_id for _, e in sc.inputs if isinstance(e, ev.JobSubmitted)]

    prepare_demo_data(data)

    async def main() -> None:
        with embedded(data, keep=True) as server:
            typer.echo(f"embedded NATS at {server.url}; playing scenario {sc.name!r} live...")
            bus = await cli_bus(server.url)
            cluster = Cluster(server.url, path, doc, processes, data=data)
            try:
                await live_player.publish_config(bus, sc)
                await cluster.start()
                await live_player.wait_for_nodes(bus, [n.name for n in sc.nodes], 30)
                started = time.monotonic()
                await live_player.play(bus, sc)
                ledger = await live_player.wait_for_jobs(bus, job_ids, timeout)
                _, log = await live_player.fold(bus)
                origin = min((e.occurred_at_ms for _, _, e in log if isinstance(e, ev.JobSubmitted)), default=0)
                typer.echo("\nTIMELINE")
                for _, _, e in log:
                    line = format_line(e, origin)
                    if line is not None:
                        typer.echo(line)
                typer.echo("\nSUMMARY")
                typer.echo(f"{'JOB':<12}{'TENANT':<10}{'CLASS':<12}{'STATE':<11}{'PLACED':>7}{'PREEMPTED':>10}  LOST GPU-s")
                for row in job_rows(ledger):
                    lost = sum(p["lost_gpu_s"] for p in row["preemptions"])
                    typer.echo(f"{row['id']:<12}{row['tenant']:<10}{row['priority_class']:<12}{row['state']:<11}"
                               f"{len(row['placements']):>7}{len(row['preemptions']):>10}  {lost:.1f}")
                typer.echo(f"\n{len(log)} events on the bus; wall time {time.monotonic() - started:.1f}s")
                await live_player.wait_for_projection(data / "projection.duckdb", log[-1][0] if log else 0, 20)
                typer.echo(f"projection: {data / 'projection.duckdb'} — try `gpuledger why pretrain`, "
                           "`gpuledger jobs`, `gpuledger sql \"SELECT * FROM who_preempted\"`")
            finally:
                await cluster.close()
                await bus.close()

    asyncio.run(main())
