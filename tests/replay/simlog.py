"""Given/then helpers over a simulated run: the events its log holds, and the projection a
user would query after it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def logged(sim, cls, **match):
    """The events of type `cls` in the simulated log, in log order, whose fields equal `match`."""
    return [
        e
        for _, _, e in sim.log
        if isinstance(e, cls) and all(getattr(e, k) == v for k, v in match.items())
    ]


@contextmanager
def rebuilt(log, path: Path, **options) -> Iterator:
    """`log` (seq, subject, event entries) projected into a DuckDB file at `path` (`options`:
    rebuild's), opened read-only and closed on leaving the block."""
    from gpuledger.projections.store import connect_readonly, rebuild

    rebuild(log, path, **options)
    con = connect_readonly(path)
    try:
        yield con
    finally:
        con.close()


def projected(sim, path: Path):
    """The simulated log, `rebuilt` at `path`."""
    return rebuilt(sim.log, path)
