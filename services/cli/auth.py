"""`gpuledger auth`: generate and extend the identities a cluster runs with
(services/runtime/auth.py holds the model; this is argument handling only)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.services.cli.common import fail

auth_app = typer.Typer(
    help="Identities and permissions for the NATS server (authentication is always on).",
    no_args_is_help=True,
)

RELOAD = (
    "a running `gpuledger up` serving this directory applies it within a second; a stand-alone "
    "server applies it on `nats-server --signal reload` (or SIGHUP to its pid)"
)


def _names(csv: str) -> list[str]:
    return [x.strip() for x in csv.split(",") if x.strip()]


def _run(fn):
    from gpuledger.services.runtime.auth import AuthError

    try:
        return fn()
    except AuthError as exc:
        fail(str(exc), 2)


@auth_app.command("init")
def init_command(
    directory: Path = typer.Argument(
        ..., help="Where to write nats.conf, auth.conf, credentials.json and the key files."
    ),
    tenants: str = typer.Option(
        "", "--tenants", help="Comma-separated tenants: one CI identity each (ci:TENANT)."
    ),
    nodes: str = typer.Option(
        "", "--nodes", help="Comma-separated node names: one node-agent identity each (node:NAME)."
    ),
    cluster_routes: str = typer.Option(
        "",
        "--cluster-routes",
        help="Comma-separated HOST:PORT of each NATS cluster node's cluster port: also writes cluster.conf (the `cluster` block every node includes, routes authenticated with a generated secret).",
    ),
) -> None:
    """Generate one identity per role (admission, quota, scheduler, preemption, projector,
    auditor, admin, gateway, agents), per node and per tenant's CI system, a nats-server
    config that admits only them with least-privilege permissions, and credentials.json.
    Existing keys are kept (run it again to add names)."""
    from gpuledger.services.runtime.auth import init

    d = _run(
        lambda: init(
            directory,
            tenants=_names(tenants),
            nodes=_names(nodes),
            cluster_routes=_names(cluster_routes),
        )
    )
    for name, p in d.principals().items():
        typer.echo(f"{name:<24}{d.path / p.file}")
    typer.echo(
        f"server config: {d.path / 'nats.conf'} (includes auth.conf); start it with "
        f"`nats-server -c {d.path / 'nats.conf'}`",
        err=True,
    )
    if cluster_routes:
        typer.echo(
            f"cluster: {d.path / 'cluster.conf'} (routes to {cluster_routes}); each node's config "
            "includes it next to auth.conf and names itself (`nats-server --name NAME`)",
            err=True,
        )


def _add(directory: Path, principals: list[str], rotate: bool = False) -> None:
    from gpuledger.services.runtime.auth import AuthDir

    d = AuthDir(directory)
    if not d.exists:
        fail(
            f"{directory}: no credentials.json here; run `gpuledger auth init {directory}` first", 2
        )
    if rotate:
        unknown = [p for p in principals if p not in d.principals()]
        if unknown:
            fail(f"{directory}: no identity {unknown[0]!r} to rotate", 2)
    changed = _run(lambda: d.add(*principals, rotate=rotate))
    for name in changed:
        typer.echo(f"{'rotated' if rotate else 'added'} {name}: {d.creds(name)}")
    if not changed:
        typer.echo("nothing to do: every identity exists already", err=True)
    else:
        typer.echo(RELOAD, err=True)


@auth_app.command("add-tenant")
def add_tenant(
    directory: Path = typer.Argument(...),
    tenants: list[str] = typer.Argument(..., help="Tenant names."),
) -> None:
    """Add a CI identity for each tenant (may publish only gl.submit.<tenant>.> and
    gl.cancel.<tenant>.>, and ask only its own jobs' status)."""
    _add(directory, [f"ci:{t}" for t in tenants])


@auth_app.command("add-user")
def add_user(
    directory: Path = typer.Argument(...),
    tenant: str = typer.Argument(..., help="The user's tenant (it must have a CI identity here)."),
    users: list[str] = typer.Argument(
        ..., help="User names (subject tokens: no '.', '*', '>', spaces)."
    ),
) -> None:
    """Add a per-user identity for each user of a tenant (user:TENANT:USER): it may submit,
    cancel, scale, hold, release, requeue and update only as that user (it asks the intake on
    glu.<verb>.<tenant>.<user>.>, and the intake holds it to its own user's jobs), and ask
    its tenant's jobs' status. Exit 2, nothing written: an unknown tenant, a bad user name."""
    from gpuledger.services.runtime.auth import user_principal

    _add(directory, [user_principal(tenant, u) for u in users])


@auth_app.command("add-node")
def add_node(
    directory: Path = typer.Argument(...),
    nodes: list[str] = typer.Argument(..., help="Node names."),
) -> None:
    """Add a node-agent identity for each node (may publish only gl.node.<node>.>)."""
    _add(directory, [f"node:{n}" for n in nodes])


@auth_app.command("rotate")
def rotate(
    directory: Path = typer.Argument(...),
    principals: list[str] = typer.Argument(
        ..., help="Principals, e.g. scheduler ci:research node:node-1."
    ),
) -> None:
    """Replace the keys of these identities (the old key stops working once the server reloads)."""
    _add(directory, principals, rotate=True)


@auth_app.command("remove")
def remove(
    directory: Path = typer.Argument(...),
    principals: list[str] = typer.Argument(
        ...,
        help="Node, tenant or user identities, e.g. node:node-1 ci:research user:research:alice.",
    ),
) -> None:
    """Delete these node, tenant or user identities and their key files (their keys are refused once
    the server reloads; a role's key is rotated instead)."""
    from gpuledger.services.runtime.auth import AuthDir

    d = AuthDir(directory)
    if not d.exists:
        fail(
            f"{directory}: no credentials.json here; run `gpuledger auth init {directory}` first", 2
        )
    for name in _run(lambda: d.remove(*principals)):
        typer.echo(f"removed {name}")
    typer.echo(RELOAD, err=True)


@auth_app.command("list")
def list_command(directory: Path = typer.Argument(...)) -> None:
    """Each principal, its key file and its public key."""
    from gpuledger.services.runtime.auth import AuthDir

    d = AuthDir(directory)
    for name, p in _run(d.principals).items():
        typer.echo(f"{name:<24}{p.public_key}  {d.path / p.file}")
