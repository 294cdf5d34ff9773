"""The event log as the live shell sees it: one JetStream stream (`GPULEDGER`, `gl.>`).

Invariants:
- every publish waits for JetStream's ack and returns the stream sequence it landed at;
- an event with an `event_id` is published with `Nats-Msg-Id = event_id`, so a retried or
  re-decided publish inside the duplicate window is dropped by the server and returns the
  sequence of the original;
- `create_once` publishes with `Nats-Expected-Last-Subject-Sequence: 0` over the event's
  creation filter (`events.subjects.create_filter`: a job id on its tenant's submit
  subject; ids are per tenant): an entity is created at most once (`AlreadyExists` otherwise, carrying the
  stored creation), whatever the duplicate window;
- every message read carries the stream's receive time (`received_ms`, the JetStream
  timestamp stored with it), which readers pass to `events.at_receipt` before folding;
- readers see messages in stream order, each exactly once, with no gaps (ordered consumer
  plus a sequence guard here); a hole the stream really has (messages deleted or lost to a
  damaged store) raises `StreamGap` instead of being skipped, and `Bus.damage()` reports
  one found from the stream's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

import nats
import nats.errors
import nats.js.errors
import structlog
import tenacity
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import api

from gpuledger import events
from gpuledger.events.subjects import ALL, STREAM
from gpuledger.services.runtime.readers import MAX_CONSUMERS, ReaderSlots, rename_on_reset

MSG_ID = "Nats-Msg-Id"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
YIELD_EVERY = 256
"""A `Follower` returns control to the event loop at least once per this many deliveries."""
WRONG_LAST_SEQUENCE_CODES = (10071, 10164)
"""JetStream API error codes for a failed expected-last-(subject-)sequence check."""


def connect_backoff() -> tenacity.wait.wait_base:
    """Wait between connection attempts: random in [0.25 s, min(5 s, 0.5 s * 2^(n-1))]
    ("full jitter" with a floor), so hosts that lost the same server do not retry in step."""
    return tenacity.wait_random_exponential(multiplier=0.5, min=0.25, max=5.0)


def backoff_delay(wait: tenacity.wait.wait_base, attempt: int) -> float:
    """The delay `wait` gives before attempt number `attempt` (1-based) of a retry loop."""
    state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]  # a bare call state: no retrying object
    state.attempt_number = attempt
    return wait(state)


def _retrying(
    event_type: str, retried: tuple[type[BaseException], ...], within_s: float
) -> tenacity.AsyncRetrying:
    """Attempts of one publish: the errors in `retried` are retried with `connect_backoff`
    for up to `within_s` (one warning line per retry), then the last error is raised."""
    log = structlog.get_logger("gpuledger.bus")

    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.warning(
            "bus.publish_retry",
            event_type=event_type,
            error=repr(state.outcome.exception())[:200],  # type: ignore[union-attr]  # outcome is set once an attempt failed
            attempt=state.attempt_number,
            retry_in_s=round(state.upcoming_sleep, 2),
        )

    return tenacity.AsyncRetrying(
        wait=connect_backoff(),
        stop=tenacity.stop_before_delay(within_s),
        retry=tenacity.retry_if_exception_type(retried),
        before_sleep=before_sleep,
        reraise=True,
    )


ELECTION_S = 15.0
"""How long a create waits while the stream does not answer (no responders): a replicated
stream elects a leader within a few seconds of `up` starting or of a NATS node dying."""

PING_INTERVAL_S = 5
MAX_OUTSTANDING_PINGS = 3
"""A client pings its server every `PING_INTERVAL_S` and drops a server that has not answered
more than `MAX_OUTSTANDING_PINGS` of them, reconnecting elsewhere (`ServerRotation`): a
paused, hung or partitioned NATS node holds its clients for 15-20 s, not the several minutes
of nats-py's defaults (every 120 s, 2 unanswered). A client whose own loop is blocked sends no
pings meanwhile, so a slow client is not mistaken for a dead server. `nats_options` can set
`ping_interval` / `max_outstanding_pings` otherwise."""


class ServerRotation:
    """nats-py's `reconnect_to_server_handler`: which server each reconnect attempt tries, and
    after what wait.

    After losing its server a client tries every other server of its pool once, at once (a
    cluster's live nodes, in the order nats-py shuffled the pool into, so clients spread over
    them), and the lost one last; only between full passes over the pool does it wait
    (`connect_backoff`, by pass number). Left to nats-py, a handler that names no server gets
    the pool's first one on every attempt: the dead server whenever the shuffle put it first,
    retried alone until it came back. A single server is retried with the backoff from the
    first attempt."""

    def __init__(self, wait: tenacity.wait.wait_base | None = None) -> None:
        self.wait = wait or connect_backoff()
        self.tries: dict[str, int] = {}
        """Attempts per server (netloc) since the last connection; the lost server counts one."""

    def connected(self, netloc: str | None) -> None:
        """The client is connected to `netloc`: the next outage starts with it as the lost one."""
        self.tries = {netloc: 1} if netloc else {}

    def __call__(self, servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        if not servers:
            return None, 0.0
        chosen = min(
            servers, key=lambda s: self.tries.get(s.uri.netloc, 0)
        )  # first of the least tried
        passes = self.tries.get(chosen.uri.netloc, 0)
        self.tries[chosen.uri.netloc] = passes + 1
        return chosen, 0.0 if passes == 0 else backoff_delay(self.wait, passes)


class AlreadyExists(Exception):
    """`create_once` found a message already under the creation filter (the entity exists);
    `existing` is that stored message (its seq, subject, payload and headers) when it could be
    read, so a caller can tell a retry of the same content from a conflict."""

    def __init__(self, subject: str, description: str = "", existing: Any = None) -> None:
        super().__init__(f"{subject} already exists ({description})" if description else subject)
        self.subject = subject
        self.existing = existing
        found = re.search(r"wrong last sequence: (\d+)", description)
        self.last_seq = int(found.group(1)) if found else None
        """Sequence of the stored creation, from the server's error (when it says)."""


