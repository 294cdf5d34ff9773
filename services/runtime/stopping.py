"""Stopping a long-running process on SIGTERM / SIGINT, whatever it is doing.

`run_until_signalled(main)` runs `main(stop)` in a fresh event loop. The first SIGTERM or
SIGINT sets `stop` (a graceful stop: the service finishes what it is doing, releases its
lease, closes its connection); if `main` has not returned `grace_s` later, or a second signal
arrives, `main` is cancelled. The process then exits with status 0: a requested stop is
not a failure (compose, systemd and `gpuledger up` all send SIGTERM to stop a service).

Invariant: the signal handlers are installed before `main` starts, so there is no moment
(connecting to a NATS server that is down, folding a long log, deciding) in which a signal
is ignored or turns into a `KeyboardInterrupt` traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
T = TypeVar("T")


async def unless_stopped(aw: Awaitable[T], stop: asyncio.Event | None) -> T | None:
    """Await `aw`, or cancel it and return None as soon as `stop` is set (connecting to a
    server that is down can take for ever; a stop request must not wait for it)."""
    if stop is None:
        return await aw
    task = asyncio.ensure_future(aw)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return None
    return task.result()


def run_until_signalled(
    main: Callable[[asyncio.Event], Awaitable[None]], *, grace_s: float = 5.0, name: str = ""
) -> None:
    """Run `main(stop)` until it returns; SIGTERM/SIGINT set `stop`, then cancel after
    `grace_s` (or at a second signal)."""
    asyncio.run(_supervise(main, grace_s, name))


async def _supervise(
    main: Callable[[asyncio.Event], Awaitable[None]], grace_s: float, name: str
) -> None:
    log = structlog.get_logger("gpuledger.process").bind(process=name) if name else \
        structlog.get_logger("gpuledger.process")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    task: asyncio.Task[None] = asyncio.ensure_future(main(stop))

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("process.stop_now", signal=sig.name)
            task.cancel()
            return
        log.info("process.stopping", signal=sig.name, grace_s=grace_s)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
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
