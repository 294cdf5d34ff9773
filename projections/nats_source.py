"""Live projection from NATS JetStream: the `projector` durable pull consumer.

The only module of `projections` that talks to NATS. Fetched messages are folded and
committed (rows + last sequence in one DuckDB transaction), and only then acknowledged (AckAll
on the last committed message). Under a backlog, commits group `commit_events` (20k) events
and run in the background while the next fetches are folded; a short fetch (caught up), an
idle timeout or `max_commit_delay_s` commits at once. A crash between commit and ack redelivers messages the database
already holds; they are skipped by sequence. On start the consumer is (re)positioned from
the database's last sequence, so the database, not the consumer, decides where to resume.

Readers: DuckDB lets one process write a file, or any number open it read-only, never both.
With `serve_reads` (as `up`, `run projector` and `project --follow` run it) the projector
keeps the file and answers reads itself on a local socket (projections/serving.py), so no
reader opens the file. Without it, the projector closes the file when idle, and when caught
up after holding it `hold_s` it closes it for a `read_window_s` pause, so readers get in.
A reader that holds the file (a notebook's read-only connection) blocks the next commit:
the projector keeps its folded state, stops fetching, logs one `projector.blocked` line per
attempt, retries with backoff and catches up when the reader leaves; it never dies of it.

The projector, like every service, never folds past a hole: a stream that is not a complete
log (first sequence not 1, deleted or lost messages: `services.runtime.bus.damage_of`) or a
sequence gap met while fetching stops it (at the latest at the last sequence before the
hole; a damaged stream found at start is not folded further at all), with one error line. As a service (`stop` given) it then waits to be stopped (a supervisor restarting
it would only meet the same hole again); otherwise it raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import structlog
import tenacity
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import NotFoundError, ServiceUnavailableError

from gpuledger.projections.mappers import SequenceGap
from gpuledger.projections.store import ProjectionBusy, Projector
from gpuledger.services.runtime.bus import Bus, connect_backoff, damage_of, received_ms
from gpuledger.services.runtime.gctune import fewer_gc_passes
from gpuledger.services.runtime.stopping import unless_stopped

log = logging.getLogger("gpuledger.projector")
slog = structlog.get_logger("gpuledger.projector")


@dataclass
class ProjectorStatus:
    """What a running projector reports (for `gpuledger status` and stale-read warnings)."""

    committed_seq: int = 0
    state: str = "starting"
    """starting | running | blocked (a reader holds the file) | refusing (a hole in the log)
    | stopped"""
    detail: str | None = None
    """Why it is blocked: who holds the file, since when, how many attempts."""
    ready: bool = False
    """Set once the database is open and the consumer positioned."""
    stream_seq: int = 0
    """The stream's last sequence as last seen (a fetched message's sequence plus the messages
    pending after it): fold lag = stream_seq - committed_seq (services/runtime/metrics.py)."""
    bus: Any = field(default=None, repr=False, compare=False)
    """Its connection once connected (`Bus.auth_failure`: the server refuses its key)."""

    @property
    def auth_failure(self) -> str | None:
        return getattr(self.bus, "auth_failure", None)


async def _retry_busy(
    what: Callable,
    db_path,
    status: ProjectorStatus,
    stop: asyncio.Event | None,
    backoff_s: tuple[float, float] = (0.1, 5.0),
):
    """Call `what()` until it does not raise ProjectionBusy: one warning line per blocked
    attempt, exponential backoff (capped), interrupted by `stop` (then re-raises)."""
    delay, attempt, since = backoff_s[0], 0, time.monotonic()
    while True:
        try:
            result = what()
        except ProjectionBusy as exc:
            attempt += 1
            status.state = "blocked"
            status.detail = f"{db_path} held by {exc.holder} for {time.monotonic() - since:.0f}s"
            slog.warning(
                "projector.blocked",
                db=str(db_path),
                holder=exc.holder,
                attempt=attempt,
                blocked_s=round(time.monotonic() - since, 1),
                retry_in_s=round(delay, 2),
                committed_seq=status.committed_seq,
            )
            if stop is not None and stop.is_set():
                raise
            if stop is None:
                await asyncio.sleep(delay)
            else:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except TimeoutError:
                    pass
            delay = min(delay * 2, backoff_s[1])
            continue
        if attempt:
            slog.info(
                "projector.unblocked",
                db=str(db_path),
                attempts=attempt,
                blocked_s=round(time.monotonic() - since, 1),
            )
        status.state, status.detail = "running", None
        return result


STREAM = "GPULEDGER"
DURABLE = "projector"


def consumer_problem(info: api.ConsumerInfo, durable: str) -> str | None:
    """None if the consumer `info` describes is the projector's as it creates it (durable,
    pull, every subject, AckAll), else what differs: someone else created, replaced or updated
    it (issue 30: a reader re-created it with a `gl.dead.>` filter and the projection froze)."""
    cfg = info.config
    problems = []
    if cfg.durable_name != durable:
        problems.append(f"durable_name={cfg.durable_name!r}")
    if cfg.filter_subject not in (None, "", ">", "gl.>") or cfg.filter_subjects:
        problems.append(f"filter={cfg.filter_subjects or cfg.filter_subject!r}")
    if cfg.ack_policy != api.AckPolicy.ALL:
        problems.append(f"ack_policy={cfg.ack_policy}")
    if cfg.deliver_subject:
        problems.append("a push consumer")
    return ", ".join(problems) or None


async def _position_consumer(js, stream: str, durable: str, last_seq: int) -> None:
    """Make the durable consumer deliver from `last_seq + 1` (recreating it from the
    database's checkpoint if it is not the projector's as created: `consumer_problem`)."""
    try:
        info = await js.consumer_info(stream, durable)
    except NotFoundError:
        info = None
    problem = None if info is None else consumer_problem(info, durable)
    if info is not None and problem is not None:
        slog.warning(
            "projector.consumer_replaced",
            consumer=durable,
            differs=problem,
            action=f"recreating it from the database's last sequence {last_seq}",
        )
        await js.delete_consumer(stream, durable)
        info = None
    if info is not None:
        delivered = info.delivered.stream_seq if info.delivered else 0
        acked = info.ack_floor.stream_seq if info.ack_floor else 0
        if delivered == acked == last_seq:
            return  # exactly where the database stopped, nothing in flight
        # Otherwise (messages delivered but unacked by a crashed run, or a consumer ahead of
        # a rebuilt database) start over at the database's position: waiting for ack_wait
        # redeliveries would only delay, and skipping would lose events.
        log.info(
            "repositioning consumer %s: delivered=%s acked=%s db=%s",
            durable,
            delivered,
            acked,
            last_seq,
        )
        await js.delete_consumer(stream, durable)
    cfg = api.ConsumerConfig(
        durable_name=durable,
        ack_policy=api.AckPolicy.ALL,
        ack_wait=60,
        max_ack_pending=100_000,
        deliver_policy=api.DeliverPolicy.ALL
        if last_seq == 0
        else api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=None if last_seq == 0 else last_seq + 1,
    )
    await js.add_consumer(stream, cfg)


async def _consumer_went_astray(js, stream: str, durable: str, last_seq: int) -> bool:
    """After a fetch that returned nothing: whether the stream holds messages beyond
    `last_seq` while the durable consumer is missing or not the projector's
    (`consumer_problem`; one warning line says what differs). False when NATS does not
    answer (the next fetch retries)."""
    try:
        state = (await js.stream_info(stream)).state
        if state.last_seq <= last_seq:
            return False
        try:
            info = await js.consumer_info(stream, durable)
        except NotFoundError:
            slog.warning("projector.consumer_replaced", consumer=durable, differs="missing")
            return True
    except (nats.errors.Error, TimeoutError, OSError):
        return False
    problem = consumer_problem(info, durable)
    if problem is None:
        return False
    slog.warning(
        "projector.consumer_replaced",
        consumer=durable,
        differs=problem,
        stream_last_seq=state.last_seq,
        folded_seq=last_seq,
    )
    return True


async def _bind_consumer(js, stream: str, durable: str, last_seq: int):
    """Position and bind the durable consumer, retrying with backoff (one log line per
    attempt) while the server is unreachable or the stream does not exist yet."""

    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.warning(
            "projector: consumer not ready (attempt %d: %r); retrying in %.2fs",
            state.attempt_number,
            state.outcome.exception(),
            state.upcoming_sleep,
        )

    async for attempt in tenacity.AsyncRetrying(
        wait=connect_backoff(),
        retry=tenacity.retry_if_exception_type((nats.errors.Error, TimeoutError, OSError)),
        before_sleep=before_sleep,
    ):
        with attempt:
            await _position_consumer(js, stream, durable, last_seq)
            return await js.pull_subscribe_bind(durable, stream)
    raise AssertionError("unreachable: tenacity retries for ever")


@dataclass
class _Options:
    """run_projector's tuning and hooks (see its docstring)."""

    stream: str
    durable: str
    fetch_batch: int
    fetch_timeout: float
    commit_events: int
    max_commit_delay_s: float
    follow: bool
    release_when_idle: bool
    on_commit: Callable[[int], None] | None
    before_ack: Callable[[int], None] | None
    hold_s: float
    read_window_s: float
    on_gap: Callable[[str], None] | None
    fetch_unavailable_wait_s: float


