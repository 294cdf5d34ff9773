"""The one generic host loop that runs any `Service` (services/domain/tooling/service.py) live.

Cycle: fold the whole log on start, then forever: fold what is delivered; once caught up
(no message immediately pending), call `decide(state, now_ms)`, publish its events with
`Nats-Msg-Id = event_id`, and fold until the stream has delivered past the last of them
before deciding again; with nothing to do, sleep until the next message or the service's
`next_wakeup_ms`, whichever comes first.

Invariants:
- `decide` never runs on a state that misses the host's own previous output (the host waits
  until it has folded past the last sequence it published);
- the wall clock is read only through the `clock` callable, and only to pass `now_ms`;
- an external input's time is its stream receive time when the client's is missing or
  implausible (`events.at_receipt`, from the message's stored JetStream timestamp), so
  every refold gives it the same time;
- a message that does not decode (any failure: `events.decode` applies the size, depth and
  number limits of `events.limits`), or whose `evolve` raises, is skipped and recorded once as
  `DeadLettered` on `gl.dead.<seq>` (deterministic id plus create-once, so any number of
  hosts record it once); it is published only when the host is caught up, so a refold that
  later meets the existing `DeadLettered` publishes nothing. `evolve` should validate before
  mutating: the host cannot undo a partial in-place update.
- the host decides only from a complete log: a stream whose first message is not 1, that
  has holes (deleted messages, or messages a damaged file store lost) or reports lost data
  is refused at start, and a hole met while following (`StreamGap`) likewise: the host logs
  one `host.refusing` line with the reason, sets `gap`, and from then on neither decides nor
  publishes (until restarted on a repaired stream);
- a decision batch that adds nothing new to the log (only duplicates) is followed by a sleep
  until a new message or a wakeup, never by an immediate re-decide (no hot loop on a decider
  whose `evolve` ignores its own output); a `decide` that raises is logged and retried on
  the next message or wakeup, while folding goes on; a decided event that cannot be published
  (no valid subject) is skipped and logged once per event id, never retried in a loop.
- logging cannot raise (`services.runtime.logging`), and no log call passes `event=`.

Snapshots (services/runtime/snapshots.py): with a `SnapshotStore`, the host first loads the
service's snapshot, checks it against the stream (one `host.snapshot_ignored` line and a full
refold if anything is wrong) and folds only the messages after its sequence. Once caught up,
with no dead letter pending, right after a decide's events were published (the leader only,
where a lease is used), it saves one when `SnapshotPolicy` says so (its cost kept to a small share of a core): a
forked child encodes (msgspec graph codec) and compresses the fold as it was at the fork (copy-on-write; the loop
pauses only for `fork()`), and the chunks are written in the background, one snapshot at a
time; deciding goes on. A failed write is logged and retried at the next due point. A service offers snapshots by having
`fold_of(state)` / `from_fold(fold, state)` (services/domain/tooling/deciding.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
import structlog
import tenacity

from gpuledger import events
from gpuledger.events import DeadLettered, UndecodableEvent, derive_event_id
from gpuledger.services.domain.fold.acceptance import subject_refusal
from gpuledger.services.domain.tooling.service import Service
from gpuledger.services.runtime.bus import AlreadyExists, Bus, Delivery, Follower, StreamGap
from gpuledger.services.runtime.gctune import LiveGc
from gpuledger.services.runtime.lease import HOLDER_ENV, Lease
from gpuledger.services.runtime.metrics import DurationHistogram
from gpuledger.services.runtime.snapshots import (
    Encoding,
    SnapshotPolicy,
    SnapshotStore,
    Unusable,
    config_digest,
    connection_mac_key,
    loads,
    snapshot_bucket,
    snapshot_key,
)
from gpuledger.services.runtime.snapshots import check as check_snapshot
from gpuledger.services.runtime.snapshots import check_state as check_snapshot_state
from gpuledger.services.runtime.storefull import store_write_error

Clock = Callable[[], int]
T = TypeVar("T")
PAYLOAD_HEAD_CHARS = 200
_BUS_ERRORS = (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError)


def wall_clock_ms() -> int:
    """Epoch milliseconds: the live shell's only source of time."""
    return time.time_ns() // 1_000_000


