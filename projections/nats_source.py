"""Live projection from NATS JetStream: the `projector` durable pull consumer.

The only module of `projections` that talks to NATS. Fetched messages are folded and
committed (rows + last sequence in one DuckDB transaction), and only then acknowledged (AckAll
on the last committed message). Under a backlog, commits group `commit_events` (20k) events
and run in the background while the next fetches are folded; a short fetch (caught up), an
idle timeout or `max_commit_delay_s` commits at once. A crash between commit and ack redelivers messages the database
already holds; they are skipped by sequence. On start the consumer is (re)positioned from
the database's last sequence, so the database, not the consumer, decides where to resume.

Readers: DuckDB lets one process write a file, or any number open it read-only, never both.
The projector closes the file when idle, and when caught up after holding it `hold_s`
it closes it for a `read_window_s` pause, so `gpuledger jobs/why/sql` get in under load.
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
) -> int:
    """Project the stream into `db_path` until `stop` is set (or, with `follow=False`, until
    the stream is drained). Returns the last committed sequence (0 when stopped before NATS
    could be reached). `status` (if given) is kept up to date. A reader holding the file
    delays commits (retried with backoff), never ends the projector. `connect_options` go to
    `Bus.connect` (a one-shot command passes `connect_attempts`).

    On a hole in the log (see the module doc) it commits everything before it, logs one
    error line and calls `on_gap(reason)` (status, health); then, with `stop`, it waits for
    `stop`, else it raises SequenceGap."""
    status = status if status is not None else ProjectorStatus()
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
        # Group commit: a batch is committed when `commit_events` are folded (in the background,
        # while the next fetches are folded), when a fetch comes back short (caught up), or when
        # folded events have waited `max_commit_delay_s`. Messages are acknowledged (AckAll) only
        # up to what is committed.
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
        opened = time.monotonic()  # when the database file was (re)opened

        async def commit() -> int:
            nonlocal opened
            if pj.store is None:
                opened = time.monotonic()
            seq = await _retry_busy(pj.commit, db_path, status, stop)
            status.committed_seq = seq
            return seq

        try:
            status.committed_seq = pj.last_seq
            js = nc.jetstream()

            async def refuse(gap: SequenceGap) -> None:
                log.error("projector refusing to fold past a hole in the log: %s", gap)
                status.state, status.detail, status.ready = "refusing", str(gap), True
                if on_gap is not None:
                    on_gap(str(gap))
                if stop is None:
                    raise gap
                await stop.wait()

            sub = await unless_stopped(_bind_consumer(js, stream, durable, pj.last_seq), stop)
            if sub is None:
                return pj.last_seq  # stopped while NATS (or the stream) was unavailable
            damage = damage_of((await js.stream_info(stream)).state, pj.last_seq)
            if damage is not None:
                await refuse(SequenceGap(pj.last_seq + 1, 0, damage))
                return pj.last_seq
            status.state, status.ready = "running", True
            unacked: deque = deque()  # last message of each fetch not acknowledged yet
            oldest: float | None = None  # when the oldest uncommitted fetch was folded

            async def ack(committed: int) -> None:
                last = None
                while unacked and unacked[0].metadata.sequence.stream <= committed:
                    last = unacked.popleft()
                if last is None:
                    return
                if on_commit is not None:
                    on_commit(committed)
                if before_ack is not None:
                    before_ack(committed)
                await last.ack()  # AckAll: everything up to it

            while stop is None or not stop.is_set():
                try:
                    msgs = await sub.fetch(fetch_batch, timeout=fetch_timeout)
                except (TimeoutError, NatsTimeout):
                    await ack(await commit())
                    oldest = None
                    if release_when_idle:
                        pj.release()  # let `gpuledger sql` open the file while we wait
                    if not follow:
                        break
                    # everything folded is committed here; `pj` may have released the file
                    # (touching it would reopen it under a reader's lock): use the status
                    committed = status.committed_seq
                    if await _consumer_went_astray(js, stream, durable, committed):
                        # the stream moved, nothing came: recreate the consumer from the
                        # database's checkpoint and bind again
                        with contextlib.suppress(nats.errors.Error):
                            await sub.unsubscribe()
                        sub = await unless_stopped(
                            _bind_consumer(js, stream, durable, committed), stop
                        )
                        if sub is None:
                            break
                        unacked.clear()
                    continue
                except (
                    ServiceUnavailableError,
                    nats.errors.NoRespondersError,
                    nats.errors.ConnectionReconnectingError,
                ) as exc:
                    # A NATS node went away (the consumer's leader is being elected, or the
                    # client is reconnecting): keep what is folded, fetch again shortly.
                    # Unacknowledged messages are acknowledged with the next fetch's.
                    slog.warning("projector.fetch_unavailable", error=repr(exc))
                    await commit()
                    oldest = None
                    await asyncio.sleep(fetch_unavailable_wait_s)
                    continue
                gap: SequenceGap | None = None
                last_msg = None
                for msg in msgs:
                    try:
                        pj.apply_raw(
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
                    unacked.append(last_msg)
                    md = last_msg.metadata
                    status.stream_seq = max(
                        status.stream_seq, md.sequence.stream + (md.num_pending or 0)
                    )
                now = time.monotonic()
                oldest = now if oldest is None else oldest
                caught_up = len(msgs) < fetch_batch
                if gap is not None or caught_up or now - oldest >= max_commit_delay_s:
                    committed = await commit()  # everything folded so far, waited for
                    oldest = None
                else:
                    committed = pj.committed()  # what background commits have completed
                await ack(committed)
                if (
                    release_when_idle
                    and caught_up
                    and gap is None
                    and pj.store is not None
                    and time.monotonic() - opened >= hold_s
                ):
                    pj.release()  # a read window under steady traffic
                    await asyncio.sleep(read_window_s)
                if gap is not None:
                    await refuse(gap)
                    break
            await ack(await commit())
            return status.committed_seq
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
            pj.close()
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