class StreamGap(Exception):
    """The stream lacks messages a complete log has: a reader must not fold past them."""

    def __init__(self, message: str, expected: int = 0, got: int = 0) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


def damage_of(state: api.StreamState, after_seq: int = 0) -> str | None:
    """Why a stream in `state` is not a complete log after `after_seq` (None if it is):
    its first message is not `after_seq + 1` (the head was purged), it has holes (deleted
    messages, or messages a damaged file store lost on restart), or it reports lost data.
    The stream is created with deny_delete/deny_purge and no limits, so none of this
    happens to an intact log."""
    lost = state.lost.msgs if state.lost is not None and state.lost.msgs else []
    if lost:
        return (
            f"the stream lost {len(lost)} message(s) (sequences {lost[0]}..{lost[-1]}); "
            "its file store is damaged"
        )
    if state.last_seq > after_seq and state.messages and state.first_seq > after_seq + 1:
        return (
            f"the stream starts at sequence {state.first_seq}, not {after_seq + 1}: "
            f"{state.first_seq - after_seq - 1} earlier message(s) are gone (purged or "
            "lost) and there is no snapshot to start from"
        )
    if state.messages == 0 and state.last_seq > after_seq:
        return (
            f"the stream holds no messages but its last sequence is {state.last_seq}: "
            f"{state.last_seq - after_seq} message(s) are gone"
        )
    missing = state.num_deleted or 0
    span = state.last_seq - state.first_seq + 1 if state.messages else 0
    if not missing and state.messages and span > state.messages:
        missing = span - state.messages
    if missing:
        return (
            f"{missing} message(s) are missing between sequences {state.first_seq} and "
            f"{state.last_seq} ({state.messages} stored): deleted, or lost by a damaged "
            "file store (a truncated block file)"
        )
    return None


class Record(NamedTuple):
    """One stored message: stream sequence, subject, raw payload bytes, and the stream's
    receive time in epoch ms (0 when unknown)."""

    seq: int
    subject: str
    data: bytes
    received_ms: int = 0


