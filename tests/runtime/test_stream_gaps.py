"""Issue 11, case 7, against a real nats-server: a service never decides from a partial log.

A stream whose head is gone (first sequence not 1, no snapshot), that has holes (deleted
messages), or whose file store was damaged (a truncated block file: the server restarts
with the tail missing) is refused at start: the host logs one `host.refusing` line, sets
`host.gap`, and publishes nothing. A hole met while following raises `StreamGap`."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
from nats.js import api

from gpuledger import events as ev
from gpuledger.events.subjects import STREAM
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.runtime.bus import Bus, StreamGap
from gpuledger.services.runtime.host import Host
from gpuledger.services.runtime.nats_server import EmbeddedNats
from gpuledger.services.scheduler.decider import Scheduler
from tests import natsauth
from tests.natsauth import as_admin
from tests.waiting import eventually_async

S = 1000


def heartbeats(seconds: int) -> list[ev.Event]:
    """Node n1 registers (heartbeat every 5 s) and heartbeats every second for `seconds`."""
    gpu = ev.GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920, clique="c")
    node = ev.NodeInfo(name="n1", cpu_milli=8000, memory_mib=64000, gpus=(gpu,))
    out: list[ev.Event] = [
        ev.NodeRegistered(event_id="reg", node=node, heartbeat_s=5, producer="node-agent/n1")
    ]
    out += [
        ev.NodeHeartbeat(
            event_id=f"hb{t}", occurred_at_ms=t * S, node="n1", producer="node-agent/n1"
        )
        for t in range(1, seconds + 1)
    ]
    return out


async def refusal_of(bus: Bus, clock_ms: int, wait_s: float = 5.0) -> Host:
    """Run a scheduler host over the stream until it refuses, or until it decided and sits
    idle (which the tests then catch). A refusing host never decides again (`Host._refuse`
    waits to be stopped), so nothing can land after `gap` is set: no time to wait out."""
    host = Host(Scheduler(), bus, clock=lambda: clock_ms, max_idle_s=0.2, stall_log_s=0.3)
    task = asyncio.create_task(host.run())
    try:
        await eventually_async(
            lambda: host.gap is not None or host.idle.is_set(), wait_s, "a refusal or a decision"
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return host


async def loose_stream(bus: Bus) -> None:
    """A stream that allows delete and purge (the production stream denies both)."""
    await bus.js.add_stream(
        api.StreamConfig(
            name="GPULEDGER",
            subjects=["gl.>"],
            storage=api.StorageType.FILE,
            deny_delete=False,
            deny_purge=False,
            allow_direct=True,
        )
    )


async def ten_heartbeats_on(server: EmbeddedNats, monkeypatch) -> Bus:
    """Given a loose stream on `server` holding a registration and ten heartbeats (seq 1-11),
    the operator's bus on it."""
    as_admin(monkeypatch, server)
    bus = await Bus.connect(server.url, **server.client_options())
    await loose_stream(bus)
    for e in heartbeats(10):
        await bus.publish(e)
    return bus


def test_a_hole_in_the_stream_is_refused_not_skipped(monkeypatch, capsys):
    async def scenario():
        with EmbeddedNats() as server:
            bus = await ten_heartbeats_on(server, monkeypatch)
            await bus.js.delete_msg("GPULEDGER", 5)
            # a reader that meets the hole raises, it does not resubscribe forever or skip it
            follower = await bus.follower(3)
            assert (await follower.next(timeout=2)).seq == 4
            with pytest.raises(StreamGap, match="sequence 5 is missing"):
                await follower.next(timeout=2)
            await follower.close()
            # a scheduler host refuses to decide (clock far past the last heartbeat: the
            # node would be declared lost)
            host = await refusal_of(bus, clock_ms=3600 * S)
            last = await bus.last_seq()
            await bus.close()
            return host, last

    host, last = asyncio.run(scenario())
    assert host.gap is not None and "1 message(s) are missing" in host.gap
    assert host.stats.decide_calls == 0 and last == 11  # nothing published
    out = capsys.readouterr()
    assert (out.out + out.err).count("host.refusing") == 1