@dataclass
class HostStats:
    """Counters a host keeps (for logs, tests and health checks)."""

    folded: int = 0
    decide_calls: int = 0
    decisions: int = 0
    published: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    publish_errors: int = 0
    store_write_errors: int = 0
    """Publishes the store refused because it is full (`storefull.store_write_error`) or did
    not acknowledge in time while connected (a disk-full store latches; see storefull.py)."""
    decide_errors: int = 0
    dead_letters_published: int = 0
    """`DeadLettered` events this host recorded in the log (another host may record one first)."""
    decide_seconds: DurationHistogram = field(default_factory=DurationHistogram)
    """Wall-clock duration of every `decide` call (services/runtime/metrics.py exports it)."""
    restored_seq: int = 0
    """Sequence of the snapshot the host started from (0: it folded the whole log)."""
    snapshots_saved: int = 0
    snapshot_errors: int = 0
    last_snapshot_seq: int = 0


def _text(err: BaseException, limit: int = 300) -> str:
    """An exception as one bounded line for logs and dead-letter reasons (never raises)."""
    try:
        text = str(err)
    except Exception:  # noqa: BLE001 - e.g. an int too large to print
        text = repr(type(err))
    return text[:limit]


def dead_letter_for(delivery: Delivery, reason: str) -> DeadLettered:
    """The deterministic DeadLettered event every host derives for a bad message."""
    return DeadLettered(
        event_id=derive_event_id("DeadLettered", str(delivery.seq)),
        correlation_id=str(delivery.seq),
        stream_seq=delivery.seq,
        subject=delivery.subject,
        reason=reason[:1000],
        payload_head=delivery.data[: PAYLOAD_HEAD_CHARS * 4].decode("utf-8", "replace")[
            :PAYLOAD_HEAD_CHARS
        ],
    )


