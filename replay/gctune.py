"""Keeping Python's cyclic garbage collector out of long in-process runs."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fewer_gc_passes(young: int = 50_000) -> Iterator[None]:
    """Run with the cyclic garbage collector out of the way: objects alive at the start
    (inputs, configuration, modules) are frozen out of its passes, and young-generation
    passes run every ``young`` allocations instead of 700. Long replays and benchmarks
    allocate many short-lived tuples and events; with the default settings the collector
    kept rescanning the growing state. Restored on exit. Nothing decided depends on when
    the collector runs."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(young, threshold[0]), threshold[1], threshold[2])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
