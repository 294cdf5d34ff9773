"""Fixtures for runtime tests: a real nats-server per test (loopback, temporary store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats


@pytest.fixture
def nats_server() -> Iterator[EmbeddedNats]:
    with EmbeddedNats() as server:
        yield server


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    b = await Bus.connect(nats_server.url)
    await b.ensure_stream()
    try:
        yield b
    finally:
        await b.close()
