"""Leader leases: one writer of decisions per service, through the NATS KV bucket `gpuledger-leases`.

The key is the service name; its value names the holder. Invariants:
- at most one holder at a time: the key is created with expected-last-sequence 0, and every
  renewal is a compare-and-set on the revision the holder last wrote;
- an entry whose revision a standby has seen unchanged for the holder's TTL (measured on the
  standby's own monotonic clock: no clocks are compared) is taken over by a compare-and-set on
  that revision, so the holder's TTL (`--leader-lease`, default 10 s) is what counts, not the
  bucket's; the bucket's max age (`DEFAULT_TTL_S`) is a backstop that removes an abandoned
  entry altogether;
- the epoch is the KV revision at acquisition: strictly greater than every earlier epoch of
  any service, so decisions stamped with it can be fenced ("ignore a stale epoch");
- a renewal that fails for want of the server (a NATS node killed or paused, the bucket's
  leader being re-elected, a slow machine) is retried until the lease could expire for a
  standby (`renew_deadline`: the last renewal sent plus the TTL, less one renewal interval
  of margin); only then does the holder stop leading;
- the holder's own entry is its own: a holder that finds its holder id in the entry (it lost
  the lease on a renewal error, or a renewal that timed out had in fact been stored) takes it
  back at once by a compare-and-set on the entry's revision, instead of waiting out its own
  TTL. Holder ids are unique per process (a supervisor may hand a restarted process its
  dead predecessor's id: `HOLDER_ENV`).

A lease alone does not stop a paused ex-leader from publishing; fencing by epoch does: the
ledger's fold refuses (`StaleLeaderEpoch`) a decision older than one already folded for its role.

The bucket is the operator's: `Bus.ensure_stream` (`gpuledger up`, `gpuledger apply` as admin)
creates it with the stream. A service only opens it (`open_lease_bucket`), waiting with one log
line per attempt while it is missing; it folds as a standby meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.js import api
from nats.js.kv import KeyValue

from gpuledger.services.runtime.auth import LEASE_BUCKET as BUCKET
from gpuledger.services.runtime.auth import LEASE_TTL_S as DEFAULT_TTL_S

HOLDER_ENV = "GPULEDGER_LEASE_HOLDER"
"""A holder id a supervisor passes to a process it (re)starts: the same for every incarnation
of one supervised child, and only ever held by one live process (the supervisor starts the
next incarnation after the previous one has exited), so a restarted leader takes its lease
back at once instead of waiting out its dead predecessor's TTL."""

Bus = Any
"""A `services.runtime.bus.Bus` (only its `js` is used; not imported: bus.py creates the
bucket with the stream through `lease_bucket`)."""


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


async def open_lease_bucket(bus: Bus, *, retry_s: float = 2.0) -> KeyValue:
    """Open the existing lease bucket, waiting (one warning per attempt) until the operator has
    created it; never creates it (a service's identity may not)."""
    log = structlog.get_logger("gpuledger.lease")
    while True:
        try:
            return await bus.js.key_value(BUCKET)
        except nats.js.errors.BucketNotFoundError:
            why = "no such bucket"
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as err:
            why = repr(err)[:200]
        log.warning(
            "lease.bucket_unavailable",
            bucket=BUCKET,
            error=why,
            retry_s=retry_s,
            action="the operator creates it with the stream: `gpuledger apply` (or "
            "`gpuledger up`) with the admin credential; folding as a standby meanwhile",
        )
        await asyncio.sleep(retry_s)


