"""`gpuledger ui`: the read-only web dashboard (argument handling only; the app is
projections/ui/)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.reading import DEFAULT_DATA

UI_DB = "ui-projection.duckdb"


def _check_options(
    port: int,
    tenant: str | None,
    whatif_dir: Path | None,
    nats_url: str | None,
    screenshot: Path | None,
) -> None:
    """Options that cannot work together or at all end the command (exit 2)."""
    from gpuledger import events as ev

    if not 0 < port < 65536:
        fail(f"--port: {port} is not a TCP port", 2)
    if tenant is not None:
        try:
            ev.validate_tenant(tenant)
        except ev.InvalidId as exc:
            fail(f"--tenant: {exc}", 2)
    if whatif_dir is not None and not whatif_dir.is_dir():
        fail(f"--whatif-dir: {whatif_dir} is not a folder", 2)
    if nats_url is not None and screenshot is not None:
        fail("--screenshot reads an existing projection: give --data or --db, not --nats-url", 2)


def _screenshots(app: Any, path: Path, whatif_dir: Path | None, screenshot: Path) -> None:
    """`--screenshot`: serve the app on a free loopback port, write a PNG of each page it
    shows into `screenshot` and print their paths (exit 4 projection busy, 1 no Chromium)."""
    from gpuledger.projections.reading import ProjectionError, connect_readonly
    from gpuledger.projections.ui.screenshot import NoBrowser, pages_to_show, shoot

    try:
        con = connect_readonly(path)
        try:
            from gpuledger.projections.ui.whatif import list_logs

            pages = pages_to_show(con, list_logs(whatif_dir) if whatif_dir else None)
        finally:
            con.close()
    except ProjectionError as exc:
        fail(str(exc), 4)
    p = _free_port()
    server, thread = _serve_in_thread(app, p)
    try:
        written = shoot(f"http://127.0.0.1:{p}", pages, screenshot)
    except NoBrowser as exc:
        fail(str(exc), 1)
    finally:
        server.should_exit = True
        thread.join(10)
    for w in written:
        typer.echo(str(w))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_in_thread(app, port: int):
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            fail("the dashboard did not start", 1)
        time.sleep(0.05)
    return server, t


def ui(
    port: int = typer.Option(8490, "--port", help="TCP port to listen on."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to listen on (default loopback only; "
        "put an authenticating TLS proxy in front before opening it wider).",
    ),
    data: Path = typer.Option(
        DEFAULT_DATA, "--data", help="Data directory (its projection.duckdb)."
    ),
    db: Path | None = typer.Option(
        None,
        "--db",
        help="Projection database (default <data>/projection.duckdb; "
        f"with --nats-url <data>/{UI_DB}).",
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        help="Project this NATS server's log live "
        "into the dashboard's own projection (as the auditor).",
    ),
    creds: Path | None = typer.Option(
        None,
        "--creds",
        envvar="GPULEDGER_CREDS",
        help="With --nats-url: "
        "credential file (default: the auditor's of `gpuledger up` in --data).",
    ),
    tenant: str | None = typer.Option(
        None, "--tenant", help="Show only this tenant (and its children)."
    ),
    tenant_header: str | None = typer.Option(
        None,
        "--tenant-header",
        help="Take each request's tenant "
        "from this header, set by an authenticating proxy (requests "
        "without it are refused).",
    ),
    whatif_dir: Path | None = typer.Option(
        None,
        "--whatif-dir",
        help="Folder of replay logs (JSONL, Parquet, DuckDB) the What-if page may compare.",
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Host header to accept besides localhost (the proxy's name); repeatable.",
    ),
    screenshot: Path | None = typer.Option(
        None,
        "--screenshot",
        help="Write a PNG of each page into this folder (headless Chromium) and exit.",
    ),
) -> None:
    """Read-only web dashboard over the projection: Cluster (GPU heatmap by leaf switch and
    NVLink clique, fragmentation), Queue (why each job waits), Job (its whole life on a
    timeline), Tenants (quota, fair share, borrowing over time), What-if (two logs compared).
    Pages follow the projector live. Exit codes: 2 invalid options or no projection, 1 no
    Chromium for --screenshot, 4 projection busy for --screenshot."""
    from gpuledger.projections.ui.app import create_app

    _check_options(port, tenant, whatif_dir, nats_url, screenshot)
    path = db if db is not None else data / (UI_DB if nats_url else "projection.duckdb")
    projector = None
    if nats_url is not None:
        from gpuledger.services.cli.connect import resolve_access

        access = resolve_access(nats_url, creds, data, principal="auditor")
        # its own projection, read through an ordered consumer (never the projector's durable one)
        cmd = [sys.executable, "-m", "gpuledger.projections.ui.feed", access.url, str(path)]
        if access.creds is not None:
            cmd += ["--creds", str(access.creds)]
        path.parent.mkdir(parents=True, exist_ok=True)
        projector = subprocess.Popen(cmd)
    elif not path.exists():
        fail(
            f"no projection at {path}: run `gpuledger project --log FILE` or `gpuledger up` first, "
            "or give --nats-url",
            2,
        )
    hosts = ["127.0.0.1", "localhost", "[::1]", *allowed_host]
    if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
        hosts.append(host)
    app = create_app(
        path, tenant=tenant, tenant_header=tenant_header, whatif_dir=whatif_dir, allowed_hosts=hosts
    )
    if screenshot is not None:
        _screenshots(app, path, whatif_dir, screenshot)
        return
    import uvicorn

    typer.echo(
        f"gpuledger ui: http://{host if ':' not in host else f'[{host}]'}:{port}/ "
        f"(projection {path}{', tenant ' + tenant if tenant else ''})",
        err=True,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="off")
    finally:
        if projector is not None:
            projector.terminate()
            try:
                projector.wait(10)
            except subprocess.TimeoutExpired:
                projector.kill()