class _Run:
    """One run of the projector once NATS is connected and the database open: the fetch,
    fold, commit and acknowledge loop, in named steps. Messages are acknowledged (AckAll)
    only up to what is committed."""

    def __init__(self, o: _Options, pj: Projector, db_path, status, stop, js) -> None:
        self.o, self.pj, self.db_path, self.status, self.stop, self.js = (
            o,
            pj,
            db_path,
            status,
            stop,
            js,
        )
        self.opened = time.monotonic()  # when the database file was (re)opened
        self.unacked: deque = deque()  # last message of each fetch not acknowledged yet
        self.oldest: float | None = None  # when the oldest uncommitted fetch was folded
        self.sub: Any = None

    async def commit(self) -> int:
        """Commit everything folded (waiting for it; retried while a reader holds the file)."""
        if self.pj.store is None:
            self.opened = time.monotonic()
        seq = await _retry_busy(self.pj.commit, self.db_path, self.status, self.stop)
        self.status.committed_seq = seq
        self.oldest = None
        return seq

    async def ack(self, committed: int) -> None:
        """Acknowledge every fetched message up to `committed` (AckAll on the last one)."""
        last = None
        while self.unacked and self.unacked[0].metadata.sequence.stream <= committed:
            last = self.unacked.popleft()
        if last is None:
            return
        if self.o.on_commit is not None:
            self.o.on_commit(committed)
        if self.o.before_ack is not None:
            self.o.before_ack(committed)
        await last.ack()  # AckAll: everything up to it

    async def refuse(self, gap: SequenceGap) -> None:
        """A hole in the log: say so once, then wait to be stopped (or raise without `stop`)."""
        log.error("projector refusing to fold past a hole in the log: %s", gap)
        st = self.status
        st.state, st.detail, st.ready = "refusing", str(gap), True
        if self.o.on_gap is not None:
            self.o.on_gap(str(gap))
        if self.stop is None:
            raise gap
        await self.stop.wait()

    async def bind(self, last_seq: int) -> bool:
        """(Re)bind the durable consumer from `last_seq`; False when stopped meanwhile."""
        o = self.o
        self.sub = await unless_stopped(
            _bind_consumer(self.js, o.stream, o.durable, last_seq), self.stop
        )
        return self.sub is not None

    async def idle(self) -> bool:
        """A fetch came back empty: commit, let readers in, and check that the consumer is
        still the projector's. False: end the loop."""
        await self.ack(await self.commit())
        if self.o.release_when_idle:
            self.pj.release()  # let `gpuledger sql` open the file while we wait
        if not self.o.follow:
            return False
        # everything folded is committed here; `pj` may have released the file
        # (touching it would reopen it under a reader's lock): use the status
        committed = self.status.committed_seq
        if await _consumer_went_astray(self.js, self.o.stream, self.o.durable, committed):
            # the stream moved, nothing came: recreate the consumer from the
            # database's checkpoint and bind again
            with contextlib.suppress(nats.errors.Error):
                await self.sub.unsubscribe()
            if not await self.bind(committed):
                return False
            self.unacked.clear()
        return True

    async def unavailable(self, exc: BaseException) -> None:
        """A NATS node went away (the consumer's leader is being elected, or the client is
        reconnecting): keep what is folded, fetch again shortly. Unacknowledged messages
        are acknowledged with the next fetch's."""
        slog.warning("projector.fetch_unavailable", error=repr(exc))
        await self.commit()
        await asyncio.sleep(self.o.fetch_unavailable_wait_s)

    def fold(self, msgs: list) -> SequenceGap | None:
        """Fold fetched messages up to a hole (returned); note the stream's last sequence."""
        gap: SequenceGap | None = None
        last_msg = None
        for msg in msgs:
            try:
                self.pj.apply_raw(
                    msg.metadata.sequence.stream,
                    msg.subject,
                    msg.data,
                    received_ms=received_ms(msg),
                )
            except SequenceGap as exc:
                gap = exc
                break
            last_msg = msg
        if last_msg is not None:
            self.unacked.append(last_msg)
            md = last_msg.metadata
            self.status.stream_seq = max(
                self.status.stream_seq, md.sequence.stream + (md.num_pending or 0)
            )
        return gap

    async def settle(self, caught_up: bool, gap: SequenceGap | None) -> None:
        """After a fold: commit when caught up, at a hole or when the oldest folded fetch has
        waited `max_commit_delay_s` (else acknowledge what background commits completed);
        open a read window when caught up after holding the file `hold_s`."""
        now = time.monotonic()
        self.oldest = now if self.oldest is None else self.oldest
        if gap is not None or caught_up or now - self.oldest >= self.o.max_commit_delay_s:
            committed = await self.commit()  # everything folded so far, waited for
        else:
            committed = self.pj.committed()  # what background commits have completed
        await self.ack(committed)
        if (
            self.o.release_when_idle
            and caught_up
            and gap is None
            and self.pj.store is not None
            and time.monotonic() - self.opened >= self.o.hold_s
        ):
            self.pj.release()  # a read window under steady traffic
            await asyncio.sleep(self.o.read_window_s)

    async def loop(self) -> int:
        """Fetch, fold, commit and acknowledge until stopped (or drained without `follow`)."""
        o, stop = self.o, self.stop
        while stop is None or not stop.is_set():
            try:
                msgs = await self.sub.fetch(o.fetch_batch, timeout=o.fetch_timeout)
            except (TimeoutError, NatsTimeout):
                if not await self.idle():
                    break
                continue
            except (
                ServiceUnavailableError,
                nats.errors.NoRespondersError,
                nats.errors.ConnectionReconnectingError,
            ) as exc:
                await self.unavailable(exc)
                continue
            gap = self.fold(msgs)
            await self.settle(len(msgs) < o.fetch_batch, gap)
            if gap is not None:
                await self.refuse(gap)
                break
        await self.ack(await self.commit())
        return self.status.committed_seq

    async def run(self) -> int:
        """Bind the consumer, refuse a damaged stream, then `loop`."""
        pj, o = self.pj, self.o
        self.status.committed_seq = pj.last_seq
        if not await self.bind(pj.last_seq):
            return pj.last_seq  # stopped while NATS (or the stream) was unavailable
        damage = damage_of((await self.js.stream_info(o.stream)).state, pj.last_seq)
        if damage is not None:
            await self.refuse(SequenceGap(pj.last_seq + 1, 0, damage))
            return pj.last_seq
        self.status.state, self.status.ready = "running", True
        return await self.loop()


