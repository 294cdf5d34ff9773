"""Bus: stream settings, deduplicated publish, create-once, ordered readers, durables."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from urllib.parse import urlparse

import nats.js.errors
import pytest
from nats.aio.client import Server
from nats.js import api

from gpuledger import events
from gpuledger.services.runtime.bus import AlreadyExists, Bus, Follower, ServerRotation
from tests.waiting import eventually, eventually_async


def submitted(job_id: str, event_id: str = "") -> events.JobSubmitted:
    return events.JobSubmitted(
        event_id=event_id,
        job=events.JobSpec(job_id=job_id, tenant="t", resources=events.Resources(gpus=1)),
    )


async def test_stream_settings_are_as_specified(bus: Bus) -> None:
    info = await bus.stream_info()
    cfg = info.config
    assert cfg.name == "GPULEDGER"
    assert cfg.subjects == ["gl.>"]
    assert cfg.storage == api.StorageType.FILE
    assert cfg.deny_delete is True
    assert cfg.deny_purge is True
    assert cfg.discard == api.DiscardPolicy.NEW
    assert cfg.duplicate_window == 120.0
    assert cfg.num_replicas == 1
    # ensure_stream is idempotent and updates the duplicate window
    info = await bus.ensure_stream(duplicate_window_s=300)
    assert info.config.duplicate_window == 300.0


async def test_same_msg_id_twice_is_stored_once(bus: Bus) -> None:
    first = await bus.publish(submitted("j1", "sub-j1"))
    again = await bus.publish(submitted("j1", "sub-j1"))
    assert first == again == 1
    assert await bus.last_seq() == 1
    # no event id: no deduplication
    assert await bus.publish(submitted("j2")) == 2
    assert await bus.publish(submitted("j2")) == 3


async def test_create_once_raises_already_exists(bus: Bus) -> None:
    seq = await bus.create_once(submitted("j1", "sub-j1"))
    assert seq == 1
    with pytest.raises(AlreadyExists) as err:
        await bus.create_once(submitted("j1", "sub-j1-other"))
    assert err.value.subject == "gl.submit.t.j1"
    with pytest.raises(AlreadyExists):
        await bus.create_once(submitted("j1"))
    # the very same event again is an idempotent retry: the original seq
    assert await bus.create_once(submitted("j1", "sub-j1")) == 1
    assert await bus.last_seq() == 1


async def test_read_all_stops_at_the_last_seq_at_call_time(bus: Bus) -> None:
    for i in range(5):
        await bus.publish(submitted(f"j{i}"))
    records = [r async for r in bus.read_all()]
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert records[0].subject == "gl.submit.t.j0"
    assert events.decode(records[0].data) == submitted("j0")
    assert [r.seq async for r in bus.read_all(after_seq=3)] == [4, 5]
    assert [r.seq async for r in bus.read_all(after_seq=5)] == []


async def test_follow_continues_live(bus: Bus) -> None:
    await bus.publish(submitted("a"))
    seen: list[int] = []

    async def consume() -> None:
        async for record in bus.follow(after_seq=0):
            seen.append(record.seq)
            if len(seen) == 3:
                return

    task = asyncio.create_task(consume())
    await eventually_async(lambda: seen == [1], what="the follower to read the first record")
    await bus.publish(submitted("b"))
    await bus.publish(submitted("c"))
    await asyncio.wait_for(task, 5)
    assert seen == [1, 2, 3]


async def test_durable_consumer_acks_and_resumes(bus: Bus) -> None:
    for i in range(3):
        await bus.publish(submitted(f"j{i}"))
    sub = await bus.durable("projector")
    msgs = await sub.fetch(2, timeout=2)
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2]
    for m in msgs:
        await m.ack_sync()
    await sub.unsubscribe()
    again = await bus.durable("projector")
    msgs = await again.fetch(5, timeout=2)
    assert [m.metadata.sequence.stream for m in msgs] == [3]


async def test_a_job_id_is_created_once_per_tenant_and_the_stored_creation_comes_back(
    bus: Bus,
) -> None:
    first = submitted("shared", event_id="s-1")
    seq = await bus.create_once(first)
    again = submitted("shared", event_id="s-3")  # the same tenant, other content
    with pytest.raises(AlreadyExists) as exists:
        await bus.create_once(again)
    stored = exists.value.existing
    assert (stored.seq, stored.subject) == (seq, "gl.submit.t.shared")
    assert events.decode(stored.data) == first
    # job ids are per tenant: another tenant's creation of the same id is its own
    other_tenant = events.JobSubmitted(
        event_id="s-2",
        job=events.JobSpec(job_id="shared", tenant="u", resources=events.Resources(gpus=1)),
    )
    assert await bus.create_once(other_tenant) == seq + 1
    assert await bus.last_seq() == seq + 1


async def test_every_message_read_carries_the_streams_receive_time(bus: Bus) -> None:
    import time  # the stream's clock, not a wait

    before = time.time_ns() // 1_000_000
    await bus.publish_raw("gl.submit.t.j", b"{}")
    after = time.time_ns() // 1_000_000
    (record,) = [r async for r in bus.read_all()]
    assert before <= record.received_ms <= after
    eventually(lambda: time.time_ns() // 1_000_000 > after, what="the clock to pass the write")
    again = [r async for r in bus.read_all()]
    assert again[0].received_ms == record.received_ms  # stored, not the read time


async def test_a_follower_reads_a_backlog_larger_than_its_queue_in_order_once(
    bus, monkeypatch
) -> None:
    # A follower queues at most BUFFERED messages; past that the client's pending queue and
    # JetStream's flow control hold the rest back. Nothing is lost, repeated or reordered.
    from gpuledger.services.runtime.bus import Follower

    monkeypatch.setattr(Follower, "BUFFERED", 8)
    batch = [submitted(f"j{i}", f"sub-j{i}") for i in range(600)]
    for i in range(0, len(batch), 100):
        await bus.publish_many(batch[i : i + 100])
    follower = await bus.follower(after_seq=0)
    try:
        seen, most_queued = [], 0
        while len(seen) < 600:
            d = await follower.next(timeout=5)
            assert d is not None, f"stalled after {len(seen)}"
            most_queued = max(most_queued, follower._queue.qsize())
            seen.append((d.seq, d.pending, events.decode(d.data).job.job_id))
        assert [s for s, _, _ in seen] == list(range(1, 601))
        assert [j for _, _, j in seen] == [f"j{i}" for i in range(600)]
        assert seen[-1][1] == 0 and seen[0][1] == 599  # messages left in the stream after each
        assert most_queued <= 8
        assert await follower.next(timeout=0.2) is None  # nothing more: a timeout, not a hang
        await bus.publish(submitted("late", "sub-late"))
        late = await follower.next(timeout=5)
        assert late is not None and late.seq == 601
    finally:
        await follower.close()


class StreamAwayFor:
    """The bus's JetStream context, answering "no response from stream" to the first `n`
    publishes (a new replicated stream not yet reachable, its leader being elected)."""

    def __init__(self, js, n: int) -> None:
        self.js, self.n, self.calls = js, n, 0

    def __getattr__(self, name):
        return getattr(self.js, name)

    async def publish(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.n:
            raise nats.js.errors.NoStreamResponseError
        return await self.js.publish(*args, **kwargs)


async def test_publish_retrying_rides_out_a_stream_that_does_not_answer_yet(bus: Bus) -> None:
    bus.js = away = StreamAwayFor(bus.js, 2)
    assert await bus.publish_retrying(submitted("j1", "sub-j1"), within_s=10) == 1
    assert away.calls == 3 and await bus.last_seq() == 1


async def test_publish_retrying_gives_up_with_the_error_after_its_bound(bus: Bus) -> None:
    bus.js = away = StreamAwayFor(bus.js, 10**6)
    started = asyncio.get_running_loop().time()
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await bus.publish_retrying(submitted("j1", "sub-j1"), within_s=1.0)
    assert asyncio.get_running_loop().time() - started < 2.5 and away.calls >= 2
    # an event without an id is not retried: a retry could store it twice
    away.calls = 0
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await bus.publish_retrying(submitted("j2"), within_s=10)
    assert away.calls == 1


def _pool(*netlocs: str) -> list[Server]:
    return [Server(uri=urlparse(f"nats://{n}"), reconnects=0) for n in netlocs]


def test_a_client_that_lost_its_server_tries_every_other_one_at_once_and_the_lost_one_last():
    rotation = ServerRotation()
    rotation.connected("a:1")
    pool = _pool(
        "a:1", "b:2", "c:3"
    )  # the order nats-py shuffled the pool into: the lost one first
    picks = [rotation(pool, {}) for _ in range(6)]
    assert [s.uri.netloc for s, _ in picks] == ["b:2", "c:3", "a:1", "b:2", "c:3", "a:1"]
    delays = [d for _, d in picks]
    assert delays[:2] == [0.0, 0.0]  # the live nodes at once
    assert all(0.25 <= d <= 0.5 for d in delays[2:3])  # backoff only after a full pass
    assert all(0.25 <= d <= 1.0 for d in delays[3:])


def test_a_reconnected_client_starts_its_next_outage_afresh():
    rotation = ServerRotation()
    rotation.connected("a:1")
    pool = _pool("a:1", "b:2", "c:3")
    for _ in range(4):
        rotation(pool, {})
    rotation.connected("c:3")
    assert [(s.uri.netloc, d) for s, d in (rotation(pool, {}), rotation(pool, {}))] == [
        ("a:1", 0.0),
        ("b:2", 0.0),
    ]


def test_a_single_server_is_retried_with_the_backoff_from_the_first_attempt():
    rotation = ServerRotation()
    rotation.connected("a:1")
    delays = [rotation(_pool("a:1"), {})[1] for _ in range(3)]
    assert 0.25 <= delays[0] <= 0.5 and 0.25 <= delays[1] <= 1.0 and 0.25 <= delays[2] <= 2.0


async def test_a_follower_cancelled_as_its_message_arrives_stops_and_keeps_the_message() -> None:
    # Given a follower waiting for its next message (a host stops its reader by cancelling it)
    # When the message arrives within the loop turns before the cancellation is delivered
    # Then the wait ends cancelled (a stop is never lost) and the message stays queued
    cancelled_waits = 0
    for turns in range(4):
        follower = Follower(None, 0)  # type: ignore[arg-type]  # waiting reads only its queue
        waiting = asyncio.create_task(follower._take(5.0))
        await asyncio.sleep(0)
        follower._queue.put_nowait("message")  # type: ignore[arg-type]  # any item unblocks the queue
        for _ in range(turns):
            await asyncio.sleep(0)
        if waiting.done():  # it took the message before the cancellation: nothing to lose
            assert waiting.result() == "message"
            continue
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert follower._queue.get_nowait() == "message"
        cancelled_waits += 1
    assert cancelled_waits >= 1


class _FlakyJetStream:
    """add_stream answers `errors` in turn, then succeeds."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    async def add_stream(self, config):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "created"


def _bad_request(err_code: int, description: str) -> Exception:
    return nats.js.errors.BadRequestError(code=400, err_code=err_code, description=description)


async def test_creating_the_stream_waits_for_a_new_cluster_to_know_its_peers():
    # Given a cluster whose meta leader does not know enough peers yet, twice
    no_peers = _bad_request(10005, "no suitable peers for placement")
    bus = SimpleNamespace(js=_FlakyJetStream(no_peers, no_peers))
    # When the stream is created, then the third attempt creates it
    assert await Bus._add_stream(bus, api.StreamConfig(name="GPULEDGER"), within_s=10) == "created"
    assert bus.js.calls == 3


async def test_any_other_refusal_to_create_the_stream_is_raised_at_once():
    bus = SimpleNamespace(js=_FlakyJetStream(_bad_request(10052, "replicas > 1 not supported")))
    with pytest.raises(nats.js.errors.BadRequestError):
        await Bus._add_stream(bus, api.StreamConfig(name="GPULEDGER"), within_s=10)
    assert bus.js.calls == 1
