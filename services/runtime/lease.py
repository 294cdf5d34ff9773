"""Leader leases: one writer of decisions per service, through the NATS KV bucket `gpuledger-leases`.

The key is the service name; its value names the holder. Invariants:
- at most one holder at a time: the key is created with expected-last-sequence 0, and every
  renewal is a compare-and-set on the revision the holder last wrote;
- the bucket's max age is the lease TTL, so an entry the holder stopped renewing is removed
  by the server (server time, no client clocks involved) and another instance may create it;
- the epoch is the KV revision at acquisition: strictly greater than every earlier epoch of
  any service, so decisions stamped with it can be fenced ("ignore a stale epoch").

A lease alone does not stop a paused ex-leader from publishing; fencing by epoch does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import nats.errors
import nats.js.errors
import structlog
from nats.js import api
from nats.js.kv import KeyValue

from gpuledger.services.runtime.bus import Bus

BUCKET = "gpuledger-leases"
DEFAULT_TTL_S = 10.0


async def lease_bucket(bus: Bus, *, ttl_s: float = DEFAULT_TTL_S, replicas: int = 1) -> KeyValue:
    """Open the lease bucket, creating it (file storage, history 1, max age = TTL) if missing."""
    try:
        return await bus.js.key_value(BUCKET)
    except nats.js.errors.BucketNotFoundError:
        return await bus.js.create_key_value(
            api.KeyValueConfig(
                bucket=BUCKET,
                history=1,
                ttl=ttl_s,
                storage=api.StorageType.FILE,
                replicas=replicas,
                description="gpuledger leader leases (key = service name)",
            )
        )


class Lease:
    """Leadership of one service. `acquire()` waits until held and returns the epoch."""

    def __init__(
        self,
        kv: KeyValue,
        service: str,
        *,
        holder: str | None = None,
        ttl_s: float = DEFAULT_TTL_S,
        poll_s: float | None = None,
    ) -> None:
        self.kv = kv
        self.key = service
        self.holder = holder or f"{service}/{uuid.uuid4().hex[:12]}"
        self.ttl_s = ttl_s
        self.poll_s = poll_s if poll_s is not None else ttl_s / 4
        self.epoch: int | None = None
        """Revision at acquisition while held; None otherwise."""
        self.lost = asyncio.Event()
        """Set when a held lease could not be renewed (someone else may hold it now)."""
        self._revision = 0
        self._renewer: asyncio.Task[None] | None = None
        self.log = structlog.get_logger("gpuledger.lease").bind(service=service, holder=self.holder)

    @property
    def held(self) -> bool:
        return self.epoch is not None and not self.lost.is_set()

    def _value(self) -> bytes:
        return json.dumps({"holder": self.holder, "ttl_s": self.ttl_s}).encode()

    async def try_acquire(self) -> int | None:
        """One attempt: the epoch if this holder now leads, None if another holder does."""
        try:
            revision = await self.kv.create(self.key, self._value())
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        self.epoch = self._revision = revision
        self.lost.clear()
        self.log.info("lease.acquired", epoch=revision)
        return revision

    async def acquire(self) -> int:
        """Wait until this holder leads; start renewing in the background; return the epoch."""
        while True:
            epoch = await self.try_acquire()
            if epoch is not None:
                self._renewer = asyncio.create_task(self._renew_forever())
                return epoch
            await asyncio.sleep(self.poll_s)

    async def renew(self) -> bool:
        """Compare-and-set the entry; False (and `lost` set) when it is no longer ours."""
        if self.epoch is None:
            return False
        try:
            self._revision = await self.kv.update(self.key, self._value(), last=self._revision)
            return True
        except nats.js.errors.KeyWrongLastSequenceError:
            self._lose("taken over or expired")
            return False

    async def _renew_forever(self) -> None:
        interval = self.ttl_s / 3
        while self.held:
            await asyncio.sleep(interval)
            try:
                if not await self.renew():
                    return
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as err:
                # Cannot reach the server: we cannot prove we still lead, so stop leading.
                self._lose(f"renewal failed: {err!r}")
                return

    def _lose(self, why: str) -> None:
        if self.epoch is not None:
            self.log.warning("lease.lost", epoch=self.epoch, why=why)
        self.epoch = None
        self.lost.set()

    async def hold(self) -> None:
        """Lead whenever possible: acquire, and after a loss acquire again, until cancelled."""
        while True:
            if not self.held:
                await self.acquire()
            await self.lost.wait()

    async def release(self) -> None:
        """Stop renewing and delete the entry (if still ours) so a successor need not wait."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        if self.epoch is not None:
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, TimeoutError):
                await self.kv.delete(self.key, last=self._revision)
                self.log.info("lease.released", epoch=self.epoch)
        self.epoch = None
