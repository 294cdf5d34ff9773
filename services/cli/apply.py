"""`gpuledger apply`: publish a configuration as events (and the publishing `up` shares)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from gpuledger.services.cli.common import fail_input, read_doc
from gpuledger.services.cli.connect import (
    CredsOption,
    NatsUrlOption,
    cli_bus,
    resolve_access,
    run_on_bus,
)

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


async def publish_config(
    access, doc: dict[str, Any], track=None, replicas: int | None = None
) -> int:
    """Publish `doc`'s configuration events (creating the stream first, with `replicas` when
    given; an existing stream keeps its replica count otherwise)."""
    from gpuledger.services.domain.inputs.configfile import config_events

    bus = await cli_bus(access, replicas=replicas)
    if track is not None:
        track(bus)
    try:
        n = 0
        for e in config_events(doc, producer="cli", at_ms=time.time_ns() // 1_000_000):
            await bus.publish_retrying(e)  # a new replicated stream may not answer yet
            n += 1
        return n
    finally:
        await bus.close()


@app.command()
def apply(
    config: Path = typer.Argument(
        ..., help="Configuration YAML (tenants, priority classes, policy)."
    ),
    nats_url: NatsUrlOption = None,
    creds: CredsOption = None,
    replicas: int | None = typer.Option(
        None,
        "--replicas",
        min=1,
        max=5,
        help="Create the stream with (or scale it to) this many replicas (3 on a 3-node NATS cluster); default: an existing stream keeps its count, a new one has 1.",
    ),
) -> None:
    """Publish a configuration as events (what replays will see as in force from now)."""
    from gpuledger.services.domain.inputs.configfile import ConfigFileError, parse

    doc = read_doc(config)
    try:
        parse(doc)
    except ConfigFileError as exc:
        fail_input(exc, config)
    access = resolve_access(nats_url, creds)
    n = run_on_bus(lambda track: publish_config(access, doc, track, replicas=replicas))
    typer.echo(f"published {n} configuration events")


NO_SUITABLE_PEERS = 10005
"""JetStream's `no suitable peers for placement`: a cluster that has just elected its meta
leader may not know every node's JetStream yet, so a replicated stream cannot be placed."""


async def publish_config_when_placeable(
    access, doc: dict[str, Any], replicas: int | None, timeout_s: float = 30.0
) -> int:
    """`publish_config`, retried every 0.5 s for up to `timeout_s` while a NATS cluster that
    `up` has just started cannot place the stream on enough nodes yet (nothing is published
    before the stream exists, so a retry repeats nothing)."""
    import asyncio

    import nats.js.errors

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await publish_config(access, doc, replicas=replicas)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != NO_SUITABLE_PEERS or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
