"""`gpuledger submit`, `cancel`, `scale`: a client's requests about its jobs."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import typer

from gpuledger.services.cli.common import fail, fail_input, read_doc
from gpuledger.services.cli.connect import (
    CredsOption,
    NatsUrlOption,
    cli_bus,
    credential_user,
    job_request_target,
    may_read_log,
    resolve_access,
    run_on_bus,
)

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


def _echo_outcome(outcome) -> int:
    """Print a client request's outcome the CLI's way; its exit code (errors exit here)."""
    if outcome.error:
        fail(outcome.text, outcome.code)
    typer.echo(outcome.text, err=outcome.status not in ("admitted", "cancel_requested"))
    return outcome.code


@app.command()
def submit(
    file: Path = typer.Argument(..., help="Job YAML/JSON file, or - for standard input."),
    nats_url: NatsUrlOption = None,
    wait: bool = typer.Option(
        False, "--wait", help="Wait for the admission decision; exit 1 on rejection."
    ),
    timeout: float = typer.Option(30.0, help="Seconds to wait with --wait."),
    creds: CredsOption = None,
    user: str | None = typer.Option(
        None,
        "--user",
        help="Who submits the job inside its tenant (overrides the file's `user:`; a subject "
        "token: no '.', '*', '>', whitespace, at most 128 characters).",
    ),
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

    if user is not None:
        try:
            ev.validate_token("user", user)
        except ev.InvalidId as exc:
            fail(f"--user: {exc}", 2)
    try:
        spec = job_spec(read_doc(file))
        if user is not None:
            spec = msgspec.structs.replace(spec, user=user)
        event = submission(spec, producer="cli", now_ms=time.time_ns() // 1_000_000)
        ev.subject_for(event)
    except JobFileError as exc:
        fail_input(exc, file)
    except ev.InvalidId as exc:
        fail(f"{file}: {exc}", 2)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        fail(f"{file}: {' '.join(str(exc).split())[:300]}", 2)  # never a traceback
    access = resolve_access(nats_url, creds)
    own = credential_user(access)
    if own is not None and not isinstance(spec.user, str):  # a per-user credential's job
        spec = msgspec.structs.replace(spec, user=own[1])
        event = submission(spec, producer="cli", now_ms=time.time_ns() // 1_000_000)

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


@app.command()
def cancel(
    job_id: str = typer.Argument(...),
    tenant: str | None = typer.Option(
        None, "--tenant", help="The job's tenant (default: the tenant that submitted it)."
    ),
    nats_url: NatsUrlOption = None,
    creds: CredsOption = None,
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
    nats_url: NatsUrlOption = None,
    creds: CredsOption = None,
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
