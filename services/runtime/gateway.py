"""`gpuledger gateway`: an HTTP endpoint for CI systems without a NATS client.

    POST   /v1/tenants/{tenant}/jobs[?wait=true&timeout=30]   body: a job file (JSON or YAML)
    (a tenant such as `org/a` is written as it is: /v1/tenants/org/a/jobs)
    GET    /v1/tenants/{tenant}/jobs/{job}                    the job's JobStatus (JSON)
    DELETE /v1/tenants/{tenant}/jobs/{job}                    cancel
    POST   /v1/tenants/{tenant}/jobs/{job}/hold               hold, release, requeue, top:
    POST   .../jobs/{job}/release | /requeue | /top            body {"reason": "..."} or none
    PATCH  /v1/tenants/{tenant}/jobs/{job}                    update: body {"priority": N} |
                                                              {"nice": N} | {"class": C}
    GET    /healthz

Every /v1 request carries `Authorization: Bearer <token>`, a token of {tenant} or of one of
its users (services/runtime/gateway_tokens.py). The gateway connects to NATS as the `gateway`
identity and does exactly what `gpuledger submit` / `cancel` do
(services/runtime/client_requests.py), and `hold` / `release` / `requeue` / `top` / `update`
as a tenant's CI key does them (services/runtime/job_control.py: the same input checks and
the same refusals, one function for both).

Invariants:
- a request acts only within the tenant of its token: the path tenant must be the token's,
  and a submitted body's tenant the path's (403 otherwise); missing or unknown token: 401;
- a user's token acts only as that user (issue 43): a body naming no user is that user's, one
  naming another is refused `NotYourUser` (403) before anything is sent; its submissions and
  cancels travel on that user's own intake subjects (`glu.<verb>.<tenant>.<user>.<job>`), so
  the admission service holds them to that user on its folded state, as it holds a per-user
  credential (another user's job: 404 `UnknownJob`, the answer for an id nobody has);
- a job verb acts as the tenant (`actor: tenant`), never as the operator: a tenant's token on
  its tenant's jobs, a user's token on its user's jobs only (a colleague's job: 404
  `UnknownJob` as for cancel, nothing sent); what cannot apply is refused at once with the CLI's reason
  (422, nothing published), another tenant's job is answered as an id nobody has (404);
- ids are validated before they become subject tokens (400), bodies over `max_body` bytes are
  refused unread (413), YAML aliases are refused (no alias bombs);
- the gateway never reads the log: without an admission service to ask it answers 503;
- one structlog line per request (`gateway.request`), never the token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gpuledger import events as ev
from gpuledger.events.reasons import RequestReason
from gpuledger.services.runtime import client_requests as cr
from gpuledger.services.runtime import job_control as jc
from gpuledger.services.runtime.documents import DocumentError, load_document
from gpuledger.services.runtime.gateway_tokens import TokenFileError, Tokens

log = structlog.get_logger("gpuledger.gateway")

MAX_BODY = 1 << 20
MAX_WAIT_S = 300.0
PRODUCER = "gateway"

HTTP_STATUS = {
    cr.SUBMITTED: 202,
    cr.DUPLICATE: 200,
    cr.ADMITTED: 200,
    cr.REJECTED: 422,
    cr.REFUSED: 422,
    cr.CONFLICT: 409,
    cr.TIMEOUT: 504,
    cr.CANCEL_REQUESTED: 202,
    cr.UNKNOWN_JOB: 404,
    cr.UNAVAILABLE: 503,
    jc.REQUESTED: 202,
}
ROUTED_VERBS = {
    "hold": ev.JobHeld,
    "release": ev.JobReleased,
    "requeue": ev.JobRequeued,
    "top": ev.JobMovedToTop,
}
"""`POST .../jobs/{job}/<name>`: the job verbs without fields of their own."""
VERB_FIELDS = {"reason"}
"""What a body of hold, release, requeue and top may name."""
UPDATE_FIELDS = {"priority", "nice", "class", "reason"}
"""What an update's body may name (exactly one of priority, nice and class)."""