class Host:
    """Runs one `Service` over a `Bus`. `run()` returns only by cancellation or a bug."""

    def __init__(
        self,
        service: Service,
        bus: Bus,
        *,
        clock: Clock = wall_clock_ms,
        max_idle_s: float = 30.0,
        min_sleep_s: float = 0.01,
        stall_log_s: float = 5.0,
        retry_backoff_s: float = 0.5,
        lease: Lease | None = None,
        snapshots: SnapshotStore | None = None,
        snapshot_policy: SnapshotPolicy | None = None,
        gc_policy: bool = False,
    ) -> None:
        self.service = service
        self.snapshots = snapshots if hasattr(service, "fold_of") else None
        self.snapshot_policy = snapshot_policy or SnapshotPolicy()
        self._snapshot_task: asyncio.Task[None] | None = None
        self._snapshot_at = time.monotonic()
        self._snapshot_pause_s = 0.0
        self._snapshot_cost_s = 0.0
        self._manifest: Any = None
        self.lease = lease
        self.bus = bus
        self.clock = clock
        self.max_idle_s = max_idle_s
        self.min_sleep_s = min_sleep_s
        self.stall_log_s = stall_log_s
        self.retry_backoff_s = retry_backoff_s
        self.state: Any = service.initial_state()
        self.folded_seq = 0
        self.stream_seq = 0
        """The stream's last sequence as far as this host knows (at start, from each delivery's
        pending count, from its own publishes): fold lag = stream_seq - folded_seq."""
        self.stats = HostStats()
        self.idle = asyncio.Event()
        """Set while the host is caught up, has nothing to decide and waits; for tests/health."""
        self.log = structlog.get_logger("gpuledger.host").bind(
            service=service.name, instance=service.instance
        )
        self._awaiting_seq = 0
        self._pending_dead: dict[int, DeadLettered] = {}
        self._unpublishable: set[str] = set()  # event ids already reported as unroutable
        self.gc = LiveGc() if gc_policy else None
        """The collector policy (services/runtime/gctune.py), None to leave Python's own."""
        self._unaffected_by: frozenset[type] = getattr(service, "unaffected_by", frozenset())
        self._stale = True
        """Whether decide must run when caught up: False only after a quiet decide, until an
        event that can change its answer is folded (the service's `unaffected_by`), the node
        set changes, the lease changes, or its wake-up (or the idle timeout) comes."""
        self._quiet_at: tuple[Any, Any] = (None, None)  # (nodes_version, leader epoch) then
        self._wake_at: int | None = None
        self.gap: str | None = None
        """Why the host refuses to decide (the log is incomplete), None while it is whole;
        for status and health checks."""

    @property
    def may_decide(self) -> bool:
        """True unless a leader lease is configured and not held (standbys fold only)."""
        return self.lease is None or self.lease.held

    @property
    def leader_epoch(self) -> int | None:
        """Epoch of the held lease (for deciders to stamp), None without one."""
        return None if self.lease is None else self.lease.epoch

    # ------------------------------------------------------------------ main loop

    async def run(self) -> None:
        if self.snapshots is not None and self.snapshot_policy.enabled:
            await self._restore()
        follower = await self._open_follower()
        try:
            await self._loop(follower)
        except StreamGap as gap:
            await self._refuse(str(gap))
        finally:
            await follower.close()
            if self._snapshot_task is not None:
                self._snapshot_task.cancel()

    # ------------------------------------------------------------------ snapshots

    async def _restore(self) -> None:
        """Start from the service's snapshot if it checks out; else one line, full refold."""
        store = self.snapshots
        assert store is not None
        started = time.monotonic()
        try:
            manifest = await store.manifest()
            if manifest is None:
                self.log.info("host.no_snapshot", key=store.key)
                return
            self._manifest = manifest
            info = await self.bus.stream_info()
            check_snapshot(
                manifest,
                name=self.service.name,
                instance=self.service.instance,
                first_seq=info.state.first_seq if info.state.messages else 0,
                last_seq=info.state.last_seq,
                created=str(info.created or ""),
            )
            fold = loads(await store.payload(manifest), manifest)
            check_snapshot_state(manifest, fold)
            try:
                state = self.service.from_fold(fold, self.state)
            except Exception as err:  # noqa: BLE001 - e.g. another service's kind of fold
                raise Unusable(f"does not fit this service: {_text(err)}") from None
        except Unusable as why:
            self.log.warning(
                "host.snapshot_ignored",
                key=store.key,
                reason=str(why),
                action="folding the whole log",
            )
            return
        except _BUS_ERRORS as err:
            self.log.warning(
                "host.snapshot_ignored",
                key=store.key,
                reason=f"cannot read it: {_text(err)}",
                action="folding the whole log",
            )
            return
        self.state = state
        self.folded_seq = self.stats.restored_seq = self.stats.last_snapshot_seq = manifest.seq
        self.log.info(
            "host.snapshot_loaded",
            key=store.key,
            seq=manifest.seq,
            bytes=manifest.bytes,
            seconds=round(time.monotonic() - started, 3),
        )

    def _maybe_snapshot(self) -> None:
        """Save the fold if due (caught up, no dead letter pending; the leader only, where a
        lease is used, so replicas do not write one key at once)."""
        store, policy = self.snapshots, self.snapshot_policy
        if store is None or not policy.enabled or self._pending_dead or not self.may_decide:
            return
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return  # one write at a time
        new = self.folded_seq - self.stats.last_snapshot_seq
        if new <= 0:
            return
        since = time.monotonic() - self._snapshot_at
        if new < policy.every_events and since < policy.every_s:
            return
        if since < self._snapshot_cost_s / max(policy.max_cost_share, 1e-6):
            return  # the last encoding was long: keep snapshots a small share of a core
        t0 = time.monotonic()
        fold = self.service.fold_of(self.state)
        try:
            encoding = Encoding(fold)  # a forked child encodes; the loop pauses for the fork
        except Exception as err:  # noqa: BLE001 - no fork, or a state that does not encode
            self.stats.snapshot_errors += 1
            self.log.error("host.snapshot_failed", seq=self.folded_seq, error=_text(err))
            self._snapshot_at = time.monotonic()
            return
        self._snapshot_pause_s = time.monotonic() - t0
        self._snapshot_at = time.monotonic()
        fields = {
            "service": self.service.name,
            "instance": self.service.instance,
            "seq": self.folded_seq,
            "config_digest": config_digest(fold),
        }
        self._snapshot_task = asyncio.create_task(
            self._write_snapshot(fields, encoding), name=f"snapshot-{self.service.name}"
        )

    async def _write_snapshot(self, fields: dict[str, Any], encoding: Encoding) -> None:
        store = self.snapshots
        assert store is not None
        t0 = time.monotonic()
        try:
            try:
                fields["raw_bytes"], data, digest = await asyncio.to_thread(encoding.result)
                self._snapshot_cost_s = max(self._snapshot_pause_s, time.monotonic() - t0)
            except asyncio.CancelledError:
                encoding.kill()
                raise
            except RuntimeError as err:
                self.stats.snapshot_errors += 1
                self.log.error("host.snapshot_failed", seq=fields["seq"], error=_text(err))
                return
            info = await self.bus.stream_info()
            fields["stream_first_seq"] = info.state.first_seq if info.state.messages else 0
            fields["stream_created"] = str(info.created or "")
            try:  # the slot not in use now (another replica may have written since)
                current = await store.manifest()
            except Unusable:
                current = None
            self._manifest = await store.save(fields, data, digest, current)
        except _BUS_ERRORS as err:
            self.stats.snapshot_errors += 1
            self.log.warning("host.snapshot_failed", seq=fields["seq"], error=_text(err))
            return
        self.stats.snapshots_saved += 1
        self.stats.last_snapshot_seq = fields["seq"]
        self.log.info(
            "host.snapshot_saved",
            key=store.key,
            seq=fields["seq"],
            raw_bytes=fields["raw_bytes"],
            bytes=len(data),
            pause_s=round(self._snapshot_pause_s, 3),
            encode_s=round(self._snapshot_cost_s, 3),
            seconds=round(time.monotonic() - t0, 3),
        )

    async def _refuse(self, reason: str) -> None:
        """Never decide from a partial log: say so once, then only wait to be stopped."""
        self.gap = reason
        self.log.error(
            "host.refusing",
            reason=reason,
            folded_seq=self.folded_seq,
            action="not deciding from an incomplete log; restore the stream and restart",
        )
        await asyncio.Event().wait()  # until cancelled

    async def _until_answered(self, ask: Callable[[], Awaitable[T]]) -> T:
        """`ask()`'s answer, asked again `retry_backoff_s` later while the stream is
        unavailable (each time logged)."""
        while True:
            try:
                return await ask()
            except _BUS_ERRORS as err:
                self.log.warning("host.stream_unavailable", error=repr(err))
                await asyncio.sleep(self.retry_backoff_s)

    async def _damage(self) -> str | None:
        return await self._until_answered(lambda: self.bus.damage(self.folded_seq))

    async def _open_follower(self) -> Follower:
        return await self._until_answered(lambda: self.bus.follower(self.folded_seq))

    async def _loop(self, follower: Follower) -> None:
        started = time.monotonic()
        target = await self._last_seq()
        self.stream_seq = max(self.stream_seq, target)
        damage = await self._damage()
        if damage is not None:
            raise StreamGap(damage)
        caught_up = target <= self.folded_seq
        if caught_up:
            self._folded(events=0, seconds=0.0)
        while True:
            if caught_up and self.folded_seq >= self._awaiting_seq:
                delivery = await self._decide_or_wait(follower)
            else:
                delivery = await self._next_to_fold(follower, target, caught_up)
            if delivery is None:
                continue
            self._apply(delivery)
            was_caught_up = caught_up
            caught_up = (
                delivery.pending == 0 and follower.buffered == 0 and self.folded_seq >= target
            )
            if caught_up and not was_caught_up and self.stats.decide_calls == 0:
                self._folded(self.stats.folded, round(time.monotonic() - started, 3))

    def _folded(self, events: int, seconds: float) -> None:
        """The initial fold is done: the collector policy's turn, and one log line."""
        if self.gc is not None:
            self.gc.after_initial_fold()
        self.log.info(
            "host.folded",
            seq=self.folded_seq,
            from_seq=self.stats.restored_seq,
            events=events,
            seconds=seconds,
        )

    async def _decide_or_wait(self, follower: Follower) -> Delivery | None:
        """Caught up: record pending dead letters, else decide (unless still quiet) and
        publish; when that brought nothing new, wait for a message or the wake-up. None: go
        round again (after dead letters, our own output to fold, bus trouble, a wake-up)."""
        if self._pending_dead:
            await self._publish_dead_letters()
            return None
        if self.may_decide:
            produced_new = False if self._still_quiet() else await self._decide_and_publish()
            if produced_new is None:  # bus trouble: back off, then decide again
                await asyncio.sleep(self.retry_backoff_s)
                return None
            self._maybe_snapshot()  # after publishing: the decision is not delayed
            if produced_new:
                return None  # fold our own output before deciding again
        # Nothing new (no events, or only duplicates): sleep until news or a wakeup.
        return await self._sleep_until_message_or_wakeup(follower)

    async def _next_to_fold(
        self, follower: Follower, target: int, caught_up: bool
    ) -> Delivery | None:
        """The next delivery while folding towards `target` (or our own output); None after
        `stall_log_s` without one (logged; StreamGap when the log ends before `target`)."""
        delivery = await follower.next(timeout=self.stall_log_s)
        if delivery is None:
            if self.folded_seq < target and (damage := await self._damage()):
                raise StreamGap(damage)  # the log ends before its last sequence
            self.log.warning(
                "host.waiting",
                folded_seq=self.folded_seq,
                awaiting_seq=self._awaiting_seq,
                caught_up=caught_up,
            )
        return delivery

    async def _last_seq(self) -> int:
        return await self._until_answered(self.bus.last_seq)

    async def _sleep_until_message_or_wakeup(self, follower: Follower) -> Delivery | None:
        now = self.clock()
        try:
            wake = self.service.next_wakeup_ms(self.state, now)
        except Exception:
            self.log.exception("host.next_wakeup_failed", input_seq=self.folded_seq)
            wake = None
        timeout = self.max_idle_s
        if wake is not None:
            timeout = min(timeout, max(self.min_sleep_s, (wake - now) / 1000.0))
        if not self.may_decide and self.lease is not None:
            timeout = min(timeout, self.lease.poll_s)  # notice promptly when we lead again
        if self.gc is not None and follower.buffered == 0:
            self.gc.when_idle()
        self._wake_at = wake
        self.idle.set()
        try:
            delivery = await follower.next(timeout=timeout)
        finally:
            self.idle.clear()
        if delivery is None:
            self._stale = True  # a wake-up or the idle timeout: decide again
        return delivery

    def _still_quiet(self) -> bool:
        """Whether the last decide was quiet and nothing folded since can change that."""
        if self._stale or self._quiet_at != (
            getattr(self.state, "nodes_version", None),
            self.leader_epoch,
        ):
            return False
        return self._wake_at is None or self.clock() < self._wake_at

    # ------------------------------------------------------------------ folding

    def _apply(self, d: Delivery) -> None:
        self.folded_seq = d.seq
        self.stream_seq = max(self.stream_seq, d.seq + d.pending)
        self.stats.folded += 1
        try:
            event = events.decode(d.data)
        except UndecodableEvent as err:
            self._dead_letter(d, f"UndecodableEvent: {err}")
            return
        except Exception as err:  # noqa: BLE001 - decode promises UndecodableEvent; never die
            self._dead_letter(d, f"UndecodableEvent: {type(err).__name__}: {_text(err)}")
            return
        event = events.at_receipt(event, d.received_ms)  # client time: the stream's if absent/off
        wrong = subject_refusal(d.subject, event)  # the acceptance rule the projector applies
        if wrong is not None:
            self._dead_letter(d, f"Refused: {wrong}")
            return
        if type(event) not in self._unaffected_by:
            self._stale = True
        try:
            self.state = self.service.evolve(self.state, d.seq, event)
        except Exception as err:  # a bug or a bad event: skip it, never wedge
            if isinstance(event, DeadLettered):
                self.log.error("host.dead_letter_not_foldable", seq=d.seq, error=_text(err))
            else:
                self._dead_letter(d, f"{type(err).__name__}: {_text(err)}")
        if isinstance(event, DeadLettered):
            self._pending_dead.pop(event.stream_seq, None)

    def _dead_letter(self, d: Delivery, reason: str) -> None:
        self.stats.dead_letters += 1
        self.log.warning("host.dead_letter", seq=d.seq, subject=d.subject, reason=reason[:300])
        self._pending_dead[d.seq] = dead_letter_for(d, reason)

    async def _publish_dead_letters(self) -> None:
        for seq in sorted(self._pending_dead):
            dead = self._pending_dead[seq]
            try:
                out = await self.bus.create_once(dead)
                self._awaiting_seq = max(self._awaiting_seq, out)
                self.stream_seq = max(self.stream_seq, out)
                self.stats.dead_letters_published += 1
                self.log.info("host.dead_letter_recorded", seq=seq, dead_letter_seq=out)
            except AlreadyExists:
                pass  # another host recorded it first; we will fold theirs
            except _BUS_ERRORS as err:
                self.log.warning("host.dead_letter_publish_failed", seq=seq, error=repr(err))
                await asyncio.sleep(self.retry_backoff_s)
                return  # keep it pending; retried when next caught up
            del self._pending_dead[seq]

    # ------------------------------------------------------------------ deciding

    def _store_refused(self, err: BaseException) -> bool:
        """Whether a failed publish was the store's doing: refused as full, or not acknowledged
        although the connection is up."""
        if store_write_error(err) is not None:
            return True
        nc = getattr(self.bus, "nc", None)
        return isinstance(err, (TimeoutError, nats.errors.TimeoutError)) and bool(
            getattr(nc, "is_connected", False)
        )

    async def _decide_and_publish(self) -> bool | None:
        """Decide once; True if something new landed in the log, None on bus trouble."""
        now = self.clock()
        self.stats.decide_calls += 1
        if self.leader_epoch is not None and hasattr(self.service, "leader_epoch"):
            self.service.leader_epoch = self.leader_epoch  # stamped on every decision
        self._effects(now)
        out = self._timed_decide(now)
        if out is None:
            return False
        if not out:
            self._stale = False
            self._quiet_at = (getattr(self.state, "nodes_version", None), self.leader_epoch)
            return False
        return await self._publish(out, now)

    def _effects(self, now: int) -> None:
        """The service's I/O, before its pure decide (domain/service.py), if it has any; one
        failed effect round is logged and must not stop the service."""
        effects = getattr(self.service, "effects", None)
        if effects is None:
            return
        try:
            effects(self.state, now)
        except Exception:
            self.log.exception("host.effects_failed", input_seq=self.folded_seq, now_ms=now)

    def _timed_decide(self, now: int) -> list[events.Event] | None:
        """The decide's events, timed; None for a decider bug (logged: keep folding, retry on
        the next message or wakeup)."""
        started = time.perf_counter()
        try:
            out = list(self.service.decide(self.state, now))
        except Exception:
            self.stats.decide_seconds.observe(time.perf_counter() - started)
            self.stats.decide_errors += 1
            self.log.exception("host.decide_failed", input_seq=self.folded_seq, now_ms=now)
            return None
        self.stats.decide_seconds.observe(time.perf_counter() - started)
        return out

    async def _publish(self, out: list[events.Event], now: int) -> bool | None:
        """Publish a decision; True if something new landed in the log, None on bus trouble
        (an unroutable event, a decider bug, is skipped and logged once)."""
        seqs: list[int] = []
        new = duplicates = 0
        trouble = False
        for event, seq in zip(out, await self.bus.publish_many(out), strict=True):
            if isinstance(seq, (events.InvalidId, ValueError)):
                self._unroutable(event, seq)
                continue
            if isinstance(seq, BaseException):
                self._publish_failed(event, seq)
                trouble = True
                continue
            seqs.append(seq)
            self.stream_seq = max(self.stream_seq, seq)
            if seq > self._awaiting_seq:
                self._awaiting_seq = seq
            if seq > self.folded_seq and seq not in seqs[:-1]:
                new += 1
            else:
                duplicates += 1
        self.stats.decisions += 1
        self.stats.published += new
        self.stats.duplicates += duplicates
        self.log.info(
            "host.decision",
            input_seq=self.folded_seq,
            now_ms=now,
            events=[type(e).__name__ for e in out],
            seqs=seqs,
            new=new,
            duplicates=duplicates,
        )
        if trouble:
            return None
        return new > 0

    def _unroutable(self, event: events.Event, err: BaseException) -> None:
        """A decider bug: an event no subject takes; counted, logged once per event id."""
        self.stats.publish_errors += 1
        if event.event_id in self._unpublishable:
            return
        if len(self._unpublishable) >= 4096:
            self._unpublishable.clear()
        self._unpublishable.add(event.event_id)
        self.log.error(
            "host.unpublishable",
            event_type=type(event).__name__,
            event_id=event.event_id,
            error=_text(err),
        )

    def _publish_failed(self, event: events.Event, err: BaseException) -> None:
        """Bus trouble publishing `event`: counted (a store that refuses writes too), logged."""
        self.stats.publish_errors += 1
        if self._store_refused(err):
            self.stats.store_write_errors += 1
        self.log.warning("host.publish_failed", event_type=type(event).__name__, error=_text(err))


