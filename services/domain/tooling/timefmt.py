"""Times for people (`duration`, `instant`, `iso_utc`): their home is events/timefmt.py, so
the event contract's sentences print instants as the deciders' messages do; re-exported here
for the services."""

from gpuledger.events.timefmt import WALL_CLOCK_FROM_MS, duration, instant, iso_utc

__all__ = ["WALL_CLOCK_FROM_MS", "duration", "instant", "iso_utc"]
