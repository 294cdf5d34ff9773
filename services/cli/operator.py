"""The operator's and the tenants' verbs on jobs (issue 42): `hold`, `release`, `requeue`,
`update --priority|--nice`;
and the operator's on nodes: `node cordon`, `node uncordon` (with `node-[1-8]` ranges).

Each publishes one job control event (events/control.py) as the credential's actor: a
tenant's CI credential acts as its tenant on its own jobs, the operator on any. A request
that cannot apply is refused at once with the reason, and nothing is published:

- exit 2: a malformed job id or tenant;
- exit 1: no such job of the tenant (`UnknownJob`: the same answer whether another tenant has
  the id or nobody has), or one the admission service says the request cannot apply to
  (`InvalidSpec`: placed or finished, already held, not held, held by the operator; for a
  requeue, not running);
- exit 3: no NATS server (or no admission service for a tenant's credential); 4: timed out.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from gpuledger.services.cli.common import fail
from gpuledger.services.cli.connect import (
    CREDS_HELP,
    NATS_URL_HELP,
    cli_bus,
    may_read_log,
    run_on_bus,
)
from gpuledger.services.domain.inputs.node_ranges import expand_nodes

app = typer.Typer()

TENANT_HELP = "The job's tenant (default: the tenant that submitted it)."


def _control(name: str, job_id: str, tenant, reason: str, nats_url, creds, **given) -> None:
    """Publish the control event `name` (`JobHeld`...) for `job_id` as this credential's
    actor; echo the outcome, exit its code (2 for input `request_fields` refuses)."""
    from gpuledger import events as ev
    from gpuledger.services.runtime.job_control import actor_of, control_job, request_fields

    try:
        fields = request_fields(getattr(ev, name), reason, **given)
    except ValueError as exc:
        fail(str(exc), 2)
    from gpuledger.services.cli.connect import job_request_target
    from gpuledger.services.runtime.auth import principal_of_creds
    from gpuledger.services.runtime.client_requests import StatusQueryError

    access, tenant = job_request_target(job_id, tenant, nats_url, creds)
    principal = None if access.creds is None else principal_of_creds(access.creds)
    actor = actor_of(principal)

    async def main(track):
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            return await control_job(
                bus,
                getattr(ev, name),
                tenant,
                job_id,
                actor=actor,
                read_log=may_read_log(access),
                **fields,
            )
        except StatusQueryError as exc:
            fail(str(exc), 2)
        finally:
            await bus.close()

    outcome = run_on_bus(main)
    if outcome.error:
        fail(outcome.text, outcome.code)
    typer.echo(outcome.text)


def _reason_option(what: str):
    return typer.Option("", "--reason", help=f"Why, in your words (kept with the {what}).")


JOB_ARG = typer.Argument(..., help="The job (the id its tenant submitted).")
TENANT_OPT = typer.Option(None, "--tenant", help=TENANT_HELP)
NATS_OPT = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help=NATS_URL_HELP)
CREDS_OPT = typer.Option(None, "--creds", envvar="GPULEDGER_CREDS", help=CREDS_HELP)


def _job_verb(name: str, what: str, doc: str):
    """The command of a job verb that takes only the job, a reason and the connection."""

    def command(
        job_id: str = JOB_ARG,
        reason: str = _reason_option(what),
        tenant: str | None = TENANT_OPT,
        nats_url: str | None = NATS_OPT,
        creds: Path | None = CREDS_OPT,
    ) -> None:
        _control(name, job_id, tenant, reason, nats_url, creds)

    command.__doc__ = doc
    return command


app.command("hold")(
    _job_verb(
        "JobHeld",
        "hold",
        """Hold a job that is not yet placed (Slurm `scontrol hold`): it stays pending with
    reason `Held` and is no demand for fair share, reclaim or reservations until released.
    A hold by the operator is released only by the operator.""",
    )
)
app.command("release")(
    _job_verb(
        "JobReleased",
        "release",
        """Release a held job (Slurm `scontrol release`): it waits in the queue again with its
    submit time and priority as before.""",
    )
)
app.command("requeue")(
    _job_verb(
        "JobRequeued",
        "requeue",
        """Requeue a running job (Slurm `scontrol requeue`): it checkpoints within its grace,
    leaves its GPUs (evicted with reason `Requeue`) and waits in the queue again, resuming
    from its checkpoint. Counted as a requeue, not against the eviction budget.""",
    )
)
app.command("top")(
    _job_verb(
        "JobMovedToTop",
        "move",
        """Move a pending job to the top of its tenant's queue (Slurm `scontrol top`): it goes
    first among its tenant's pending jobs of its priority (its priority is unchanged).""",
    )
)


