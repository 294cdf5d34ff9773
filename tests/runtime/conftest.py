"""Fixtures for runtime tests: a real nats-server per test (loopback, temporary store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests.natsauth import as_admin


@pytest.fixture
def nats_server(monkeypatch) -> Iterator[EmbeddedNats]:
    with EmbeddedNats() as server:
        as_admin(monkeypatch, server)
        yield server


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    b = await Bus.connect(nats_server.url, **nats_server.client_options())
    await b.ensure_stream()
    try:
        yield b
    finally:
        await b.close()
