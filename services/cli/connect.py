"""How a command reaches the bus: the NATS URL, the identity it connects as, TLS, and a
one-shot connection with clear errors. Shared by every command that talks to NATS."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.runtime.status_file import DEFAULT_DATA

URL_FILE = "nats-url"
NATS_URL_HELP = "NATS server URL (default: $GPULEDGER_NATS_URL, else the one `gpuledger up` runs in ./.gpuledger)."
CREDS_HELP = (
    "Credential file (nkey seed) of the identity to connect as (default: $GPULEDGER_CREDS, else "
    "the operator's from ./.gpuledger/auth of `gpuledger up`). TLS: $GPULEDGER_TLS_CA "
    "(+ _CERT, _KEY)."
)


NatsUrlOption = Annotated[
    str | None, typer.Option("--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP)
]
"""`--nats-url` as every command that talks to NATS takes it."""
CredsOption = Annotated[
    Path | None, typer.Option("--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP)
]
"""`--creds` as every command that talks to NATS takes it."""


def resolve_url(url: str | None, data: Path = DEFAULT_DATA) -> str:
    """The NATS URL to use: the given one, else the embedded server `gpuledger up` recorded."""
    if url:
        return url
    recorded = data / URL_FILE
    if recorded.exists():
        return recorded.read_text().strip()
    fail(
        f"no NATS server: pass --nats-url (or set GPULEDGER_NATS_URL), or start `gpuledger up` here "
        f"(it records its URL in {recorded})",
        2,
    )


def resolve_access(
    url: str | None, creds: Path | None, data: Path = DEFAULT_DATA, principal: str = "admin"
):
    """How this command reaches the bus: the URL (`resolve_url`), the credential (given, else
    `principal`'s identity of the `gpuledger up` running in `data`), TLS from the environment."""
    from gpuledger.services.runtime.auth import AuthDir, AuthError, NatsAccess, tls_from_env

    url = resolve_url(url, data)
    auth = AuthDir(data / "auth")
    try:
        if creds is None and auth.exists:
            return NatsAccess(url, auth.creds(principal), auth, tls_from_env())
        if creds is not None and not Path(creds).is_file():
            fail(f"{creds}: no such credential file", 2)
        return NatsAccess(url, creds, None, tls_from_env())
    except AuthError as exc:
        fail(str(exc), 2)


async def cli_bus(access, ensure: bool = True, replicas: int | None = None):
    """A bus for a one-shot command: a few quick connection attempts, then a clear error
    (services, unlike commands, retry forever). `ensure` creates or updates the stream
    and the lease and snapshot buckets (the operator's right only), with `replicas` when given
    (else an existing stream keeps its count)."""
    import nats.errors

    from gpuledger.services.runtime.auth import AuthError
    from gpuledger.services.runtime.bus import Bus

    try:
        bus = await Bus.connect(
            access.url,
            name="gpuledger-cli",
            connect_attempts=3,
            max_reconnect_attempts=2,
            connect_timeout=2,
            quiet=True,
            **access.options(),
        )
    except AuthError as exc:
        fail(str(exc), 2)
    except (nats.errors.Error, OSError) as exc:
        hint = ""
        if "authorization" in str(exc).lower():
            hint = (
                " (the server requires an identity: pass --creds FILE or set GPULEDGER_CREDS)"
                if access.creds is None
                else f" (the server does not accept {access.creds})"
            )
        fail(f"cannot reach NATS at {access.url}: {exc.__class__.__name__} {exc}{hint}".rstrip(), 3)
    if ensure:
        from gpuledger.services.runtime.snapshots import snapshot_bucket

        try:
            await bus.ensure_stream(
                replicas=replicas
            )  # and the lease bucket: services may not create it
            await snapshot_bucket(
                bus, create=True, replicas=replicas or 1
            )  # nor their snapshot bucket
        except (TimeoutError, nats.errors.Error):
            if bus.denied:
                fail(
                    f"not permitted: {bus.denied[-1]} (creating the stream is the operator's "
                    "right: connect with the admin credential)",
                    1,
                )
            await bus.close(timeout_s=0)  # the caller may retry: leave no connection behind
            raise
    return bus


def may_read_log(access) -> bool:
    """Whether this command's identity may read the stream (a tenant's CI identity may not:
    it learns about its jobs from the admission service only)."""
    from gpuledger.services.runtime.auth import principal_of_creds

    if access.creds is None:
        return True
    principal = principal_of_creds(access.creds) or ""
    return not principal.startswith(("ci:", "user:", "gateway"))


def credential_user(access) -> tuple[str, str] | None:
    """(tenant, user) of this command's per-user credential (`auth add-user`), else None."""
    from gpuledger.services.runtime.auth import principal_of_creds, user_of_principal

    principal = principal_of_creds(access.creds) if access.creds is not None else None
    return user_of_principal(principal) if principal else None


class PermissionDenied(Exception):
    """The server refused one of this command's publishes or requests (its identity's
    permissions): reported the moment the server says so, not when the wait times out."""


def denial_hint(denied: str) -> str:
    """What a person can do about a permission violation `denied` (the server's text)."""
    if "$JS.API.STREAM." in denied:
        return "managing the stream is the operator's right: connect with the admin credential"
    clients = (
        "gl.submit",
        "gl.cancel",
        "gl.scale",
        "glq.job",
        "glr.submit",
        "glr.cancel",
        "glr.scale",
    )
    if any(f'"{p}.' in denied for p in clients):
        return "a tenant's CI credential acts on its own tenant's jobs only"
    return (
        "the identity connected does not have this right; see `gpuledger auth` and "
        "docs/operations.md"
    )


async def guard_denials(main, buses: list | None = None):
    """Run `main(track)`; every bus it `track`s (collected in `buses` when given) reports its
    permission violations here, and the first one ends the run at once with PermissionDenied
    (nats-py reports a denied publish or request asynchronously, through the error callback;
    the call itself would only time out)."""
    import asyncio
    import contextlib

    first: list[str] = []
    denied = asyncio.Event()

    def on_denied(text: str) -> None:
        first.append(text)
        denied.set()

    def track(bus) -> None:
        if buses is not None:
            buses.append(bus)
        bus.denied_listeners.append(on_denied)
        if bus.denied:
            on_denied(bus.denied[-1])

    task = asyncio.ensure_future(main(track))
    waiter = asyncio.ensure_future(denied.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task  # the run is abandoned: its own error (a time-out to come) is not the news
    raise PermissionDenied(first[0])


STORE_FULL_EXIT = 5
"""The exit code of a command whose write the event store refused because it is full."""


def run_on_bus(main, timeout_s: float | None = None):
    """Run a command's coroutine; a request the server denied (this identity's permissions)
    or that timed out ends in one line, not a traceback: exit 1 for a denial (as soon as the
    server reports it), 4 for a time-out, `STORE_FULL_EXIT` (5) for a write the store refused
    because it is full."""
    import asyncio

    import nats.errors
    import nats.js.errors

    buses: list = []
    try:
        coro = guard_denials(main, buses)
        return asyncio.run(coro if timeout_s is None else asyncio.wait_for(coro, timeout_s))
    except PermissionDenied as exc:
        fail(f"not permitted: {exc} ({denial_hint(str(exc))})", 1)
    except nats.js.errors.NoStreamResponseError:
        # Nothing answered for the stream: the server cannot tell a missing stream from one
        # without a reachable leader (a cluster electing one after a node died), nor can we.
        fail(
            "no answer from the gpuledger stream: it does not exist yet (start `gpuledger up`, "
            "or publish the configuration with `gpuledger apply` as the operator (admin)), or "
            "its leader is being elected or cannot be reached (retry in a few seconds)",
            1,
        )
    except nats.js.errors.APIError as exc:
        from gpuledger.services.runtime.storefull import store_write_error

        full = store_write_error(exc)
        if full is None:
            fail(f"NATS request failed: {type(exc).__name__} {exc}".rstrip(), 4)
        fail(
            f"{full}: nothing was stored; free space on the NATS store (or raise its limit), "
            "then retry (`gpuledger status` says `store full` meanwhile)",
            STORE_FULL_EXIT,
        )
    except (TimeoutError, nats.errors.TimeoutError, nats.errors.Error) as exc:
        denied = next((b.denied[-1] for b in buses if b.denied), None)
        if denied:
            fail(f"not permitted: {denied} ({denial_hint(denied)})", 1)
        hint = ""
        if isinstance(exc, (TimeoutError, nats.errors.TimeoutError)):
            hint = (
                " (no answer in time: if `gpuledger status` says `store full`, NATS cannot write)"
            )
        fail(f"NATS request failed: {type(exc).__name__} {exc}".rstrip() + hint, 4)


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
        tenant = name if kind == "ci" else name.split(":", 1)[0] if kind == "user" else None
    return access, tenant
