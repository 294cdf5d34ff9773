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
from gpuledger.projections.ui import data, views, whatif

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


class Dashboard:
    """The dashboard's request handlers over one projection: who may see what (`scope`), the
    page frame (`page`: read, render, or the error page that says why not), and one handler
    per route."""

    def __init__(
        self,
        reader: Reader,
        *,
        tenant: str | None,
        tenant_header: str | None,
        whatif_dir: Path | None,
        poll_s: float,
    ) -> None:
        self.reader = reader
        self.tenant = tenant
        self.tenant_header = tenant_header
        self.wdir = whatif_dir
        self.poll_s = poll_s

    def scope(self, request: Request) -> str | None:
        """The tenant this request is confined to (None: all); PermissionError or InvalidId
        when the proxy's header is missing, malformed or outside the dashboard's tenant."""
        if not self.tenant_header:
            return self.tenant
        value = request.headers.get(self.tenant_header)
        if not value:
            raise PermissionError(
                f"no {self.tenant_header} header: this dashboard shows one tenant per request"
            )
        ev.validate_tenant(value)  # InvalidId
        if self.tenant and not data.in_tenant(value, self.tenant):
            raise PermissionError(f"tenant {value} is outside {self.tenant}")
        return value

    async def page(self, request: Request, title: str, active: str, build) -> Response:
        """`build(con, who, seq)` -> (page, status) under one read-only connection; a 403, 503
        or retrying page when the viewer or the projection does not allow it."""
        try:
            who = self.scope(request)
        except (PermissionError, ev.InvalidId) as exc:
            return HTMLResponse(views.error_page("Forbidden", str(exc), active=active), 403)

        def read(con):
            return build(con, who, data.clock(con)["last_seq"])

        try:
            body, status = await run_in_threadpool(self.reader.read, read)
        except ProjectionError as exc:
            return _unreadable(exc, title, active, who)
        except duckdb.CatalogException as exc:  # a file an older projector wrote (no views)
            first = exc.args[0].splitlines()[0] if exc.args else exc
            return HTMLResponse(
                views.error_page(
                    "Projection from an older gpuledger",
                    f"{first}: the projector adds the views when it next opens the file "
                    "(restart it, or run `gpuledger project --log FILE`)",
                    title=title,
                    active=active,
                    tenant=who,
                ),
                503,
            )
        return HTMLResponse(body, status)

    async def cluster(self, request: Request) -> Response:
        def build(con, who, seq):
            return views.cluster_page(data.cluster(con, who), seq=seq, tenant=who), 200

        return await self.page(request, "Cluster", "cluster", build)

    async def queue(self, request: Request) -> Response:
        tf = request.query_params.get("tenant") or None
        cf = request.query_params.get("class") or None

        def build(con, who, seq):
            d = data.queue(con, who, tenant_filter=tf, class_filter=cf)
            return views.queue_page(d, tf, cf, seq=seq, tenant=who), 200

        return await self.page(request, "Queue", "queue", build)

    async def jobs_list(self, request: Request) -> Response:
        from gpuledger.projections.ui import jobs as jobs_ui

        try:
            q = jobs_ui.JobsQuery.parse(request.query_params)
        except jobs_ui.BadFilter as exc:
            return HTMLResponse(views.error_page("Bad filter", str(exc), active="jobs"), 400)

        def build(con, who, seq):
            return jobs_ui.jobs_page(jobs_ui.jobs(con, who, q), q, seq=seq, tenant=who), 200

        return await self.page(request, "Jobs", "jobs", build)

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]

        def build(con, who, seq):
            try:
                d = data.job(con, job_id, who)
            except UnknownJob:
                message = f"no job {job_id!r}" + (f" of tenant {who}" if who else "")
                return views.error_page(
                    "Unknown job",
                    message + " in the projection",
                    title=f"Job {job_id}",
                    seq=seq,
                    tenant=who,
                    live=True,  # the job may yet arrive
                ), 404
            return views.job_page(d, seq=seq, tenant=who), 200

        return await self.page(request, f"Job {job_id}", "", build)

    async def tenants(self, request: Request) -> Response:
        def build(con, who, seq):
            return views.tenants_page(data.tenants(con, who), seq=seq, tenant=who), 200

        return await self.page(request, "Tenants", "tenants", build)

    async def whatif_view(self, request: Request) -> Response:
        try:
            who = self.scope(request)
        except (PermissionError, ev.InvalidId) as exc:
            return HTMLResponse(views.error_page("Forbidden", str(exc), active="whatif"), 403)
        if who:  # replay logs hold every tenant's jobs
            return HTMLResponse(
                views.error_page(
                    "Not in a tenant view",
                    "what-if logs hold every tenant's jobs",
                    title="What-if",
                    active="whatif",
                    tenant=who,
                ),
                403,
            )
        wdir = self.wdir
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
        body = views.whatif_page(
            logs,
            a or (logs[0] if logs else None),
            b or (logs[1] if len(logs) > 1 else None),
            result,
            error,
            wdir is not None,
            seq=None,
            tenant=None,
            live=False,
        )
        return HTMLResponse(body, status)

    async def seq_feed(self, request: Request) -> Response:
        async def stream():
            sent = None
            beat = 0.0
            while not await request.is_disconnected():
                seq = await run_in_threadpool(self.reader.last_seq)
                if seq is not None and seq != sent:
                    sent = seq
                    yield f"data: {seq}\n\n"
                elif beat >= 15:
                    yield ": keep-alive\n\n"
                    beat = 0.0
                await asyncio.sleep(self.poll_s)
                beat += self.poll_s

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def root(self, request: Request) -> Response:
        return RedirectResponse("/cluster", 303)

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    def routes(self) -> list:
        return [
            Route("/", self.root),
            Route("/cluster", self.cluster),
            Route("/queue", self.queue),
            Route("/jobs", self.jobs_list),
            Route("/jobs/{job_id}", self.job),
            Route("/tenants", self.tenants),
            Route("/whatif", self.whatif_view),
            Route("/api/seq", self.seq_feed),
            Route("/healthz", self.healthz),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]


def _unreadable(exc: ProjectionError, title: str, active: str, who: str | None) -> Response:
    """503 for a projection the page cannot read now: busy (the page retries by itself) or
    missing."""
    if isinstance(exc, ProjectionBusy):
        resp = HTMLResponse(
            views.error_page(
                "Projection busy",
                f"{exc}; the page retries.",
                title=title,
                active=active,
                tenant=who,
                retry_s=2,
            ),
            503,
        )
        resp.headers["Retry-After"] = "2"
        return resp
    return HTMLResponse(
        views.error_page("No projection", str(exc), title=title, active=active, tenant=who), 503
    )


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
    dashboard = Dashboard(
        Reader(db_path, wait_s=read_wait_s),
        tenant=tenant,
        tenant_header=tenant_header,
        whatif_dir=Path(whatif_dir) if whatif_dir is not None else None,
        poll_s=poll_s,
    )
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(
            TrustedHostMiddleware,
            allowed_hosts=allowed_hosts or ["127.0.0.1", "localhost", "[::1]"],
        ),
    ]
    return Starlette(routes=dashboard.routes(), middleware=middleware)