@app.command()
def update(
    job_id: str = JOB_ARG,
    priority: int | None = typer.Option(None, "--priority", help="The new priority."),
    nice: int | None = typer.Option(
        None, "--nice", help="Or: the class's priority minus this (positive lowers it)."
    ),
    klass: str | None = typer.Option(
        None, "--class", help="Or: a pending job's new priority class (its value and more)."
    ),
    reason: str = _reason_option("change"),
    tenant: str | None = TENANT_OPT,
    nats_url: str | None = NATS_OPT,
    creds: Path | None = CREDS_OPT,
) -> None:
    """Change a pending or running job's priority (Slurm `scontrol update Priority=|Nice=`):
    queue order and preemption use it at once. A tenant may lower its job's priority and
    raise it back up to its class's; above that needs the operator (exit 1, nothing
    published). `--class` moves a pending job to another priority class (Slurm `QOS=`): its
    value, preemptibility and SLO class, as if submitted with it; a placed job is refused
    (exit 1), and a class that is not configured or above the job's class's value (for a
    tenant) is refused by the scheduler's fold and shown by `why` (`RequestRefused`).
    Exactly one of --priority, --nice and --class (exit 2 otherwise)."""
    _control(
        "JobPriorityChanged",
        job_id,
        tenant,
        reason,
        nats_url,
        creds,
        priority=priority,
        nice=nice,
        klass=klass,
    )


# ---------------------------------------------------------------- nodes (the operator only)

node_app = typer.Typer(help="The operator's node verbs: cordon, drain, uncordon.")