def test_a_stream_that_does_not_start_at_one_is_refused(monkeypatch):
    async def scenario():
        with EmbeddedNats() as server:
            bus = await ten_heartbeats_on(server, monkeypatch)
            await bus.js.purge_stream("GPULEDGER", keep=4)  # the head (registration) is gone
            host = await refusal_of(bus, clock_ms=3600 * S)
            last = await bus.last_seq()
            await bus.close()
            return host, last

    host, last = asyncio.run(scenario())
    assert host.gap is not None and "starts at sequence 8, not 1" in host.gap
    assert host.stats.decide_calls == 0 and host.stats.folded == 0 and last == 11


def test_a_truncated_block_file_is_detected_and_no_node_is_declared_lost(monkeypatch, tmp_path):
    log = heartbeats(120)
    now = 125 * S  # the full log: last heartbeat 5 s ago, the node is alive

    # the danger: from the first half alone the scheduler would declare n1 lost
    half = Ledger()
    for seq, e in enumerate(log[: len(log) // 2], 1):
        half.apply(seq, e)
    assert [type(e).__name__ for e in Scheduler().decide(half, now)] == ["NodeLost"]

    store = tmp_path / "js"

    async def publish(url: str) -> None:
        bus = await Bus.connect(url, **natsauth.options())
        await bus.ensure_stream()
        for e in log:
            await bus.publish(e)
        await bus.close()

    async def run_scheduler(url: str):
        bus = await Bus.connect(url, **natsauth.options())
        host = await refusal_of(bus, clock_ms=now)
        state = (await bus.stream_info()).state
        await bus.close()
        return host, state

    with EmbeddedNats(store) as server:
        as_admin(monkeypatch, server)
        asyncio.run(publish(server.url))
        port = server.port
    (blk,) = (p for p in store.rglob("*.blk") if STREAM in p.parts)  # not the lease bucket's
    os.truncate(blk, blk.stat().st_size // 2)  # a crash or a full disk cut the block file
    with EmbeddedNats(store, port=port) as server:
        as_admin(monkeypatch, server)
        host, state = asyncio.run(run_scheduler(server.url))

    assert state.messages < len(log) and state.last_seq == len(log)  # the server lost the tail
    assert host.gap is not None and "missing" in host.gap
    assert host.stats.decide_calls == 0 and host.stats.published == 0


def test_the_projector_stops_before_a_hole_and_says_so(monkeypatch, tmp_path):
    from gpuledger.projections.mappers import SequenceGap
    from gpuledger.projections.nats_source import run_projector
    from gpuledger.projections.store import connect_readonly

    db = tmp_path / "projection.duckdb"

    async def scenario():
        with EmbeddedNats() as server:
            bus = await ten_heartbeats_on(server, monkeypatch)
            first = await run_projector(
                server.url, db, connect_options=natsauth.options(), fetch_timeout=0.3, follow=False
            )
            for t in range(11, 16):
                await bus.publish(
                    ev.NodeHeartbeat(event_id=f"hb{t}", node="n1", producer="node-agent/n1")
                )
            await bus.js.delete_msg("GPULEDGER", 13)
            # as a service (`stop` given): one report, then it waits to be stopped; no raise,
            # so a supervisor has nothing to restart into the same hole
            stop = asyncio.Event()
            reasons: list[str] = []

            def on_gap(reason: str) -> None:
                reasons.append(reason)
                stop.set()

            second = await asyncio.wait_for(
                run_projector(
                    server.url,
                    db,
                    connect_options=natsauth.options(),
                    fetch_timeout=0.3,
                    stop=stop,
                    on_gap=on_gap,
                ),
                10,
            )
            # as a one-shot command: the gap is an error (the CLI exits 3)
            with pytest.raises(SequenceGap, match="missing between sequences 1 and 16"):
                await run_projector(
                    server.url,
                    db,
                    connect_options=natsauth.options(),
                    fetch_timeout=0.3,
                    follow=False,
                )
            await bus.close()
            return first, second, reasons

    first, second, reasons = asyncio.run(scenario())
    assert first == 11 and second == 11  # nothing folded past the hole
    assert len(reasons) == 1 and "1 message(s) are missing" in reasons[0]
    con = connect_readonly(db)
    try:
        assert con.execute("SELECT last_seq FROM projector_meta").fetchone() == (11,)
    finally:
        con.close()