class Delivery(NamedTuple):
    """A message as delivered live; `pending` = messages left in the stream after it;
    `received_ms` = the stream's receive time (epoch ms, 0 when unknown)."""

    seq: int
    subject: str
    data: bytes
    pending: int
    received_ms: int = 0


def ack_position(msg: Msg) -> tuple[int, int, int]:
    """`(stream sequence, messages pending after it, received_ms)` of a delivered JetStream
    message, from one parse of its ack subject (both the v1 and the v2, domain-carrying,
    forms). `received_ms` is the JetStream timestamp in epoch ms, read exactly (nats-py's
    `metadata` builds a float-rounded datetime, and dataclasses, for the same three numbers)."""
    tokens = Msg.Metadata._get_metadata_fields(msg.reply)
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[8]), int(tokens[7]) // 1_000_000
    return (
        int(tokens[Msg.Ack.StreamSeq]),
        int(tokens[Msg.Ack.NumPending]),
        int(tokens[Msg.Ack.Timestamp]) // 1_000_000,
    )


def received_ms(msg: Msg) -> int:
    """The JetStream timestamp of a delivered message in epoch ms (`ack_position`); 0 if
    absent."""
    try:
        return ack_position(msg)[2]
    except (nats.errors.Error, IndexError, ValueError, TypeError):
        return 0


def reread_seed_on_reconnect(nc: NATS, path: str) -> None:
    """Make every (re)connection of `nc` authenticate with the seed in `path` as it is then.

    nats-py re-reads the seed file to sign the server's nonce but sends the public key it read
    when it first connected: after `gpuledger auth rotate` the server (reloaded) drops the
    connection, and every reconnect then failed with `Authorization Violation` for ever (new
    signature, old key). Here the signature callback sets the key it signs with, so a rotated
    service reconnects with its new seed. (Its reply prefix is kept across rotations:
    services/runtime/auth.py `Principal.inbox`.) nats-py sends the key right after calling the
    callback (`Client._connect_command`). A seed file that cannot be read or parsed raises a
    `nats.errors.Error`, which nats-py's reconnect loop reports and retries."""
    import base64

    import nkeys

    def sign(nonce: str) -> bytes:
        try:
            with open(path, "rb") as f:
                seed = bytearray(f.read().strip())
            kp = nkeys.from_seed(seed)
        except Exception as err:  # noqa: BLE001 - one retryable error for nats-py's reconnect loop
            raise nats.errors.Error(
                f"{path}: cannot read the nkey seed ({type(err).__name__})"
            ) from None
        try:
            nc._public_nkey = kp.public_key.decode()  # noqa: SLF001 - see the docstring
            return base64.b64encode(kp.sign(nonce.encode()))
        finally:
            kp.wipe()

    nc._signature_cb = sign  # noqa: SLF001 - nats-py has no public hook for this