class Lease:
    """Leadership of one service. `acquire()` waits until held and returns the epoch."""

    def __init__(
        self,
        kv: KeyValue | None,
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
        self.poll_s = poll_s if poll_s is not None else min(ttl_s / 10, 1.0)
        """How often a standby looks at the entry: a dead holder is replaced within about
        TTL + 2 * poll_s of its last renewal."""
        self.epoch: int | None = None
        """Revision at acquisition while held; None otherwise."""
        self.lost = asyncio.Event()
        """Set when a held lease could not be renewed (someone else may hold it now)."""
        self._revision = 0
        self._seen: tuple[int, float] | None = None
        """(revision of another holder's entry, monotonic time we first saw it)."""
        self.renew_s = ttl_s / 3
        """Renewal interval (a third of the TTL, or of the bucket's max age if shorter)."""
        self._sent_at = 0.0
        """Monotonic time the last write that stored our entry was sent (no standby can
        have seen that revision earlier, so none takes over before this plus the TTL)."""
        self.opened: asyncio.Event = asyncio.Event()
        if kv is not None:
            self.opened.set()
        self._renewer: asyncio.Task[None] | None = None
        self.log = structlog.get_logger("gpuledger.lease").bind(service=service, holder=self.holder)

    @property
    def held(self) -> bool:
        return self.epoch is not None and not self.lost.is_set()

    def _value(self) -> bytes:
        return json.dumps({"holder": self.holder, "ttl_s": self.ttl_s}).encode()

    async def open(self, bus: Bus) -> None:
        """Open the bucket (waiting for the operator to create it) if not given one."""
        if self.kv is None:
            self.kv = await open_lease_bucket(bus)
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, TimeoutError):
            max_age = (await self.kv.status()).ttl
            if max_age:
                self.renew_s = min(self.ttl_s, max_age) / 3
        self.opened.set()

    async def try_acquire(self) -> int | None:
        """One attempt: the epoch if this holder now leads, None if another holder does
        (and renewed its entry within its TTL, as far as this instance has watched)."""
        assert self.kv is not None, "open() first"
        sent = time.monotonic()
        try:
            revision = await self.kv.create(self.key, self._value())
        except nats.js.errors.KeyWrongLastSequenceError:
            sent = time.monotonic()
            revision = await self._take_over_expired()
            if revision is None:
                return None
        self.epoch = self._revision = revision
        self._sent_at = sent
        self._seen = None
        self.lost.clear()
        self.log.info("lease.acquired", epoch=revision)
        return revision

    async def _take_over_expired(self) -> int | None:
        """Another holder's entry: take it over (compare-and-set on its revision) once that
        revision has stayed the same for the holder's TTL on our clock; else None."""
        assert self.kv is not None
        try:
            entry = await self.kv.get(self.key)
        except nats.js.errors.KeyNotFoundError:
            self._seen = None  # gone meanwhile (released or expired): create next time
            return None
        revision = entry.revision or 0
        if self._holder_of(entry) == self.holder:  # ours: lost on an error, or a predecessor's
            taken = await self._reclaim(entry)
            if taken is not None:
                self.log.warning("lease.reclaimed", epoch=taken, previous_revision=revision)
            return taken
        now = time.monotonic()
        if self._seen is None or self._seen[0] != revision:
            self._seen = (revision, now)
            return None
        try:
            ttl = float(json.loads(entry.value or b"{}").get("ttl_s", self.ttl_s))
        except (ValueError, TypeError, AttributeError):
            ttl = self.ttl_s
        if now - self._seen[1] < ttl:
            return None
        try:
            taken = await self.kv.update(self.key, self._value(), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None  # renewed, released or taken by another standby just now
        self.log.warning(
            "lease.taken_over",
            epoch=taken,
            previous_revision=revision,
            unrenewed_s=round(now - self._seen[1], 3),
        )
        return taken

    async def _reclaim(self, entry: Any) -> int | None:
        """Write our value over `entry` (one that names this holder) by compare-and-set on its
        revision: the new revision, or None when someone wrote the key since."""
        assert self.kv is not None
        if entry is None or self._holder_of(entry) != self.holder:
            return None
        try:
            return await self.kv.update(self.key, self._value(), last=entry.revision or 0)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None

    @staticmethod
    def _holder_of(entry: Any) -> str | None:
        try:
            return json.loads(entry.value or b"{}").get("holder")
        except (ValueError, TypeError, AttributeError):
            return None

    @property
    def renew_deadline(self) -> float:
        """Monotonic time until which a failing renewal is retried while still leading: the
        last renewal sent plus the TTL (no standby takes over before), less one renewal
        interval of margin."""
        return self._sent_at + self.ttl_s - self.renew_s

    async def acquire(self) -> int:
        """Wait until this holder leads; start renewing in the background; return the epoch.
        Server trouble is logged and retried (a standby keeps trying until cancelled)."""
        while True:
            try:
                epoch = await self.try_acquire()
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as err:
                self.log.warning("lease.acquire_failed", error=repr(err)[:200])
                epoch = None
            if epoch is not None:
                self._renewer = asyncio.create_task(self._renew_forever())
                return epoch
            delay = self.poll_s
            if self._seen is not None:  # wake right when the seen entry would have expired
                due = self._seen[1] + self.ttl_s - time.monotonic()
                if 0 < due < delay:
                    delay = due + 0.01
            await asyncio.sleep(delay)

    async def renew(self) -> bool:
        """Compare-and-set the entry; False (and `lost` set) when it is no longer ours."""
        if self.epoch is None or self.kv is None:
            return False
        sent = time.monotonic()
        try:
            self._revision = await self.kv.update(self.key, self._value(), last=self._revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            # An earlier renewal that timed out may have been stored after all: then the entry
            # still names us, and nobody else has written it since.
            try:
                entry = await self.kv.get(self.key)
            except nats.js.errors.KeyNotFoundError:
                entry = None
            revision = await self._reclaim(entry)
            if revision is None:
                self._lose("taken over or expired")
                return False
            self._revision = revision
        self._sent_at = sent
        return True

    async def _renew_forever(self) -> None:
        delay = self.renew_s
        while self.held:
            await asyncio.sleep(delay)
            try:
                if not await self.renew():
                    return
                delay = self.renew_s
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as err:
                # The server is away for now: retry while no standby can have taken over; past
                # that we cannot prove we still lead, so stop leading.
                left = self.renew_deadline - time.monotonic()
                if left <= 0:
                    self._lose(f"renewal failed: {err!r}")
                    return
                self.log.warning(
                    "lease.renew_failed",
                    epoch=self.epoch,
                    error=repr(err)[:200],
                    retry_s=round(min(self.poll_s, left), 3),
                )
                delay = min(self.poll_s, left)

    def _lose(self, why: str) -> None:
        if self.epoch is not None:
            self.log.warning("lease.lost", epoch=self.epoch, why=why)
        self.epoch = None
        self.lost.set()

    async def hold(self, bus: Bus | None = None) -> None:
        """Lead whenever possible: acquire, and after a loss acquire again, until cancelled.
        With `bus`, open the bucket first (waiting for it)."""
        if bus is not None:
            await self.open(bus)
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
        if self.epoch is not None and self.kv is not None:
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, TimeoutError):
                await self.kv.delete(self.key, last=self._revision)
                self.log.info("lease.released", epoch=self.epoch)
        self.epoch = None