# ---------------------------------------------------------------------- entry points


async def run_service(
    service: Service,
    url: str,
    *,
    stop: asyncio.Event | None = None,
    clock: Clock = wall_clock_ms,
    lease_ttl_s: float | None = None,
    on_host: Callable[[Host], None] | None = None,
    nats_options: dict[str, Any] | None = None,
    snapshot_policy: SnapshotPolicy | None = None,
    **host_options: Any,
) -> None:
    """Connect to NATS at `url` and run `service` until `stop` is set or the task is cancelled.

    `stop` is honoured in every state: while the first connection is still being retried
    (NATS down), while folding, deciding or waiting for a server that went away; the host
    then releases its lease and closes the connection, each bounded to a few seconds.
    The stream and the lease bucket must exist (`Bus.ensure_stream`, done once by whoever
    provisions the log, the operator); until they do the host retries, one log line per
    attempt. With `lease_ttl_s` (the control-plane roles always pass it: `gpuledger run`,
    `up`), the host decides only while it holds the service's leader lease and stamps its
    epoch on every decision (`host.leader_epoch`); otherwise it is a folding standby, caught
    up and ready to take over.
    `on_host` receives the Host (tests, health endpoints, passing the epoch to a decider);
    `nats_options` go to `Bus.connect` (credentials, TLS). `snapshot_policy`: when to save
    the folded state (default `SnapshotPolicy()`; `enabled=False`: never load nor save one);
    without the snapshot bucket (the operator creates it) the host runs without snapshots.
    """
    host_options["snapshot_policy"] = snapshot_policy or SnapshotPolicy()
    cleaning_up = asyncio.Event()
    main = asyncio.create_task(
        _connect_and_run(
            service, url, clock, lease_ttl_s, on_host, nats_options, host_options, cleaning_up
        ),
        name=f"service-{service.name}-{service.instance}",
    )
    stopper = asyncio.create_task(asyncio.Event().wait() if stop is None else stop.wait())
    try:
        await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        # Cancel until it takes: on Python 3.11 `asyncio.wait_for` (inside nats-py's
        # `next_msg`) can swallow a cancellation that races with an arriving message.
        # Once the body is cleaning up (releasing the lease, closing), let it finish.
        while not main.done() and not cleaning_up.is_set():
            main.cancel()
            await asyncio.wait({main}, timeout=0.25)
        try:
            await main  # re-raises a crash
        except asyncio.CancelledError:
            if not main.cancelled():
                raise  # we were cancelled while waiting for it: keep propagating