class Follower:
    """An ordered push consumer over `gl.>` starting after a sequence.

    `next(timeout)` returns the next Delivery, or None when nothing arrived in `timeout`
    seconds (None = wait forever). Deliveries are strictly increasing in `seq`.

    The subscription's callback puts each message in this follower's queue; `next` takes a
    queued message without suspending and waits (with a timer) only when the queue is empty.
    nats-py's own `next_msg` starts two tasks and a timer for every message. At most
    `BUFFERED` messages wait here; past that the callback waits and the client's pending
    queue holds the rest. nats-py answers JetStream's flow control for a callback
    subscription as soon as a message arrives, so what bounds that backlog is the event
    loop: the client reads the socket only when the loop gets a turn, which a follower gives
    when its queue is empty or every `YIELD_EVERY` messages (with a reader slower than the
    stream, the client held a few hundred messages, against thousands with `next_msg`;
    tests/runtime/test_bus.py reads a backlog far larger than the queue).
    """

    BUFFERED = 4096

    def __init__(self, bus: Bus, after_seq: int) -> None:
        self._bus = bus
        self._sub: nats.js.JetStreamContext.PushSubscription | None = None
        self._queue: asyncio.Queue[Msg] = asyncio.Queue(self.BUFFERED)
        self.last_seq = after_seq
        self.gaps_repaired = 0
        self._since_yield = 0

    async def _subscribe(self) -> None:
        self._queue = asyncio.Queue(self.BUFFERED)  # nothing of an earlier subscription
        self._sub = await self._bus._ordered_subscription(self.last_seq, self._queue.put)

    @property
    def buffered(self) -> int:
        """Messages already received by the client but not yet returned by `next`."""
        client = 0 if self._sub is None else self._sub._pending_queue.qsize()
        return self._queue.qsize() + client

    async def _take(self, timeout: float | None) -> Msg | None:
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            pass
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the message when it
        # arrives in the same loop turn as a cancellation, losing the cancellation (a task
        # stopped by cancelling it reads on); cancelled here, the message stays queued
        try:
            async with asyncio.timeout(timeout):
                return await self._queue.get()
        except TimeoutError:
            return None

    async def next(self, timeout: float | None = None) -> Delivery | None:
        assert self._sub is not None, "Follower not started"
        while True:
            msg = await self._take(timeout)
            if msg is None:
                return None
            seq, pending, received = ack_position(msg)
            if seq <= self.last_seq:
                continue  # redelivery after an ordered-consumer reset: already seen
            if seq > self.last_seq + 1 and self._sub is not None:
                # A client that dropped messages (slow consumer) starts again after the last
                # one; a hole the stream itself has (nothing stored at last+1) is refused.
                if not await self._bus.has_message(self.last_seq + 1):
                    raise StreamGap(
                        f"stream sequence {self.last_seq + 1} is missing (next stored is "
                        f"{seq}): {seq - self.last_seq - 1} message(s) deleted or lost",
                        self.last_seq + 1,
                        seq,
                    )
                self.gaps_repaired += 1
                await self.close()
                await self._subscribe()
                continue
            self.last_seq = seq
            self._since_yield += 1
            if self._since_yield >= YIELD_EVERY:
                # Queued messages are returned without suspending: give the event loop a
                # turn now and then, so a long fold still notices a stop or a timer.
                self._since_yield = 0
                await asyncio.sleep(0)
            return Delivery(seq, msg.subject, msg.data, pending, received)

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is None:
            return
        try:
            await sub.unsubscribe()
        except (nats.errors.Error, nats.js.errors.Error):
            pass


