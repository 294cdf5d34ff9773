"""Stopping a long-running process on SIGTERM / SIGINT, whatever it is doing.

`run_until_signalled(main)` runs `main(stop)` in a fresh event loop. The first SIGTERM or
SIGINT sets `stop` (a graceful stop: the service finishes what it is doing, releases its
lease, closes its connection); if `main` has not returned `grace_s` (3 s) later, or a second
signal arrives, `main` is cancelled; if the process is still there `force_after_s` (4.5 s)
after the first signal (the event loop stuck in a long synchronous step), a watchdog thread
logs `process.stop_forced` and ends it, as a supervisor's SIGKILL would (safe: every publish
is idempotent and the state is refolded from the log on restart). The exit status is 0: a
requested stop is not a failure (compose, systemd and `gpuledger up` send SIGTERM to stop).

Invariant: the signal handlers are installed before `main` starts, so there is no moment
(connecting to a NATS server that is down, folding a long log, deciding) in which a signal
is ignored or turns into a `KeyboardInterrupt` traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 3.0
"""After a stop signal: how long `main` may take to finish before it is cancelled."""
FORCE_AFTER_S = 4.5
"""After a stop signal: the process ends (status 0) by then, whatever it is doing."""
T = TypeVar("T")


async def unless_stopped(aw: Awaitable[T], stop: asyncio.Event | None) -> T | None:
    """Await `aw`, or cancel it and return None as soon as `stop` is set (connecting to a
    server that is down can take for ever; a stop request must not wait for it)."""
    if stop is None:
        return await aw
    task = asyncio.ensure_future(aw)
    try:
        await _done_or_stopped(task, stop)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return None
    return task.result()


async def _done_or_stopped(task: asyncio.Future[Any], stop: asyncio.Event) -> None:
    """Wait until `task` is done or `stop` is set, whichever comes first (`task` keeps running)."""
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()


def run_until_signalled(
    main: Callable[[asyncio.Event], Awaitable[None]],
    *,
    grace_s: float = GRACE_S,
    force_after_s: float = FORCE_AFTER_S,
    name: str = "",
) -> None:
    """Run `main(stop)` until it returns; SIGTERM/SIGINT set `stop`, then cancel after
    `grace_s` (or at a second signal), and end the process after `force_after_s` whatever
    it is doing."""
    asyncio.run(_supervise(main, grace_s, force_after_s, name))


async def _supervise(
    main: Callable[[asyncio.Event], Awaitable[None]],
    grace_s: float,
    force_after_s: float,
    name: str,
) -> None:
    log = (
        structlog.get_logger("gpuledger.process").bind(process=name)
        if name
        else structlog.get_logger("gpuledger.process")
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    task: asyncio.Task[None] = asyncio.ensure_future(main(stop))
    watchdog: list[threading.Timer] = []

    def on_signal(sig: signal.Signals) -> None:  # in the event loop
        if stop.is_set():
            log.warning("process.stop_now", signal=sig.name)
            task.cancel()
            return
        log.info("process.stopping", signal=sig.name, grace_s=grace_s)
        stop.set()

    def force_exit() -> None:  # in the watchdog thread: the loop did not get there in time
        log.warning("process.stop_forced", after_s=force_after_s)
        os._exit(0)

    def arm_watchdog(_signum: int, _frame: object) -> None:
        # A plain signal handler runs between bytecodes of the main thread, even while the
        # event loop is busy in synchronous code (a long fold step or `decide`): the
        # watchdog bounds how long the loop may take to act on the signal.
        if not watchdog:
            timer = threading.Timer(force_after_s, force_exit)
            timer.daemon = True
            timer.start()
            watchdog.append(timer)

    for sig in STOP_SIGNALS:
        # The loop's handler wakes the loop through its self-pipe (the signal may land on
        # any thread, e.g. an executor's) and runs `on_signal` in the loop; the plain
        # handler installed over it (the wake-up fd stays) arms the watchdog.
        loop.add_signal_handler(sig, on_signal, sig)
        signal.signal(sig, arm_watchdog)
    try:
        await _done_or_stopped(task, stop)
        if not task.done():
            done, _ = await asyncio.wait({task}, timeout=grace_s)
            if not done:
                log.warning("process.stop_timeout", grace_s=grace_s)
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        log.info("process.stopped")
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        for timer in watchdog:
            timer.cancel()