async def _connect_and_run(
    service: Service,
    url: str,
    clock: Clock,
    lease_ttl_s: float | None,
    on_host: Callable[[Host], None] | None,
    nats_options: dict[str, Any] | None,
    host_options: dict[str, Any],
    cleaning_up: asyncio.Event,
) -> None:
    """`run_service`'s body; runs until cancelled, then cleans up within a few seconds
    (`cleaning_up` is set meanwhile)."""
    log = structlog.get_logger("gpuledger.host").bind(
        service=service.name, instance=service.instance
    )
    bus = await Bus.connect(
        url, name=f"gpuledger-{service.name}-{service.instance}", **(nats_options or {})
    )
    lease: Lease | None = None
    tasks: list[asyncio.Task[Any]] = []
    host: Host | None = None
    try:
        if lease_ttl_s is not None:  # the bucket is opened in the background: fold meanwhile
            # A supervisor's restarted child carries its dead predecessor's holder id, so it
            # takes the lease back at once instead of waiting out that holder's TTL.
            given = os.environ.get(HOLDER_ENV, "")
            lease = Lease(
                None,
                service.name,
                holder=given
                if given.startswith(f"{service.name}/")
                else f"{service.name}/{service.instance}/{uuid.uuid4().hex[:8]}",
                ttl_s=lease_ttl_s,
            )
            tasks.append(asyncio.create_task(lease.hold(bus), name=f"lease-{service.name}"))
        store = None
        snapshotting = host_options["snapshot_policy"].enabled and hasattr(service, "fold_of")
        if snapshotting:
            store = await open_snapshots(bus, service, log)
        host = Host(service, bus, clock=clock, lease=lease, snapshots=store, **host_options)
        if snapshotting and store is None:  # fold without; save once the bucket answers
            tasks.append(
                asyncio.create_task(
                    keep_opening_snapshots(bus, service, host, log),
                    name=f"snapshots-{service.name}",
                )
            )
        if on_host is not None:
            on_host(host)
        await answer_queries(bus, host)
        if getattr(service, "serves_intake", False):  # CI keys' submissions (runtime/intake.py)
            from gpuledger.services.runtime.intake import serve_intake

            served = host
            await serve_intake(bus, lambda: served.state)
        await host.run()
    finally:
        cleaning_up.set()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if lease is not None:
            with contextlib.suppress(TimeoutError, *_BUS_ERRORS):
                await asyncio.wait_for(lease.release(), 2.0)
        log.info("host.stopped", folded_seq=0 if host is None else host.folded_seq)
        with contextlib.suppress(*_BUS_ERRORS):
            await bus.close()


