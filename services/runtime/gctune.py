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