class HttpError(Exception):
    """A request answered with `status` and `{"reason", "message"}`."""

    def __init__(self, status: int, reason: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.extra = status, reason, message, extra


def outcome_body(outcome: cr.Outcome) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON body of a client request's outcome."""
    body: dict[str, Any] = {"job_id": outcome.job_id}
    if outcome.reason == RequestReason.NotYourUser:  # the intake held a user's token to it
        return 403, {**body, "reason": outcome.reason, "message": outcome.message or outcome.text}
    if outcome.status in (
        cr.SUBMITTED,
        cr.DUPLICATE,
        cr.ADMITTED,
        cr.CANCEL_REQUESTED,
        jc.REQUESTED,
    ):
        body["state"] = {cr.DUPLICATE: "already_submitted"}.get(outcome.status, outcome.status)
        if outcome.seq is not None:
            body["seq"] = outcome.seq
        if outcome.priority is not None:
            body["priority"] = outcome.priority
        body["message"] = outcome.text
    else:
        body["reason"] = outcome.reason or {
            cr.TIMEOUT: "Timeout",
            cr.UNAVAILABLE: "Unavailable",
        }.get(outcome.status, outcome.status)
        body["message"] = outcome.message or outcome.text
    return HTTP_STATUS[outcome.status], body


def parse_body(data: bytes) -> Any:
    """A request body (JSON or YAML, no aliases, bounded nesting) as a document; HttpError
    400."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, RequestReason.InvalidSpec, "body: not UTF-8") from None
    try:
        return load_document(text, aliases=False)
    except DocumentError as exc:
        raise HttpError(400, RequestReason.InvalidSpec, f"body: {exc}") from None


def as_user(doc: Any, user: str | None) -> Any:
    """The posted document as a user's token submits it: its `user:` filled in with `user`
    when it names none; HttpError 403 `NotYourUser` when it names another. Unchanged for a
    tenant's token (`user` None), which vouches for any user it names."""
    if user is None or not isinstance(doc, dict):
        return doc
    named = doc.get("user")
    if named is None:
        return {**doc, "user": user}
    if named != user:
        raise HttpError(
            403,
            RequestReason.NotYourUser,
            f"body: user: the token of user {user} submits as {user} only; this job names "
            f"user {str(named)[:130]!r}",
        )
    return doc


def job_event(doc: Any, tenant: str) -> ev.JobSubmitted:
    """The submission of a job document posted for `tenant`; HttpError 400 / 403."""
    from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec
    from gpuledger.services.domain.tooling.stamp import submission

    if not isinstance(doc, dict):
        raise HttpError(
            400,
            RequestReason.InvalidSpec,
            f"body: (top level): expected a mapping of keys, got {type(doc).__name__}",
        )
    claimed = doc.get("tenant")
    if isinstance(claimed, str) and claimed != tenant:
        raise HttpError(
            403,
            "Forbidden",
            f"body: tenant: {claimed!r} is not the tenant of this path ({tenant!r})",
        )
    try:
        spec = job_spec(doc)
        event = submission(spec, producer=PRODUCER, now_ms=time.time_ns() // 1_000_000)
        ev.subject_for(event)
    except JobFileError as exc:
        lines = [line.removeprefix("error: ") for line in exc.lines("body")]
        raise HttpError(400, RequestReason.InvalidSpec, lines[0], errors=lines) from None
    except ev.InvalidId as exc:
        raise HttpError(400, RequestReason.InvalidSpec, f"body: {exc}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # whatever validation did not foresee is still a 400 with a reason, never a 500
        raise HttpError(
            400, RequestReason.InvalidSpec, f"body: {' '.join(str(exc).split())[:300]}"
        ) from None
    if spec.tenant != tenant:
        raise HttpError(
            403,
            "Forbidden",
            f"body: tenant: {spec.tenant!r} is not the tenant of this path ({tenant!r})",
        )
    return event


def control_fields(cls: type, doc: Any) -> dict[str, int | str | None]:
    """The event fields of a job verb `cls` from its posted body (None: no body), checked as
    the CLI checks its options (`job_control.request_fields`); HttpError 400 naming the
    field."""
    allowed = UPDATE_FIELDS if cls is ev.JobPriorityChanged else VERB_FIELDS
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise HttpError(
            400, "InvalidRequest", f"body: expected a mapping, got {type(doc).__name__}"
        )
    unknown = sorted(str(k)[:40] for k in doc if k not in allowed)
    if unknown:
        raise HttpError(
            400,
            "InvalidRequest",
            f"body: unknown field {unknown[0]!r} (expected {', '.join(sorted(allowed))})",
        )
    for key in ("priority", "nice"):
        if key in doc and (type(doc[key]) is not int):
            raise HttpError(400, "InvalidRequest", f"body: {key}: expected an integer")
    for key in ("class", "reason"):
        if key in doc and not isinstance(doc[key], str):
            raise HttpError(400, "InvalidRequest", f"body: {key}: expected a string")
    try:
        return jc.request_fields(
            cls,
            doc.get("reason", ""),
            priority=doc.get("priority"),
            nice=doc.get("nice"),
            klass=doc.get("class"),
            flag="",
        )
    except ValueError as exc:
        raise HttpError(400, "InvalidRequest", f"body: {exc}") from None


def wait_args(query) -> tuple[bool, float]:
    """`?wait=true&timeout=30`; HttpError 400."""
    raw = query.get("wait", "false").lower()
    if raw not in ("true", "false", "1", "0", "yes", "no", ""):
        raise HttpError(400, "InvalidRequest", f"wait: expected true or false, got {raw[:20]!r}")
    try:
        timeout = float(query.get("timeout", "30"))
    except ValueError:
        raise HttpError(400, "InvalidRequest", "timeout: expected seconds (a number)") from None
    if not 0 < timeout <= MAX_WAIT_S:
        raise HttpError(
            400,
            "InvalidRequest",
            f"timeout: expected more than 0 and at most {MAX_WAIT_S:g} seconds",
        )
    return raw in ("true", "1", "yes"), timeout


class Gateway:
    """The request handlers over one bus connection (set by the lifespan, or by a test)."""

    def __init__(self, tokens: Tokens, *, max_body: int = MAX_BODY, access=None, bus=None) -> None:
        self.tokens, self.max_body, self.access, self.bus = tokens, max_body, access, bus

    # ------------------------------------------------------------------ checks

    def authorize(self, request: Request) -> tuple[str, str | None]:
        """(path tenant, the token's user or None for a tenant's token), if the request's
        token belongs to the path tenant; HttpError 401 / 403."""
        tenant = request.path_params["tenant"]
        request.state.tenant = tenant
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HttpError(
                401, "Unauthorized", "missing bearer token (Authorization: Bearer <token>)"
            )
        try:
            self.tokens.reload()
        except TokenFileError as exc:  # keep serving with the tokens last loaded
            log.error("gateway.tokens_invalid", error=str(exc))
        owner = self.tokens.owner_of(token.strip())
        if owner is None:
            raise HttpError(401, "Unauthorized", "unknown bearer token")
        if owner[0] != tenant:
            raise HttpError(403, "Forbidden", f"this token is not valid for tenant {tenant!r}")
        request.state.user = owner[1]
        return owner

    @staticmethod
    def job_id(request: Request) -> str:
        job = request.path_params["job"]
        request.state.job = job
        try:
            return ev.validate_token("job id", job)
        except ev.InvalidId as exc:
            raise HttpError(400, "InvalidRequest", str(exc)) from None

    async def read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise HttpError(413, "PayloadTooLarge", f"body: larger than {self.max_body} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise HttpError(413, "PayloadTooLarge", f"body: larger than {self.max_body} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    # ------------------------------------------------------------------ endpoints

    async def submit(self, request: Request) -> JSONResponse:
        tenant, user = self.authorize(request)
        wait, timeout = wait_args(request.query_params)
        event = job_event(as_user(parse_body(await self.read_body(request)), user), tenant)
        request.state.job = event.job.job_id
        outcome = await cr.submit_job(
            self.bus, event, wait=wait, timeout=timeout, read_log=False, as_user=user
        )
        return self.outcome(request, outcome)

    async def cancel(self, request: Request) -> JSONResponse:
        tenant, user = self.authorize(request)
        job = self.job_id(request)
        outcome = await cr.cancel_job(
            self.bus, tenant, job, producer=PRODUCER, read_log=False, as_user=user
        )
        return self.outcome(request, outcome)

    async def control(self, request: Request, cls: type) -> JSONResponse:
        """A job verb (`cls`: `JobHeld`, `JobReleased`, `JobRequeued`, `JobMovedToTop`,
        `JobPriorityChanged`) on the path's job, as the token's tenant or user."""
        tenant, user = self.authorize(request)
        job = self.job_id(request)
        raw = await self.read_body(request)
        try:
            doc = parse_body(raw) if raw.strip() else None
        except HttpError as exc:  # not a job file: a request's bad body
            raise HttpError(400, "InvalidRequest", exc.message) from None
        fields = control_fields(cls, doc)
        try:
            outcome = await jc.control_job(
                self.bus,
                cls,
                tenant,
                job,
                actor=jc.actor_of(PRODUCER),
                producer=PRODUCER,
                read_log=False,
                as_user=user,
                **fields,
            )
        except cr.StatusQueryError as exc:
            raise HttpError(400, "InvalidRequest", str(exc)) from None
        return self.outcome(request, outcome)

    def verb(self, cls: type) -> Callable[[Request], Awaitable[JSONResponse]]:
        """The endpoint of the job verb `cls`."""

        async def endpoint(request: Request) -> JSONResponse:
            return await self.control(request, cls)

        return endpoint

    async def status(self, request: Request) -> JSONResponse:
        tenant, _ = self.authorize(request)  # a user's token sees its tenant's jobs
        job = self.job_id(request)
        try:
            st = await cr.ask_status(self.bus, tenant, job, timeout=5, wait_for_service=True)
        except TimeoutError as exc:
            raise HttpError(504, "Timeout", str(exc)) from None
        if st is None:
            raise HttpError(503, "Unavailable", "no admission service answers status queries")
        if not st.known:
            raise HttpError(404, RequestReason.UnknownJob, f"no job {job!r} in tenant {tenant!r}")
        return JSONResponse(msgspec.to_builtins(st))

    async def healthz(self, request: Request) -> JSONResponse:
        connected = self.bus is not None and self.bus.nc.is_connected
        return JSONResponse(
            {
                "ok": connected,
                "nats": "connected" if connected else "disconnected",
                "tokens": self.tokens.count,
            },
            status_code=200 if connected else 503,
        )

    @staticmethod
    def outcome(request: Request, outcome: cr.Outcome) -> JSONResponse:
        status, body = outcome_body(outcome)
        request.state.reason = body.get("reason")
        return JSONResponse(body, status_code=status)


class _RequestLog(BaseHTTPMiddleware):
    """One log line per request; an unexpected error becomes a JSON 500 (503 for NATS)."""

    async def dispatch(self, request: Request, call_next):
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception as exc:  # noqa: BLE001 - answered as 500/503, logged with the stack
            import nats.errors

            unavailable = isinstance(exc, nats.errors.Error | OSError)
            request.state.reason = "Unavailable" if unavailable else "InternalError"
            log.exception("gateway.error", path=request.url.path)
            response = JSONResponse(
                {"reason": request.state.reason, "message": f"{type(exc).__name__}: {exc}"[:300]},
                status_code=503 if unavailable else 500,
            )
        log.info(
            "gateway.request",
            method=request.method,
            path=request.url.path,
            status=response.status_code,
            tenant=getattr(request.state, "tenant", None),
            user=getattr(request.state, "user", None),
            job=getattr(request.state, "job", None),
            reason=getattr(request.state, "reason", None),
            client=request.client.host if request.client else None,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return response


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HttpError)
    request.state.reason = exc.reason
    return JSONResponse(
        {"reason": exc.reason, "message": exc.message, **exc.extra},
        status_code=exc.status,
        headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else None,
    )


def create_app(gateway: Gateway) -> Starlette:
    """The ASGI app. With `gateway.access` set, it connects to NATS at start-up (retrying) and
    closes the connection at shutdown; otherwise `gateway.bus` must be set."""
    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(app):
        from gpuledger.services.runtime.bus import Bus

        own = gateway.bus is None
        if own:
            gateway.bus = await Bus.connect(
                gateway.access.url, name="gpuledger-gateway", **gateway.access.options()
            )
        try:
            yield
        finally:
            if own:
                await gateway.bus.close()
                gateway.bus = None

    routes = [
        Route("/healthz", gateway.healthz, methods=["GET"]),
        Route("/v1/tenants/{tenant:path}/jobs", gateway.submit, methods=["POST"]),
        Route("/v1/tenants/{tenant:path}/jobs/{job}", gateway.status, methods=["GET"]),
        Route("/v1/tenants/{tenant:path}/jobs/{job}", gateway.cancel, methods=["DELETE"]),
        Route(
            "/v1/tenants/{tenant:path}/jobs/{job}",
            gateway.verb(ev.JobPriorityChanged),
            methods=["PATCH"],
        ),
        *(
            Route(
                f"/v1/tenants/{{tenant:path}}/jobs/{{job}}/{name}",
                gateway.verb(cls),
                methods=["POST"],
            )
            for name, cls in ROUTED_VERBS.items()
        ),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_RequestLog)],
        lifespan=lifespan,
        exception_handlers={HttpError: _http_error},
    )


def server(app: Starlette, host: str, port: int):
    """A uvicorn server for `app` (logging through structlog, no access log: ours is one line)."""
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="on"
    )
    return uvicorn.Server(config)


async def serve(gateway: Gateway, host: str, port: int) -> None:
    """Run until SIGINT / SIGTERM (uvicorn's handlers)."""
    srv = server(create_app(gateway), host, port)
    log.info(
        "gateway.listening",
        url=f"http://{host}:{port}",
        nats=gateway.access.url,
        tokens=gateway.tokens.count,
    )
    await srv.serve()
    await asyncio.sleep(0)