async def open_snapshots(bus: Bus, service: Service, log: Any) -> SnapshotStore | None:
    """The service's snapshot store, or None (one log line) when the bucket is missing or
    cannot be opened: the host then folds the whole log, as without snapshots."""
    try:
        kv = await snapshot_bucket(bus)
    except nats.js.errors.BucketNotFoundError:
        log.warning(
            "host.snapshots_off",
            reason="no snapshot bucket (the operator creates it: "
            "`gpuledger up`, or any admin command such as `gpuledger apply`)",
        )
        return None
    except _BUS_ERRORS as err:
        log.warning("host.snapshots_off", reason=f"cannot open the snapshot bucket: {_text(err)}")
        return None
    key = connection_mac_key(bus.nc)
    if key is None:
        log.warning(
            "host.snapshots_off",
            reason="no nkey seed to sign snapshots with (connect with a credential)",
        )
        return None
    return _snapshot_store(bus, service, kv, key)


def _snapshot_store(bus: Bus, service: Service, kv: Any, key: bytes) -> SnapshotStore:
    chunk = (bus.nc.max_payload or 1 << 20) - 4096
    return SnapshotStore(kv, snapshot_key(service.name, service.instance), chunk, key)


SNAPSHOT_REOPEN_S = (1.0, 30.0)
"""First and longest wait between `keep_opening_snapshots`' attempts (doubling)."""


