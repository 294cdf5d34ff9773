"""Leader leases over the NATS KV bucket `gpuledger-leases`."""

from __future__ import annotations

import asyncio

import nats.js.errors

from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.lease import Lease, lease_bucket
from tests.waiting import eventually_async


async def test_one_holder_at_a_time_and_release_hands_over(bus: Bus) -> None:
    kv = await lease_bucket(bus, ttl_s=5)
    a = Lease(kv, "scheduler", holder="a")
    b = Lease(kv, "scheduler", holder="b")
    epoch_a = await a.acquire()
    assert a.held and epoch_a > 0
    assert await b.try_acquire() is None
    assert await a.renew()
    assert a.epoch == epoch_a  # renewals keep the epoch
    other = Lease(kv, "quota", holder="q")
    assert await other.try_acquire() is not None  # keys are per service
    await a.release()
    assert not a.held
    epoch_b = await asyncio.wait_for(b.acquire(), 3)
    assert epoch_b > epoch_a
    await b.release()
    await other.release()


async def test_an_unrenewed_lease_expires_and_the_old_holder_loses(bus: Bus) -> None:
    kv = await lease_bucket(bus, ttl_s=1)
    b_kv = FlakyKv(kv, TimeoutError())  # never fails: counts b's stored updates
    a = Lease(kv, "scheduler", holder="a", ttl_s=1)
    b = Lease(b_kv, "scheduler", holder="b", ttl_s=1, poll_s=0.1)
    epoch_a = await a.try_acquire()  # acquired, but never renewed: a crashed leader
    assert epoch_a is not None
    assert await b.try_acquire() is None
    epoch_b = await asyncio.wait_for(b.acquire(), 5)
    assert epoch_b > epoch_a
    assert not await a.renew()
    assert a.lost.is_set() and not a.held
    # b keeps renewing in the background, so it stays the holder past the TTL: four renewals
    # stored (every TTL/3) is more than a TTL after it acquired
    await eventually_async(lambda: b_kv.stored >= 5, what="four renewals of b")
    assert b.held and b.epoch == epoch_b
    assert await a.try_acquire() is None
    await b.release()


class FlakyKv:
    """A lease bucket whose next `fail` updates raise `error` (a NATS node away, the bucket's
    leader being re-elected); `stored_then_fail`: the update is stored, then its ack is lost.
    `stored` counts the updates the bucket stored, so a test waits for renewals, not time."""

    def __init__(self, kv, error: Exception, fail: int = 0, stored_then_fail: int = 0) -> None:
        self.kv, self.error, self.fail, self.stored_then_fail = kv, error, fail, stored_then_fail
        self.stored = 0

    def __getattr__(self, name):
        return getattr(self.kv, name)

    async def update(self, key, value, last=None):
        if self.fail:
            self.fail -= 1
            raise self.error
        revision = await self.kv.update(key, value, last=last)
        self.stored += 1
        if self.stored_then_fail:
            self.stored_then_fail -= 1
            raise self.error
        return revision


async def test_a_renewal_the_server_misses_for_a_moment_is_retried_and_the_holder_keeps_leading(
    bus: Bus,
) -> None:
    kv = FlakyKv(await lease_bucket(bus, ttl_s=10), nats.js.errors.NoStreamResponseError(), fail=2)
    a = Lease(kv, "scheduler", holder="a", ttl_s=3, poll_s=0.2)  # renews every 1 s
    epoch = await a.acquire()
    # two renewals fail, the third (before 2 s = TTL - 1 s) is stored
    await eventually_async(lambda: kv.fail == 0 and kv.stored >= 1, what="a stored renewal")
    assert kv.fail == 0 and a.held and a.epoch == epoch and not a.lost.is_set()
    assert await Lease(kv, "scheduler", holder="b", ttl_s=3).try_acquire() is None
    await a.release()


async def test_a_renewal_stored_but_unacknowledged_does_not_lose_the_lease(bus: Bus) -> None:
    kv = FlakyKv(await lease_bucket(bus, ttl_s=10), TimeoutError(), stored_then_fail=1)
    a = Lease(kv, "scheduler", holder="a", ttl_s=3, poll_s=0.2)
    epoch = await a.acquire()
    # the first renewal is stored but times out; the retry CASes again and is stored too
    await eventually_async(lambda: kv.stored >= 2, what="the renewal and its retry stored")
    assert kv.stored_then_fail == 0 and a.held and a.epoch == epoch
    assert await a.renew() and a.held
    await a.release()


async def test_a_renewal_failing_past_the_deadline_stops_leading(bus: Bus) -> None:
    kv = FlakyKv(await lease_bucket(bus, ttl_s=10), TimeoutError(), fail=1000)
    a = Lease(kv, "scheduler", holder="a", ttl_s=1.5, poll_s=0.1)  # deadline: 1 s after acquiring
    await a.acquire()
    await asyncio.wait_for(a.lost.wait(), 3)
    assert not a.held


async def test_a_holder_takes_its_own_entry_back_at_once(bus: Bus) -> None:
    kv = await lease_bucket(bus, ttl_s=30)
    a = Lease(kv, "scheduler", holder="scheduler/0/a", ttl_s=20)
    first = await a.acquire()
    a._lose("renewal failed: a NATS node was away")  # noqa: SLF001 - as the renewer does
    assert not a.held
    again = await asyncio.wait_for(a.acquire(), 2)  # not after its own 20 s TTL
    assert a.held and again > first
    a._renewer.cancel()  # noqa: SLF001 - the process is killed: it neither renews nor releases
    # its restarted successor, handed the same holder id by the supervisor, does the same
    a2 = Lease(kv, "scheduler", holder="scheduler/0/a", ttl_s=20)
    third = await asyncio.wait_for(a2.acquire(), 2)
    assert a2.held and third > again
    # another holder still waits for the TTL
    assert await Lease(kv, "scheduler", holder="scheduler/0/b", ttl_s=20).try_acquire() is None
    await a2.release()