def _serve_reads(pj: Projector, db_path):
    """Start serving reads of the projector's database (projections/serving.py)."""
    from gpuledger.projections.serving import ReadServer

    assert pj.store is not None  # just opened
    return ReadServer(pj.store.con, db_path).start()


async def _close_connection(nc, bus: Bus) -> None:
    # drain() waits for the pull subscription's outstanding fetch (up to its timeout);
    # the acks are plain publishes, so flushing them is enough before closing.
    # A server that is down must not hold up a stop: bounded, then closed regardless.
    try:
        await nc.flush(timeout=2)
    except (nats.errors.Error, TimeoutError, OSError) as exc:
        log.warning(
            "projector: acks not flushed on close (%r); they are redelivered "
            "and skipped by sequence on the next start",
            exc,
        )
    finally:
        await bus.close(timeout_s=0)


async def run_projector(
    url: str,
    db_path: str | Path,
    *,
    stream: str = STREAM,
    durable: str = DURABLE,
    fetch_batch: int = 5_000,
    fetch_timeout: float = 1.0,
    commit_events: int = 20_000,
    max_commit_delay_s: float = 0.5,
    follow: bool = True,
    stop: asyncio.Event | None = None,
    release_when_idle: bool = True,
    on_commit: Callable[[int], None] | None = None,
    before_ack: Callable[[int], None] | None = None,
    status: ProjectorStatus | None = None,
    hold_s: float = 2.0,
    read_window_s: float = 0.15,
    on_gap: Callable[[str], None] | None = None,
    connect_options: dict | None = None,
    fetch_unavailable_wait_s: float = 0.5,
    serve_reads: bool = False,
) -> int:
    """Project the stream into `db_path` until `stop` is set (or, with `follow=False`, until
    the stream is drained). Returns the last committed sequence (0 when stopped before NATS
    could be reached). `status` (if given) is kept up to date. A reader holding the file
    delays commits (retried with backoff), never ends the projector. `connect_options` go to
    `Bus.connect` (a one-shot command passes `connect_attempts`).

    With `serve_reads` the projector keeps the file open for good (no read windows) and
    serves reads of it on a local socket (projections/serving.py): readers never open the
    file, so none blocks it.

    Group commit: a batch is committed when `commit_events` are folded (in the background,
    while the next fetches are folded), when a fetch comes back short (caught up), or when
    folded events have waited `max_commit_delay_s`.

    On a hole in the log (see the module doc) it commits everything before it, logs one
    error line and calls `on_gap(reason)` (status, health); then, with `stop`, it waits for
    `stop`, else it raises SequenceGap."""
    status = status if status is not None else ProjectorStatus()
    opts = _Options(
        stream=stream,
        durable=durable,
        fetch_batch=fetch_batch,
        fetch_timeout=fetch_timeout,
        commit_events=commit_events,
        max_commit_delay_s=max_commit_delay_s,
        follow=follow,
        release_when_idle=release_when_idle and not serve_reads,
        on_commit=on_commit,
        before_ack=before_ack,
        hold_s=hold_s,
        read_window_s=read_window_s,
        on_gap=on_gap,
        fetch_unavailable_wait_s=fetch_unavailable_wait_s,
    )
    with fewer_gc_passes():  # the fold allocates a lot
        # Retries with backoff until NATS answers (one log line per attempt); a stop request
        # while NATS is unreachable returns at once, having projected nothing.
        bus = await unless_stopped(
            Bus.connect(url, name="gpuledger-projector", **(connect_options or {})), stop
        )
        if bus is None:
            return 0
        status.bus = bus
        nc = bus.nc
        try:
            pj = await _retry_busy(
                lambda: Projector(db_path, batch_size=commit_events, pipeline=True),
                db_path,
                status,
                stop,
            )
        except BaseException:
            await nc.close()
            raise
        reads = None
        try:
            if serve_reads:
                try:
                    reads = _serve_reads(pj, db_path)
                except OSError as exc:  # no socket here: readers open the file (read windows)
                    slog.warning("projector.reads_not_served", db=str(db_path), error=str(exc))
                    opts.release_when_idle = release_when_idle
            return await _Run(opts, pj, db_path, status, stop, nc.jetstream()).run()
        except ProjectionBusy as exc:
            if stop is None or not stop.is_set():
                raise
            # stopped while a reader holds the file: what is not committed is not acknowledged
            # either, so the next run folds it again
            slog.warning(
                "projector.stopped_blocked", holder=exc.holder, committed_seq=status.committed_seq
            )
            return status.committed_seq
        finally:
            status.state = "stopped"
            if reads is not None:
                reads.close()
            pj.close()
            await _close_connection(nc, bus)