async def keep_opening_snapshots(bus: Bus, service: Service, host: Host, log: Any) -> None:
    """Open the snapshot bucket in the background after it could not be opened at start (the
    server away: a NATS node killed, the bucket's leader being elected; or the bucket not
    created yet), with a doubling wait up to `SNAPSHOT_REOPEN_S[1]`, and give it to the host:
    from then on it saves its fold as usual. Without this a service started during an outage
    never saved one, and every later restart of it refolded the whole log. The fold it
    started with is not restored (it is already being built from the log). One log line,
    `host.snapshots_on`, when it works."""
    key = connection_mac_key(bus.nc)
    if key is None:
        log.warning(
            "host.snapshots_off",
            reason="no nkey seed to sign snapshots with (connect with a credential)",
        )
        return
    first, longest = SNAPSHOT_REOPEN_S
    await asyncio.sleep(first)
    retrying = tenacity.AsyncRetrying(  # waits 2 x first, 4 x first, ... up to longest
        wait=tenacity.wait_exponential(multiplier=2 * first, max=longest),
        retry=tenacity.retry_if_exception_type(_BUS_ERRORS),
    )  # BucketNotFoundError included
    kv = await retrying(snapshot_bucket, bus)
    host.snapshots = _snapshot_store(bus, service, kv, key)
    log.info("host.snapshots_on", key=host.snapshots.key)


