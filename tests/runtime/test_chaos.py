"""The host loop survives a nats-server crash and restart (same port, same store)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.host import Host
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests.natsauth import as_admin
from tests.runtime.test_host import Admitter, running, submitted
from tests.waiting import eventually_async as eventually


async def test_host_continues_after_the_server_is_killed_and_restarted(
    monkeypatch, tmp_path: Path
) -> None:
    server = EmbeddedNats(tmp_path / "nats", sync_always=True)
    as_admin(monkeypatch, server)
    await asyncio.to_thread(server.start)
    try:
        bus = await Bus.connect(server.url, **server.client_options())
        await bus.ensure_stream()
        service = Admitter()
        host = Host(service, bus, retry_backoff_s=0.1)
        async with running(host):
            await bus.publish(submitted("before"))
            await eventually(lambda: "before" in host.state.admitted)
            await asyncio.to_thread(server.kill)
            await eventually(lambda: not bus.nc.is_connected, what="the client to see it gone")
            await asyncio.to_thread(server.start)
            await eventually(lambda: bus.nc.is_connected, timeout_s=10)
            await bus.publish(submitted("after"))
            await eventually(lambda: "after" in host.state.admitted, timeout_s=15)
        assert service.emitted.count(service.emitted[0]) == 1
        seqs = [r.seq async for r in bus.read_all()]
        assert seqs == [1, 2, 3, 4]
        await bus.close()
    finally:
        await asyncio.to_thread(server.stop)
