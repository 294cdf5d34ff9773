"""Credentials for tests: every test server runs with authentication on (as `gpuledger up`
does), and a test connects as the operator unless it tests a narrower identity.

A test that starts a server exports its operator credential as `GPULEDGER_CREDS` (`as_admin`),
so the CLI and service processes it starts connect as every user's would: with a credential.
"""

from __future__ import annotations

import os
from typing import Any

from gpuledger.services.runtime.auth import CREDS_ENV, client_options


def as_admin(monkeypatch, server) -> None:
    """Make `server`'s operator identity this test's default credential (inherited by
    subprocesses)."""
    monkeypatch.setenv(CREDS_ENV, str(server.creds("admin")))


def options() -> dict[str, Any]:
    """`Bus.connect` options for the default credential (`as_admin`)."""
    return client_options(os.environ[CREDS_ENV])


async def publish_log(url: str, messages) -> None:
    """Create the stream on the server at `url` and publish a simulated log's `(seq,
    subject, event)` messages into it as the default credential, each at its own sequence."""
    import nats
    from nats.js import api

    from gpuledger import events as ev

    nc = await nats.connect(url, **options())
    js = nc.jetstream()
    await js.add_stream(
        api.StreamConfig(name="GPULEDGER", subjects=["gl.>"], storage=api.StorageType.FILE)
    )
    for seq, subject, event in messages:
        ack = await js.publish(subject, ev.encode(event), headers={"Nats-Msg-Id": event.event_id})
        assert ack.seq == seq
    await nc.drain()


async def stored_log(url: str) -> list:
    """The log as the stream at `url` holds it: client inputs at their effective (receive)
    time."""
    from gpuledger.replay.export import stream_entries
    from gpuledger.services.runtime.bus import Bus

    bus = await Bus.connect(url, **options())
    try:
        return [entry async for entry in stream_entries(bus)]
    finally:
        await bus.close()
