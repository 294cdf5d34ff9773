"""The dashboard's web app (Starlette): read-only pages over the DuckDB projection.

Readers never disturb the projector: every page reads through the projector when one serves
the file (projections/served.py), else opens the file read-only, reads, and closes it at once
(one connection at a time, waiting at most a few seconds, else 503 and the page retries); the
live feed (`/api/seq`, server-sent events) looks at the file's size and modification time and
reads only when they change."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import duckdb
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gpuledger import events as ev
from gpuledger.projections.queries import UnknownJob
from gpuledger.projections.store import ProjectionBusy, ProjectionError, connect_readonly
from gpuledger.projections.ui import data, html, whatif

STATIC = Path(__file__).with_name("static")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class Reader:
    """Short read-only connections to one projection file (through its projector when one
    serves it), one at a time."""

    def __init__(self, path: str | Path, wait_s: float = 5.0) -> None:
        self.path = Path(path)
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._sig: tuple | None = None
        self._seq: int | None = None

    def read(self, fn, *args: Any, **kw: Any) -> Any:
        with self._lock:
            con = connect_readonly(self.path, wait_s=self.wait_s)
            try:
                return fn(con, *args, **kw)
            finally:
                con.close()

    def signature(self) -> tuple:
        out = []
        for p in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                st = p.stat()
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def last_seq(self) -> int | None:
        """The projection's last applied sequence; the file is opened only when it changed."""
        sig = self.signature()
        if sig != self._sig:
            try:
                self._seq = self.read(lambda con: data.clock(con)["last_seq"])
                self._sig = sig
            except ProjectionError:  # busy or missing: try again at the next poll
                pass
        return self._seq


SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """ASGI middleware: the same headers on every response (pages, static files, feed)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                names = {k for k, _ in SECURITY_HEADERS}
                message["headers"] = [
                    h for h in message.get("headers", []) if h[0] not in names
                ] + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(
    db_path: str | Path,
    *,
    tenant: str | None = None,
    tenant_header: str | None = None,
    whatif_dir: str | Path | None = None,
    allowed_hosts: list[str] | None = None,
    poll_s: float = 1.0,
    read_wait_s: float = 5.0,
) -> Starlette:
    """The dashboard over the projection at `db_path`. `tenant` confines every page to one
    tenant (and its children); `tenant_header` takes that tenant from a request header set by an
    authenticating proxy (a request without it is refused). `whatif_dir` is the folder of logs
    the What-if page may open."""
    if tenant is not None:
        ev.validate_tenant(tenant)
    reader = Reader(db_path, wait_s=read_wait_s)
    wdir = Path(whatif_dir) if whatif_dir is not None else None

    def scope(request: Request) -> str | None:
        if tenant_header:
            value = request.headers.get(tenant_header)
            if not value:
                raise PermissionError(
                    f"no {tenant_header} header: this dashboard shows one tenant per request"
                )
            ev.validate_tenant(value)  # InvalidId
            if tenant and not data.in_tenant(value, tenant):
                raise PermissionError(f"tenant {value} is outside {tenant}")
            return value
        return tenant

    async def page(request: Request, title: str, active: str, build) -> Response:
        try:
            who = scope(request)
        except (PermissionError, ev.InvalidId) as exc:
            return HTMLResponse(
                html.layout(
                    "Forbidden",
                    active,
                    html.error_page("Forbidden", str(exc)),
                    seq=None,
                    tenant=None,
                    live=False,
                ),
                403,
            )
        try:
            body, seq, status = await run_in_threadpool(reader.read, lambda con: build(con, who))
        except ProjectionBusy as exc:
            resp = HTMLResponse(
                html.layout(
                    title,
                    active,
                    html.error_page("Projection busy", f"{exc}; the page retries."),
                    seq=None,
                    tenant=who,
                    live=False,
                    retry_s=2,
                ),
                503,
            )
            resp.headers["Retry-After"] = "2"
            return resp
        except ProjectionError as exc:
            return HTMLResponse(
                html.layout(
                    title,
                    active,
                    html.error_page("No projection", str(exc)),
                    seq=None,
                    tenant=who,
                    live=False,
                ),
                503,
            )
        except duckdb.CatalogException as exc:  # a file an older projector wrote (no audit views)
            return HTMLResponse(
                html.layout(
                    title,
                    active,
                    html.error_page(
                        "Projection from an older gpuledger",
                        f"{exc.args[0].splitlines()[0] if exc.args else exc}: the projector adds the views when "
                        "it next opens the file (restart it, or run `gpuledger project --log FILE`)",
                    ),
                    seq=None,
                    tenant=who,
                    live=False,
                ),
                503,
            )
        return HTMLResponse(html.layout(title, active, body, seq=seq, tenant=who), status)

    async def cluster(request: Request) -> Response:
        def build(con, who):
            return html.cluster_page(data.cluster(con, who), who), data.clock(con)["last_seq"], 200

        return await page(request, "Cluster", "cluster", build)

    async def queue(request: Request) -> Response:
        tf = request.query_params.get("tenant") or None
        cf = request.query_params.get("class") or None

        def build(con, who):
            d = data.queue(con, who, tenant_filter=tf, class_filter=cf)
            return html.queue_page(d, who, tf, cf), data.clock(con)["last_seq"], 200

        return await page(request, "Queue", "queue", build)

    async def jobs_list(request: Request) -> Response:
        from gpuledger.projections.ui import jobs as jobs_ui

        try:
            q = jobs_ui.JobsQuery.parse(request.query_params)
        except jobs_ui.BadFilter as exc:
            return HTMLResponse(
                html.layout(
                    "Jobs",
                    "jobs",
                    html.error_page("Bad filter", str(exc)),
                    seq=None,
                    tenant=None,
                    live=False,
                ),
                400,
            )

        def build(con, who):
            d = jobs_ui.jobs(con, who, q)
            return jobs_ui.jobs_page(d, q, who), data.clock(con)["last_seq"], 200

        return await page(request, "Jobs", "jobs", build)

    async def job(request: Request) -> Response:
        job_id = request.path_params["job_id"]

        def build(con, who):
            seq = data.clock(con)["last_seq"]
            try:
                d = data.job(con, job_id, who)
            except UnknownJob:
                return (
                    html.error_page(
                        "Unknown job",
                        f"no job {job_id!r}"
                        + (f" of tenant {who}" if who else "")
                        + " in the projection",
                    ),
                    seq,
                    404,
                )
            return html.job_page(d), seq, 200

        return await page(request, f"Job {job_id}", "", build)

    async def tenants(request: Request) -> Response:
        def build(con, who):
            return html.tenants_page(data.tenants(con, who)), data.clock(con)["last_seq"], 200

        return await page(request, "Tenants", "tenants", build)

    async def whatif_view(request: Request) -> Response:
        try:
            who = scope(request)
        except (PermissionError, ev.InvalidId) as exc:
            return HTMLResponse(html.error_page("Forbidden", str(exc)), 403)
        if who:  # replay logs hold every tenant's jobs
            return HTMLResponse(
                html.layout(
                    "What-if",
                    "whatif",
                    html.error_page(
                        "Not in a tenant view", "what-if logs hold every tenant's jobs"
                    ),
                    seq=None,
                    tenant=who,
                    live=False,
                ),
                403,
            )
        logs = whatif.list_logs(wdir) if wdir is not None and wdir.is_dir() else []
        a, b = request.query_params.get("a"), request.query_params.get("b")
        result, error, status = None, None, 200
        if wdir is not None and a and b:
            try:
                result = await run_in_threadpool(
                    whatif.compare_logs, whatif.resolve(wdir, a), whatif.resolve(wdir, b)
                )
            except ValueError as exc:  # CompareError is a ValueError
                error, status = str(exc), 400
        body = html.whatif_page(
            logs,
            a or (logs[0] if logs else None),
            b or (logs[1] if len(logs) > 1 else None),
            result,
            error,
            wdir is not None,
        )
        return HTMLResponse(
            html.layout("What-if", "whatif", body, seq=None, tenant=None, live=False), status
        )

    async def seq_feed(request: Request) -> Response:
        async def stream():
            sent = None
            beat = 0.0
            while not await request.is_disconnected():
                seq = await run_in_threadpool(reader.last_seq)
                if seq is not None and seq != sent:
                    sent = seq
                    yield f"data: {seq}\n\n"
                elif beat >= 15:
                    yield ": keep-alive\n\n"
                    beat = 0.0
                await asyncio.sleep(poll_s)
                beat += poll_s

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def root(request: Request) -> Response:
        return RedirectResponse("/cluster", 303)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [
        Route("/", root),
        Route("/cluster", cluster),
        Route("/queue", queue),
        Route("/jobs", jobs_list),
        Route("/jobs/{job_id}", job),
        Route("/tenants", tenants),
        Route("/whatif", whatif_view),
        Route("/api/seq", seq_feed),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(
            TrustedHostMiddleware,
            allowed_hosts=allowed_hosts or ["127.0.0.1", "localhost", "[::1]"],
        ),
    ]
    return Starlette(routes=routes, middleware=middleware)
