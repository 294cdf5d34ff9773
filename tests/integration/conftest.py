"""Fixtures every live test shares: a real nats-server, a bus on it with the stream, and the
services of examples/three-jobs.yaml as OS processes."""

import pytest

from gpuledger.replay import live_player
from gpuledger.replay.scenario import load
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests.integration.cluster import EXAMPLES, Processes
from tests.natsauth import as_admin

THREE = EXAMPLES / "three-jobs.yaml"


@pytest.fixture
def server(monkeypatch):
    with EmbeddedNats() as s:
        as_admin(monkeypatch, s)
        yield s


@pytest.fixture
async def bus(server):
    b = await Bus.connect(server.url, **server.client_options())
    await b.ensure_stream()
    yield b
    await b.close()


@pytest.fixture
def procs(server, tmp_path):
    p = Processes(server, THREE, tmp_path)
    yield p
    p.stop()


@pytest.fixture
async def admission(server, bus, tmp_path):
    """The configuration of examples/three-jobs.yaml and admission as a separate process."""
    await live_player.publish_config(bus, load(THREE))
    p = Processes(server, THREE, tmp_path)
    p.start("admission")
    yield p
    p.stop()
