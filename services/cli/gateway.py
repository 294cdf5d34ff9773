"""`gpuledger gateway`: the HTTP endpoint for CI systems without a NATS client, and
`gpuledger gateway token` to hand out its bearer tokens (argument handling only; the gateway
is services/runtime/gateway.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.services.cli.common import fail

gateway_app = typer.Typer()

TOKENS_HELP = (
    "Tokens file (YAML/JSON): tenant (or user:TENANT:USER) -> list of 'sha256:<hex>' hashes "
    "of its bearer tokens (`gpuledger gateway token` adds one)."
)


def _fail_tokens(exc) -> None:
    for line in exc.problems:
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2)


@gateway_app.callback(invoke_without_command=True)
def gateway(
    ctx: typer.Context,
    port: int = typer.Option(8480, "--port", help="TCP port to listen on."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to listen on (put TLS in front of it: a reverse proxy).",
    ),
    tokens: Path = typer.Option(
        Path(".gpuledger/gateway-tokens.yaml"), "--tokens", help=TOKENS_HELP
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        envvar="GPULEDGER_NATS_URL",
        help="NATS server URL (default: $GPULEDGER_NATS_URL, else the one `gpuledger up` runs in ./.gpuledger).",
    ),
    creds: Path | None = typer.Option(
        None,
        "--creds",
        envvar="GPULEDGER_CREDS",
        help="Credential file of the `gateway` identity (default: $GPULEDGER_CREDS, else "
        "the gateway's from ./.gpuledger/auth of `gpuledger up`).",
    ),
) -> None:
    """HTTP gateway for CI systems: POST /v1/tenants/TENANT/jobs (a job file as JSON or YAML,
    ?wait=true&timeout=30), GET and DELETE /v1/tenants/TENANT/jobs/JOB, the job verbs POST
    .../jobs/JOB/hold|release|requeue|top (body: {"reason": ...} or none) and PATCH
    .../jobs/JOB (body: {"priority": N} | {"nice": N} | {"class": C}), GET /healthz; each
    /v1 request with `Authorization: Bearer TOKEN`, a token of TENANT or of one of its users
    (which submits, cancels and uses the job verbs as that user only). Answers: 202 submitted
    or requested, 200 admitted or already submitted, 400 invalid (one line per problem), 401
    no or unknown token, 403 another tenant or (a user's token) another user (NotYourUser),
    404 unknown job, 409 JobIdConflict, 413 body over 1 MiB, 422 rejected or (a job verb)
    cannot apply, 503 no admission service, 504 no decision in time. Exit codes: 2 invalid
    options or tokens file."""
    if ctx.invoked_subcommand is not None:
        return
    import asyncio

    from gpuledger.services.cli.connect import resolve_access
    from gpuledger.services.runtime.gateway import Gateway, serve
    from gpuledger.services.runtime.gateway_tokens import TokenFileError, Tokens
    from gpuledger.services.runtime.logging import configure_logging

    if not 0 < port < 65536:
        fail(f"--port: {port} is not a TCP port", 2)
    try:
        loaded = Tokens(tokens)
    except TokenFileError as exc:
        _fail_tokens(exc)
    access = resolve_access(nats_url, creds, principal="gateway")
    configure_logging()
    try:
        asyncio.run(serve(Gateway(loaded, access=access), host, port))
    except KeyboardInterrupt:
        pass


@gateway_app.command("token")
def token(
    tenant: str = typer.Argument(..., help="The tenant the token acts for."),
    user: str | None = typer.Argument(
        None, help="A user of TENANT: the token acts as that user only."
    ),
    tokens: Path = typer.Option(
        Path(".gpuledger/gateway-tokens.yaml"), "--tokens", help=TOKENS_HELP
    ),
) -> None:
    """Generate a bearer token for TENANT (with USER: for that user of it, as `gpuledger
    auth add-user` makes a key), add its hash to the tokens file (created 0600) and print
    the token: it is shown only this once. A running gateway picks it up at once. A user's
    token submits as that user only (`NotYourUser`, 403) and acts on that user's jobs only
    (a colleague's: 404 `UnknownJob`, as an id nobody has). Exit 2 for a bad tenant or user
    name or tokens file, or a user of a tenant the file holds no entry for (give the
    tenant its token first)."""
    from gpuledger import events as ev
    from gpuledger.services.runtime.gateway_tokens import TokenFileError, add_token

    try:
        ev.validate_tenant(tenant)
        if user is not None:
            ev.validate_token("user", user)
    except ev.InvalidId as exc:
        fail(str(exc), 2)
    try:
        tokens.parent.mkdir(parents=True, exist_ok=True)
        secret = add_token(tokens, tenant, user)
    except TokenFileError as exc:
        _fail_tokens(exc)
    except OSError as exc:
        fail(f"{tokens}: cannot write: {exc.strerror}", 2)
    typer.echo(secret)
    who, kept = (tenant, "a CI secret") if user is None else (f"user {user} of {tenant}", "theirs")
    typer.echo(
        f"added a token for {who} to {tokens} (shown only now; store it as {kept})", err=True
    )
