"""The suite's one way to wait for something: poll a check until it holds.

`eventually(check)` calls `check()` until it returns a truthy value (which it returns) or the
time bound passes (then it fails with `what` and the last value or error). `eventually_async`
does the same in a coroutine, and awaits what `check()` returns when that is awaitable.

Bounds are generous on purpose: a passing test waits only as long as its condition takes, so
a large bound costs nothing, and a busy machine (other work on both cores) must not turn a
slow step into a failure. `GPULEDGER_TEST_WAIT_SCALE` (default 3) multiplies every bound.
No test asserts how long something took: speeds are `gpuledger bench` figures.

To check that something did *not* happen, do not sleep and look: make something happen after
it (publish a later event, or wait for a later decision) and wait until that has been folded;
anything earlier has been folded by then too.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

SCALE = float(os.environ.get("GPULEDGER_TEST_WAIT_SCALE", "3"))
DEFAULT_TIMEOUT_S = 30.0


class NotReached(AssertionError):
    """The condition did not hold within the bound."""


def _bound(timeout_s: float) -> float:
    return time.monotonic() + timeout_s * SCALE


def _fail(what: str, timeout_s: float, last: Any) -> NotReached:
    return NotReached(
        f"timed out after {timeout_s * SCALE:.0f}s waiting for {what or 'the condition'}"
        f" (last: {last!r})"
    )


def eventually(
    check: Callable[[], Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "",
    *,
    interval_s: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll `check()` until it returns a truthy value; return it. An AssertionError raised by
    the check, or an exception of the `ignoring` types, counts as "not yet"."""
    deadline, last = _bound(timeout_s), None
    while True:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, *ignoring) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise _fail(what, timeout_s, last)
        time.sleep(interval_s)


async def eventually_async(
    check: Callable[[], Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "",
    *,
    interval_s: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """`eventually` in a coroutine: `check()` may return an awaitable, which is awaited."""
    deadline, last = _bound(timeout_s), None
    while True:
        try:
            last = check()
            if inspect.isawaitable(last):
                last = await last
            if last:
                return last
        except (AssertionError, *ignoring) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise _fail(what, timeout_s, last)
        await asyncio.sleep(interval_s)