class Bus:
    """Connection to NATS plus the stream operations every shell needs."""

    def __init__(
        self,
        nc: NATS,
        *,
        stream: str = STREAM,
        timeout_s: float = 5.0,
        idle_heartbeat_s: float = 1.0,
    ) -> None:
        self.nc = nc
        self.timeout_s = timeout_s
        self.js = nc.jetstream(timeout=timeout_s)
        self.stream = stream
        self.idle_heartbeat_s = idle_heartbeat_s
        self.denied: list[str] = []
        """The server's permission violations on this connection (newest last): a denied
        publish or request only times out on the client, this says why."""
        self.denied_listeners: list[Callable[[str], None]] = []
        self._slots = ReaderSlots.of(nc)
        """The consumer names this identity may create (services/runtime/readers.py)."""
        self._refused: list[str] = []
        """Called with each permission violation as the server reports it (asynchronously,
        milliseconds after the denied publish): a one-shot command stops waiting at once
        instead of timing out (services/cli/connect.py `run_on_bus`)."""

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        name: str = "gpuledger",
        stream: str = STREAM,
        timeout_s: float = 5.0,
        idle_heartbeat_s: float = 1.0,
        connect_attempts: int | None = None,
        quiet: bool = False,
        **nats_options: Any,
    ) -> Bus:
        """Connect, retrying with jittered exponential backoff (`connect_backoff`), and keep
        reconnecting for ever once connected (a restarted server is picked up again).

        `connect_attempts=None` retries the first connection until it succeeds or the
        caller cancels (services); a number gives up after that many attempts with the last
        error (one-shot commands). Every attempt is logged as one line (`bus.connect_failed`,
        `bus.reconnect_failed`), never a traceback; nats-py's callbacks (errors, disconnects,
        reconnects) are logged through structlog too. `quiet=True` logs nothing (commands
        report the final error themselves).

        `url` may list several servers separated by commas (a cluster). `nats_options` go
        to `nats.connect` unchanged: `user_credentials="x.creds"`, `tls=ssl_context`,
        `token=...`, `user=...`/`password=...`.
        """
        servers = [u.strip() for u in url.split(",") if u.strip()]
        log = structlog.get_logger("gpuledger.bus").bind(client=name)
        wait = connect_backoff()
        last_error: list[BaseException] = []
        connected = asyncio.Event()
        holder: list[NATS] = []
        denied: list[str] = []
        denied_listeners: list[Callable[[str], None]] = []

        refused: list[str] = []  # the authorization failure the connection is stuck on

        async def error_cb(err: Exception) -> None:
            last_error[:] = [err]
            if isinstance(err, nats.errors.AuthorizationError) or (
                "authorization violation" in str(err).lower()
            ):
                refused[:] = ["Authorization Violation (key refused: rotated or removed?)"]
            if "permissions violation" in str(err).lower():
                denied.append(str(err).removeprefix("nats: ").strip().strip("'")[:300])
                for listener in list(denied_listeners):
                    listener(denied[-1])
            if quiet or not connected.is_set():
                return  # first connection: reported once per attempt by `before_sleep`
            nc = holder[0] if holder else None
            if nc is not None and nc.is_reconnecting:
                server = nc._current_server  # noqa: SLF001 - the server just tried
                log.warning(
                    "bus.reconnect_failed",
                    error=repr(err),
                    server=None if server is None else server.uri.netloc,
                    attempt=None if server is None else server.reconnects + 1,
                )
            else:
                log.warning("bus.nats_error", error=repr(err))

        async def disconnected_cb() -> None:
            if quiet or not connected.is_set() or not holder or holder[0].is_closed:
                return  # not connected yet, or our own close(): nothing to report
            log.warning("bus.disconnected")

        rotation = ServerRotation(wait)

        async def reconnected_cb() -> None:
            if not holder:
                return
            server = holder[0].connected_url.netloc if holder[0].connected_url else None
            rotation.connected(server)
            refused.clear()
            if not quiet:
                log.info("bus.reconnected", server=server)

        options: dict[str, Any] = {
            "name": name,
            "connect_timeout": 5,
            "ping_interval": PING_INTERVAL_S,
            "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
            "error_cb": error_cb,
            "disconnected_cb": disconnected_cb,
            "reconnected_cb": reconnected_cb,
            "reconnect_to_server_handler": rotation,
        }
        options.update(nats_options)
        max_reconnects = options.pop("max_reconnect_attempts", -1)
        options.pop("reconnect_time_wait", None)  # paced by `rotation` instead

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if not quiet:
                err = last_error[0] if last_error else state.outcome.exception()
                log.warning(
                    "bus.connect_failed",
                    servers=servers,
                    attempt=state.attempt_number,
                    error=repr(err),
                    retry_in_s=round(state.upcoming_sleep, 2),
                )

        retrying = tenacity.AsyncRetrying(
            wait=wait,
            stop=tenacity.stop_never
            if connect_attempts is None
            else tenacity.stop_after_attempt(connect_attempts),
            retry=tenacity.retry_if_exception_type((nats.errors.Error, OSError, TimeoutError)),
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                last_error.clear()
                try:
                    # One pass over the servers (nats-py tries each twice back to back,
                    # its minimum); the backoff between passes is ours.
                    nc = await nats.connect(
                        servers, max_reconnect_attempts=1, reconnect_time_wait=0, **options
                    )
                except nats.errors.NoServersError:
                    if last_error and isinstance(last_error[0], Exception):
                        raise last_error[0] from None  # the real cause, not "no servers"
                    raise
        # Connected: from now on nats-py reconnects by itself (`rotation` picks and paces).
        nc.options["max_reconnect_attempts"] = max_reconnects
        if options.get("nkeys_seed"):
            reread_seed_on_reconnect(nc, str(options["nkeys_seed"]))
        rotation.connected(nc.connected_url.netloc if nc.connected_url else None)
        holder.append(nc)
        connected.set()
        if not quiet:
            log.info("bus.connected", server=nc.connected_url.netloc if nc.connected_url else None)
        bus = cls(nc, stream=stream, timeout_s=timeout_s, idle_heartbeat_s=idle_heartbeat_s)
        bus.denied = denied
        bus.denied_listeners = denied_listeners

        bus._refused = refused
        return bus

    @property
    def auth_failure(self) -> str | None:
        """Why the server refuses this connection's reconnects (its key was rotated or removed
        and the seed file does not hold a key it admits), None when it does not: set by an
        `Authorization Violation`, cleared by the next successful reconnect. `gpuledger
        status` shows a service in this state as `unauthorized`. A connected client is admitted
        by definition, so a refusal reported late (the error callback of a failed attempt run
        after the reconnect that succeeded) never outlives the connection."""
        if not self._refused or self.nc.is_connected:
            return None
        return self._refused[0]

    async def close(self, timeout_s: float = 2.0) -> None:
        """Drain (flush what is pending) within `timeout_s`, else just close: a connection to a
        server that is down must not hold up a process that is stopping."""
        if self.nc.is_closed:
            return
        if timeout_s > 0:
            with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                await asyncio.wait_for(self.nc.drain(), timeout_s)
        if not self.nc.is_closed:
            with contextlib.suppress(OSError):  # nats-py flushes into a socket that may be dead
                await self.nc.close()

    # ------------------------------------------------------------------ stream

    async def ensure_stream(
        self, *, duplicate_window_s: float = 120.0, replicas: int | None = None
    ) -> api.StreamInfo:
        """Create or update the stream: file storage, dedup window, no delete/purge, discard new.

        `replicas=None` keeps an existing stream's replica count (1 when creating), so a
        development default never scales a production stream down. There is deliberately
        no age or size limit: the log is the database. The leader-lease bucket
        (services/runtime/lease.py) is created with it: services may only use their own key.
        """
        try:
            existing: api.StreamInfo | None = await self.js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            existing = None
        if replicas is None:
            replicas = (existing.config.num_replicas or 1) if existing else 1
        config = api.StreamConfig(
            name=self.stream,
            subjects=[ALL],
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            discard=api.DiscardPolicy.NEW,
            duplicate_window=duplicate_window_s,
            deny_delete=True,
            deny_purge=True,
            num_replicas=replicas,
            allow_direct=True,
            max_consumers=MAX_CONSUMERS,
        )
        if existing is None:
            info = await self._add_stream(config)
        else:
            info = await self.js.update_stream(config)
        from gpuledger.services.runtime.lease import lease_bucket

        await lease_bucket(self, replicas=replicas)  # the control plane's leader leases
        return info

    async def _add_stream(self, config: api.StreamConfig, within_s: float = 30.0) -> api.StreamInfo:
        """Create the stream. Just after a cluster forms, its meta leader may not yet know
        enough JetStream peers for the replicas asked (`no suitable peers for placement`,
        error 10005, seen on a loaded machine): that answer is retried for `within_s`."""

        def no_peers_yet(exc: BaseException) -> bool:
            return isinstance(exc, nats.js.errors.BadRequestError) and exc.err_code == 10005

        retrying = tenacity.AsyncRetrying(
            wait=tenacity.wait_fixed(0.25),
            stop=tenacity.stop_before_delay(within_s),
            retry=tenacity.retry_if_exception(no_peers_yet),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self.js.add_stream(config)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def stream_info(self) -> api.StreamInfo:
        return await self.js.stream_info(self.stream)

    async def damage(self, after_seq: int = 0) -> str | None:
        """Why the stream is not a complete log after `after_seq`, or None (`damage_of`)."""
        return damage_of((await self.stream_info()).state, after_seq)

    async def has_message(self, seq: int) -> bool:
        """Whether the stream stores a message at `seq`."""
        try:
            await self.js.get_msg(self.stream, seq)
        except nats.js.errors.NotFoundError:
            return False
        return True

    async def last_seq(self) -> int:
        """Sequence of the last message in the stream (0 when empty)."""
        info = await self.js.stream_info(self.stream)
        return info.state.last_seq

    # ------------------------------------------------------------------ publishing

    async def publish(self, event: events.Event) -> int:
        """Publish an event; return its stream seq (the original seq for a duplicate)."""
        headers = {MSG_ID: event.event_id} if event.event_id else None
        ack = await self.js.publish(
            events.subject_for(event), events.encode(event), headers=headers
        )
        return ack.seq

    async def publish_retrying(self, event: events.Event, *, within_s: float = 30.0) -> int:
        """`publish`, retried with the connection back-off (`connect_backoff`) while the stream
        does not answer (no responders: its leader is being elected, a freshly created
        replicated stream is not yet reachable from this server, or a NATS node is away; or a
        time-out), for up to `within_s`; then the last error. Only an event with an id is
        retried (JetStream deduplicates the retry by it); one without is published once."""
        if not event.event_id:
            return await self.publish(event)
        retried = (nats.js.errors.NoStreamResponseError, nats.errors.TimeoutError, TimeoutError)
        async for attempt in _retrying(type(event).__name__, retried, within_s):
            with attempt:
                seq = await self.publish(event)
        return seq

    async def publish_many(self, batch: list[events.Event]) -> list[int | BaseException]:
        """Publish a decision's events back to back (written in order on one connection, so
        the stream keeps their order) and then await every acknowledgement (all within
        `timeout_s`); per event its stream seq (the original for a duplicate) or the error it
        met (`nats.errors.TimeoutError` for an ack that did not come in time)."""
        futures: list[asyncio.Future | BaseException] = []
        for event in batch:
            try:
                headers = {MSG_ID: event.event_id} if event.event_id else None
                futures.append(
                    await self.js.publish_async(
                        events.subject_for(event), events.encode(event), headers=headers
                    )
                )
            except Exception as err:  # noqa: BLE001 - reported per event to the caller
                futures.append(err)
        out: list[int | BaseException] = []
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        for f in futures:
            if isinstance(f, BaseException):
                out.append(f)
                continue
            try:
                # nats-py's ack future never resolves when no ack comes (a store that latched
                # a write error of a full disk answers nothing): bounded like `publish`
                left = max(0.0, deadline - asyncio.get_running_loop().time())
                out.append((await asyncio.wait_for(f, left)).seq)
            except TimeoutError:
                out.append(nats.errors.TimeoutError())
            except Exception as err:  # noqa: BLE001
                out.append(err)
        return out

    async def publish_raw(self, subject: str, data: bytes, *, msg_id: str | None = None) -> int:
        """Publish bytes as they are (clients, tests); returns the stream seq."""
        headers = {MSG_ID: msg_id} if msg_id else None
        ack = await self.js.publish(subject, data, headers=headers)
        return ack.seq

    async def create_once(self, event: events.Event, *, read_existing: bool = True) -> int:
        """`create_once_acked`'s seq."""
        return (await self.create_once_acked(event, read_existing=read_existing))[0]

    async def create_once_acked(
        self, event: events.Event, *, read_existing: bool = True
    ) -> tuple[int, bool]:
        """(seq, duplicate): duplicate is true when JetStream recognised the event id as one
        it stored within its duplicate window (a quick retry of the same create).

        Publish an event only if no message matches its creation filter yet (for a
        submission: its tenant's submit subject of that job id is empty), else raise AlreadyExists
        with the stored creation attached.

        A retry of the same event (same non-empty `event_id` as the stored creation)
        returns the original seq instead of raising, at any distance in time, so a client's
        retried create stays idempotent. `read_existing=False` skips reading the stored
        creation (an identity that may not read the stream): the caller gets AlreadyExists
        with `existing=None` and tells a retry from a conflict another way.
        """
        subject = events.subject_for(event)
        scope = events.subjects.create_filter(event)
        headers = {EXPECTED_LAST_SUBJECT_SEQ: "0"}
        if scope != subject:
            headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = scope
        if event.event_id:
            headers[MSG_ID] = event.event_id
        try:
            # retried only while nothing answers (a leader being elected: nothing was stored);
            # a time-out may have stored it, and the caller's retry is recognised by its id
            async for attempt in _retrying(
                type(event).__name__, (nats.js.errors.NoStreamResponseError,), ELECTION_S
            ):
                with attempt:
                    ack = await self.js.publish(subject, events.encode(event), headers=headers)
        except nats.js.errors.APIError as err:
            if err.err_code not in WRONG_LAST_SEQUENCE_CODES:
                raise
            if not read_existing:
                raise AlreadyExists(subject, err.description or "") from err
            existing = await self.last_message(scope)
            if (
                existing is not None
                and event.event_id
                and (existing.headers or {}).get(MSG_ID) == event.event_id
            ):
                return existing.seq or 0, True  # our own earlier create: an idempotent retry
            raise AlreadyExists(subject, err.description or "", existing) from err
        return ack.seq, bool(ack.duplicate)

    async def last_message(self, subject: str) -> api.RawStreamMsg | None:
        """The last stored message matching `subject` (wildcards allowed), None if none."""
        try:
            return await self._js_manager().get_last_msg(self.stream, subject)
        except nats.js.errors.NotFoundError:
            return None

    def _js_manager(self) -> nats.js.JetStreamManager:
        return self.nc.jsm()

    # ------------------------------------------------------------------ reading

    async def follower(self, after_seq: int = 0) -> Follower:
        """An ordered consumer delivering every message with seq > `after_seq`, live."""
        follower = Follower(self, after_seq)
        await follower._subscribe()
        return follower

    async def consumer_name(self) -> str:
        """A name for a new ephemeral consumer of this connection (`ReaderSlots.take`)."""
        return await self._slots.take(self.js, self.stream)

    async def _ordered_subscription(
        self, after_seq: int, cb: Callable[[Msg], Awaitable[None]]
    ) -> nats.js.JetStreamContext.PushSubscription:
        name = await self.consumer_name()
        if after_seq > 0:
            policy = api.DeliverPolicy.BY_START_SEQUENCE
            config = api.ConsumerConfig(opt_start_seq=after_seq + 1, name=name)
        else:
            policy = api.DeliverPolicy.ALL
            config = api.ConsumerConfig(name=name)
        sub = await self.js.subscribe(
            ALL,
            stream=self.stream,
            ordered_consumer=True,
            deliver_policy=policy,
            config=config,
            idle_heartbeat=self.idle_heartbeat_s,
            cb=cb,
        )
        rename_on_reset(sub, self.consumer_name)
        return sub

    async def read_all(self, after_seq: int = 0) -> AsyncIterator[Record]:
        """Every message with seq > `after_seq` up to the stream's last seq at call time."""
        target = await self.last_seq()
        if target <= after_seq:
            return
        follower = await self.follower(after_seq)
        try:
            while True:
                d = await follower.next(timeout=self.timeout_s)
                if d is None:
                    raise TimeoutError(f"stream stalled at seq {follower.last_seq} < {target}")
                if d.seq > target:
                    return
                yield Record(d.seq, d.subject, d.data, d.received_ms)
                if d.seq >= target:
                    return
        finally:
            await follower.close()

    async def follow(self, after_seq: int = 0) -> AsyncIterator[Record]:
        """Every message with seq > `after_seq`, then live ones, forever (until cancelled)."""
        follower = await self.follower(after_seq)
        try:
            while True:
                d = await follower.next(timeout=None)
                if d is not None:
                    yield Record(d.seq, d.subject, d.data, d.received_ms)
        finally:
            await follower.close()

    # ------------------------------------------------------------------ durable consumers

    async def durable(
        self,
        name: str,
        *,
        filter_subject: str = ALL,
        after_seq: int = 0,
        ack_wait_s: float = 30.0,
        max_ack_pending: int = 10_000,
    ) -> nats.js.JetStreamContext.PullSubscription:
        """A durable pull consumer with explicit acks (created once, then re-bound by name).

        The start position (`after_seq`) only applies when the consumer is first created.
        """
        if after_seq > 0:
            config = api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=after_seq + 1,
            )
        else:
            config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL)
        config.ack_policy = api.AckPolicy.EXPLICIT
        config.ack_wait = ack_wait_s
        config.max_ack_pending = max_ack_pending
        return await self.js.pull_subscribe(
            filter_subject, durable=name, stream=self.stream, config=config
        )
