"""Leader leases over the NATS KV bucket `gpuledger-leases`."""

from __future__ import annotations

import asyncio

from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.lease import Lease, lease_bucket


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
    a = Lease(kv, "scheduler", holder="a", ttl_s=1)
    b = Lease(kv, "scheduler", holder="b", ttl_s=1, poll_s=0.1)
    epoch_a = await a.try_acquire()  # acquired, but never renewed: a crashed leader
    assert epoch_a is not None
    assert await b.try_acquire() is None
    epoch_b = await asyncio.wait_for(b.acquire(), 5)
    assert epoch_b > epoch_a
    assert not await a.renew()
    assert a.lost.is_set() and not a.held
    # b keeps renewing in the background, so it stays the holder past the TTL
    await asyncio.sleep(1.5)
    assert b.held and b.epoch == epoch_b
    assert await a.try_acquire() is None
    await b.release()
