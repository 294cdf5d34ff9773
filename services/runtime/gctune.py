"""Keeping Python's cyclic garbage collector out of long runs (replays, benchmarks, the
projector, service processes)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fewer_gc_passes(threshold0: int = 50_000) -> Iterator[None]:
    """Run young-generation collections every ``threshold0`` allocations instead of 700.

    Replays and benchmarks allocate many short-lived tuples and events; with the default
    threshold the collector ran every few events and its older generations, which walk the
    whole growing state, took about a fifth of a long replay. Raises the threshold (never
    lowers it) and restores it on exit; nothing decided depends on when the collector runs.
    Freezing start-up objects as well measured no better. The projector folds under it too."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], threshold0), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class LiveGc:
    """The garbage-collector policy of a live service process (host loop).

    With Python's defaults a long-running service with a large folded state pays full
    (generation 2) collections that walk the whole state: 60-230 ms pauses, the tail of
    submit -> placed latency (issue 15). Instead: once the initial fold is done, collect and
    `gc.freeze()` what survived (the state: never collected again), and raise the thresholds
    so young collections are rare and older ones rarer still; while the host is idle (nothing
    delivered, about to sleep) at most every `idle_every_s`, collect and freeze again, so that
    cyclic garbage is still freed but never in the middle of a burst. Nothing decided depends
    on when the collector runs."""

    THRESHOLDS = (50_000, 20, 1_000)

    def __init__(self, idle_every_s: float = 60.0, clock=None) -> None:
        import time

        self.idle_every_s = idle_every_s
        self._clock = clock or time.monotonic
        self._last = self._clock()
        self.collections = 0
        self.frozen = 0

    def after_initial_fold(self) -> None:
        self._collect_and_freeze()
        gc.set_threshold(*self.THRESHOLDS)

    def when_idle(self) -> None:
        if self._clock() - self._last >= self.idle_every_s:
            self._collect_and_freeze()

    def _collect_and_freeze(self) -> None:
        gc.collect()
        gc.freeze()
        self.collections += 1
        self.frozen = gc.get_freeze_count()
        self._last = self._clock()


FREEZE_ABOVE = 100_000
"""Young objects a replay must leave alive for `collector_paused` to freeze them (the openb
replay leaves ~530,000, the example scenarios a few thousand)."""


@contextmanager
def collector_paused(*, freeze_above: int | None = None) -> Iterator[None]:
    """Run without the cyclic garbage collector (reference counting still frees everything
    that is not in a cycle), for a bounded batch job whose work makes no reference cycles:
    a projection rebuild, a replay (tests/replay/test_no_reference_cycles.py keeps deciding
    and folding free of cycles). There the collector only walked the growing state: about a
    tenth of a 1 M rebuild's folding thread (measured: 2.6 s), and found nothing to free
    (`gc.collect()` after a 300 k rebuild: 0 unreachable objects; 1 M peak RSS 659 MB without
    it, 661 MB with it). Restores the collector's previous state on exit.

    Every object made inside stays in the youngest generation until the collector resumes,
    and its first pass then walks all that is still alive: drop inside the block what the
    job leaves as garbage (a rebuild drops its projector: ~1 s after 1 M events).

    `freeze_above`: for a job whose result outlives it (a replay's log and folded state):
    when more than this many objects are alive in the youngest generation at the end, move
    everything alive to the permanent generation (`gc.freeze()`, as a live service does after
    its initial fold) instead of having the collector's first pass walk it (62-95 ms after
    the openb replay, whose run leaves about 530,000; later full collections skip it too).
    What the job made is cycle-free, so reference counting still frees it when dropped. The
    cost, why only large results are frozen: cyclic garbage that was waiting for the
    collector at that moment is never collected (`gc.unfreeze()` hands everything back)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze_above is not None and gc.get_count()[0] > freeze_above:
            gc.freeze()
        if was_enabled:
            gc.enable()
