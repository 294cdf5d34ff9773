"""Fixtures every live test shares: a real nats-server, a bus on it with the stream, and the
services of examples/three-jobs.yaml as OS processes."""

import pytest

from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests.integration.cluster import EXAMPLES, Processes

THREE = EXAMPLES / "three-jobs.yaml"


@pytest.fixture
def server():
    with EmbeddedNats() as s:
        yield s


@pytest.fixture
async def bus(server):
    b = await Bus.connect(server.url)
    await b.ensure_stream()
    yield b
    await b.close()


@pytest.fixture
def procs(server, tmp_path):
    p = Processes(server.url, THREE, tmp_path)
    yield p
    p.stop()
