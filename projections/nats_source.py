"""Live projection from NATS JetStream: the `projector` durable pull consumer.

The only module of `projections` that talks to NATS. Fetched messages are folded and
committed (rows + last sequence in one DuckDB transaction), and only then acknowledged (AckAll
on the last committed message). Under a backlog, commits group `commit_events` (20k) events
and run in the background while the next fetches are folded; a short fetch (caught up), an
idle timeout or `max_commit_delay_s` commits at once. A crash between commit and ack redelivers messages the database
already holds; they are skipped by sequence. On start the consumer is (re)positioned from
the database's last sequence, so the database, not the consumer, decides where to resume.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import nats.errors
import tenacity
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import NotFoundError

from projections.mappers import SequenceGap
from projections.store import Projector
from services.runtime.bus import Bus, connect_backoff
from services.runtime.gctune import fewer_gc_passes
from services.runtime.stopping import unless_stopped

log = logging.getLogger("gpuledger.projector")

STREAM = "GPULEDGER"
DURABLE = "projector"


async def _position_consumer(js, stream: str, durable: str, last_seq: int) -> None:
    """Make the durable consumer deliver from `last_seq + 1`."""
    try:
        info = await js.consumer_info(stream, durable)
    except NotFoundError:
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


async def _bind_consumer(js, stream: str, durable: str, last_seq: int):
    """Position and bind the durable consumer, retrying with backoff (one log line per
    attempt) while the server is unreachable or the stream does not exist yet."""

    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.warning("projector: consumer not ready (attempt %d: %r); retrying in %.2fs",
                    state.attempt_number, state.outcome.exception(), state.upcoming_sleep)

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
    connect_options: dict | None = None,
) -> int:
    """Project the stream into `db_path` until `stop` is set (or, with `follow=False`, until
    the stream is drained). Returns the last committed sequence (0 when stopped before NATS
    could be reached). Raises SequenceGap after committing everything before the gap.
    `connect_options` go to `Bus.connect` (a one-shot command passes `connect_attempts`)."""
    with fewer_gc_passes():  # the fold allocates a lot
        # Retries with backoff until NATS answers (one log line per attempt); a stop request
        # while NATS is unreachable returns at once, having projected nothing.
        bus = await unless_stopped(
            Bus.connect(url, name="gpuledger-projector", **(connect_options or {})), stop)
        if bus is None:
            return 0
        nc = bus.nc
        # Group commit: a batch is committed when `commit_events` are folded (in the background,
        # while the next fetches are folded), when a fetch comes back short (caught up), or when
        # folded events have waited `max_commit_delay_s`. Messages are acknowledged (AckAll) only
        # up to what is committed.
        pj = Projector(db_path, batch_size=commit_events, pipeline=True)
        try:
            js = nc.jetstream()
            sub = await unless_stopped(_bind_consumer(js, stream, durable, pj.last_seq), stop)
            if sub is None:
                return pj.last_seq  # stopped while NATS (or the stream) was unavailable
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
                    await ack(pj.commit())
                    oldest = None
                    if release_when_idle:
                        pj.release()  # let `gpuledger sql` open the file while we wait
                    if not follow:
                        break
                    continue
                gap: SequenceGap | None = None
                last_msg = None
                for msg in msgs:
                    try:
                        pj.apply_raw(msg.metadata.sequence.stream, msg.subject, msg.data)
                    except SequenceGap as exc:
                        gap = exc
                        break
                    last_msg = msg
                if last_msg is not None:
                    unacked.append(last_msg)
                now = time.monotonic()
                oldest = now if oldest is None else oldest
                if gap is not None or len(msgs) < fetch_batch or now - oldest >= max_commit_delay_s:
                    committed = pj.commit()  # everything folded so far, waited for
                    oldest = None
                else:
                    committed = pj.committed()  # what background commits have completed
                await ack(committed)
                if gap is not None:
                    log.error("%s", gap)
                    raise gap
            await ack(pj.commit())
            return pj.last_seq
        finally:
            pj.close()
            # drain() waits for the pull subscription's outstanding fetch (up to its timeout);
            # the acks are plain publishes, so flushing them is enough before closing.
            # A server that is down must not hold up a stop: bounded, then closed regardless.
            try:
                await nc.flush(timeout=2)
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                log.warning("projector: acks not flushed on close (%r); they are redelivered "
                            "and skipped by sequence on the next start", exc)
            finally:
                await bus.close(timeout_s=0)