async def answer_queries(bus: Bus, host: Host) -> None:
    """Answer the service's read-only queries (`query_subjects`, e.g. admission's job status
    for tenant CI identities) from the folded state, one queue group per service so one
    replica answers each. The answer is the service's pure `answer(state, subject)`."""
    subjects = getattr(host.service, "query_subjects", None)
    if not subjects:
        return
    log = structlog.get_logger("gpuledger.host").bind(service=host.service.name)

    async def respond(msg) -> None:
        if msg.reply:
            try:
                await msg.respond(host.service.answer(host.state, msg.subject))
            except Exception as err:  # noqa: BLE001 - a query never stops the service
                log.warning("host.query_failed", subject=msg.subject[:200], error=repr(err))

    await bus.nc.subscribe(subjects, queue=f"gpuledger-{host.service.name}-queries", cb=respond)


def serve(service: Service, url: str, **options: Any) -> None:
    """Run `service` as a process: configure logging, stop within a few seconds on SIGTERM /
    SIGINT in any state (services/runtime/stopping.py), exit status 0."""
    from gpuledger.services.runtime.logging import configure_logging
    from gpuledger.services.runtime.stopping import run_until_signalled

    configure_logging()
    if options.get("nats_options") is None:  # a process's credential: $GPULEDGER_CREDS, TLS env
        from gpuledger.services.runtime.auth import CREDS_ENV, client_options, tls_from_env

        options["nats_options"] = client_options(os.environ.get(CREDS_ENV), tls_from_env())

    options.setdefault("gc_policy", True)  # a process of its own: the live collector policy

    async def main(stop: asyncio.Event) -> None:
        await run_service(service, url, stop=stop, **options)

    run_until_signalled(main, name=f"{service.name}/{service.instance}")
