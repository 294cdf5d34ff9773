"""`gpuledger status`: the services `gpuledger up` supervises, or one job's status asked of
the admission service over NATS."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.connect import (
    DEFAULT_DATA,
    CredsOption,
    NatsUrlOption,
    cli_bus,
    job_request_target,
    run_on_bus,
)

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


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
    nats_url: NatsUrlOption = None,
    creds: CredsOption = None,
) -> None:
    """Each service `gpuledger up` supervises: state (starting, running, blocked, restarting,
    failed, stopped; unauthorized: the server refuses its key, rotated or removed), pid,
    restarts, folded sequence, lag behind the stream, leader lease
    (leader, standby; - for node agents and the projector), last error; then each NATS node
    that holds the stream: leader or replica, current, behind or offline, its lag, when last
    heard from; `store full` while the event store refuses writes (its disk or its cap is
    full), with what happens next (an external NATS that stopped writing: restart it once its
    disk has room), and a credential reload the embedded server refused. Exit 1 when `up` is not running,
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
    from gpuledger.services.runtime.status_file import STATUS_FILE, now_ms, pid_alive, read_json

    path = data / STATUS_FILE
    doc = read_json(path)
    if doc is None:
        fail(f"no status at {path}: start `gpuledger up` here (or pass --data)", 1)
    now = now_ms()
    up_running = pid_alive(doc.get("up_pid")) and now - doc.get("updated_at_ms", 0) < 15_000
    if output in ("json", "yaml"):
        from gpuledger.services.cli.output import _emit_structured

        _emit_structured({**doc, "up_running": up_running}, output)
    else:
        _print_tables(doc, now, no_headers)
    if not up_running:
        _print_stale(doc, path, now)
        raise typer.Exit(1)
    _print_alarms(doc, now)
    if not _healthy(doc):
        raise typer.Exit(1)


def _print_tables(doc: dict, now: int, no_headers: bool) -> None:
    """The services table, the NATS nodes table (when the stream has nodes) and the stream
    line of `gpuledger status` (the last on stderr)."""
    from gpuledger.services.cli.output import humanize_ms, render_table

    lines = [_service_row(r, now) for r in doc.get("services", [])]
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
                [_nats_node_row(n) for n in nodes],
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


def _service_row(r: dict, now: int) -> list:
    """One supervised service's line of the status table."""
    from gpuledger.services.cli.output import humanize_ms

    return [
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


def _nats_node_row(n: dict) -> list:
    """One NATS node's line of the status table."""
    from gpuledger.services.cli.output import humanize_ms

    return [
        n["name"],
        n["role"],
        n["state"],
        "-" if n.get("lag") is None else n["lag"],
        "-" if n.get("seen_ms_ago") is None else humanize_ms(n["seen_ms_ago"]) + " ago",
    ]


def _print_alarms(doc: dict, now: int) -> None:
    """While `up` runs: a full event store and a refused credential reload, on stderr."""
    from gpuledger.services.cli.output import humanize_ms
    from gpuledger.services.runtime.storefull import RESUMES

    store = doc.get("store") or {}
    if store.get("state") == "full":
        since = store.get("since_ms")
        typer.echo(
            f"store full: {store.get('error')}"
            + ("" if since is None else f" (for {humanize_ms(now - since)})")
            + f"; {store.get('action') or RESUMES}",
            err=True,
        )
    if doc.get("nats_reload_error"):
        typer.echo(
            f"NATS credential reload failed: {doc['nats_reload_error']} (the server still "
            "admits the identities it loaded before; fix the auth directory)",
            err=True,
        )


def _print_stale(doc: dict, path: Path, now: int) -> None:
    """Why the status file is not current: `up` is stuck (alive, not writing) or gone."""
    from gpuledger.services.cli.output import humanize_ms
    from gpuledger.services.runtime.status_file import pid_alive

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


def _healthy(doc: dict) -> bool:
    """Exit 0 of `gpuledger status` while `up` runs: the store takes writes, the last
    credential reload held, every service runs and every NATS node is online with a leader."""
    store = doc.get("store") or {}
    if store.get("state") == "full" or doc.get("nats_reload_error"):
        return False
    if any(r["state"] != "running" for r in doc.get("services", [])):
        return False
    return not any(n["state"] in ("offline", "no-leader") for n in doc.get("nats_nodes") or [])


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

            from gpuledger.services.cli.output import _emit_structured

            doc = msgspec.to_builtins(st)
            doc.pop("spec", None)
            _emit_structured(doc, output)
        else:
            from gpuledger.services.cli.output import render_table

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