async def _not_drained(bus, names: list[str], timeout_s: float) -> list[str]:
    """The nodes of `names` not yet `drained` when the wait ends (empty: all are), each with
    the runs left and why they wait (services/preemption/drain.py's `waiting`): the log
    folded as the services fold it (acceptance rules, receive times), checked after each
    message, until every node is drained or `timeout_s` has passed."""
    import asyncio

    from gpuledger import events as ev
    from gpuledger.services.domain.fold.acceptance import admit
    from gpuledger.services.domain.fold.ledger import Ledger
    from gpuledger.services.domain.fold.nodes import node_state
    from gpuledger.services.domain.fold.refusals import Refused

    ledger, left = Ledger(), list(names)

    async def follow() -> None:
        nonlocal left
        async for rec in bus.follow():
            try:
                event = ev.at_receipt(ev.decode(rec.data), rec.received_ms)
                admit(ledger, rec.seq, event, rec.subject)
            except (ev.UndecodableEvent, Refused):
                continue  # dead-lettered by the services too
            left = [n for n in names if n not in ledger.nodes or node_state(ledger, n) != "drained"]
            if not left:
                return

    try:
        await asyncio.wait_for(follow(), timeout_s)
    except TimeoutError:
        pass
    if not left:
        return []
    from gpuledger.services.preemption.drain import waiting

    why = waiting(ledger, time.time_ns() // 1_000_000)
    return [n + "".join(f" ({job}: {text})" for job, text in why.get(n, ())) for n in left]


def _node_control(
    verb: str, nodes_arg: str, reason: str, nats_url, creds, wait_s: float | None = None, **fields
) -> None:
    """Publish the node event of `verb` (`cordon`: `NodeCordoned`, `uncordon`:
    `NodeUncordoned`) for every node of `nodes_arg`, as the operator; nothing when any node
    is unknown (exit 1) or the credential is not the operator's (exit 1)."""
    from gpuledger import events as ev
    from gpuledger.services.cli.connect import resolve_access
    from gpuledger.services.domain.tooling.stamp import stamp
    from gpuledger.services.runtime.auth import principal_of_creds

    try:
        names = expand_nodes(nodes_arg)
    except ValueError as exc:
        fail(str(exc), 2)
    if len(reason) > 500:
        fail("--reason: at most 500 characters", 2)
    access = resolve_access(nats_url, creds)
    principal = None if access.creds is None else principal_of_creds(access.creds)
    if not may_read_log(access):
        fail(f"only the operator acts on nodes; this credential is {principal!r}", 1)
    cls = {"cordon": ev.NodeCordoned, "uncordon": ev.NodeUncordoned}[verb]
    if fields.get("drain"):
        verb = "drain"

    async def main(track):
        bus = await cli_bus(access, ensure=False)
        track(bus)
        try:
            unknown = [
                n for n in names if await bus.last_message(f"gl.node.{n}.NodeRegistered") is None
            ]
            if unknown:
                fail(f"no node {', '.join(map(repr, unknown))}: nothing to {verb} (UnknownNode)", 1)
            now = time.time_ns() // 1_000_000
            for n in names:
                event = stamp(
                    cls,
                    key=f"{n}@{now}",
                    producer="cli",
                    now_ms=now,
                    correlation_id=n,
                    node=n,
                    reason=reason,
                    **fields,
                )
                await bus.publish(event)
            typer.echo(f"{verb} requested for {', '.join(names)}")
            if wait_s is not None:
                left = await _not_drained(bus, names, wait_s)
                if left:
                    fail(f"not drained within {wait_s:g}s: {', '.join(left)}", 4)
                typer.echo(f"drained {', '.join(names)}")
        finally:
            await bus.close()

    run_on_bus(main, None if wait_s is None else wait_s + 30)


@node_app.command("cordon")
def cordon(
    nodes: str = typer.Argument(..., help="Nodes: names and ranges, e.g. node-[1-8],gpu-a."),
    reason: str = typer.Option("", "--reason", help="Why, in your words."),
    nats_url: str | None = NATS_OPT,
    creds: Path | None = CREDS_OPT,
) -> None:
    """Cordon nodes (kubectl `cordon`): no new placements on them; what runs there runs on
    and their agents keep reporting. The operator only. Exit 2 for a malformed range, 1 for
    an unknown node or a credential that is not the operator's (nothing is published)."""
    _node_control("cordon", nodes, reason, nats_url, creds)


@node_app.command("uncordon")
def uncordon(
    nodes: str = typer.Argument(..., help="Nodes: names and ranges, e.g. node-[1-8],gpu-a."),
    reason: str = typer.Option("", "--reason", help="Why, in your words."),
    nats_url: str | None = NATS_OPT,
    creds: Path | None = CREDS_OPT,
) -> None:
    """Uncordon nodes: they take placements again. The operator only."""
    _node_control("uncordon", nodes, reason, nats_url, creds)


@node_app.command("drain")
def drain(
    nodes: str = typer.Argument(..., help="Nodes: names and ranges, e.g. node-[1-8],gpu-a."),
    force: bool = typer.Option(
        False, "--force", help="Move everything off at once (minimum runtime, non-preemptible)."
    ),
    deadline: str | None = typer.Option(
        None, "--deadline", help="After this long (90s, 15m, 2h), drain what is left as --force."
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Wait until every node is drained: exit 0, or 4 at --timeout."
    ),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds --wait waits."),
    reason: str = typer.Option("", "--reason", help="Why, in your words."),
    nats_url: str | None = NATS_OPT,
    creds: Path | None = CREDS_OPT,
) -> None:
    """Drain nodes (kubectl `drain`; Slurm DRAIN -> DRAINED): cordon them, and move what runs
    there off with checkpoint-then-evict (requeued, placed elsewhere) once each run may leave:
    after its minimum runtime, within its job's disruption budget (`min_available`), and
    never non-preemptible work, unless --force or past --deadline. `gpuledger nodes` shows
    `draining` while runs are left, then `drained`. The operator only; exit 2 for a malformed
    range or deadline, 1 for an unknown node; with --wait, 0 once every node is drained, 4
    when --timeout passes first (naming those left, each run left and why it waits)."""
    from gpuledger.services.domain.inputs.quantities import seconds

    deadline_s = None
    if deadline is not None:
        try:
            deadline_s = seconds("--deadline", deadline)
        except ValueError as exc:
            fail(str(exc), 2)
    if timeout <= 0:
        fail("--timeout: must be positive", 2)
    _node_control(
        "cordon",
        nodes,
        reason,
        nats_url,
        creds,
        wait_s=timeout if wait else None,
        drain=True,
        force=force,
        deadline_s=deadline_s,
    )
