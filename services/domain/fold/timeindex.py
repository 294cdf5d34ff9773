"""A sorted index of future instants per allocation (expected end, checkpoint, deadline), so
deciders find what is due by bisection instead of scanning every running allocation."""

from __future__ import annotations

from bisect import bisect_right, insort


class TimeIndex:
    """Entries `(time_ms, key, kind)`; at most one entry per (key, kind)."""

    def __init__(self) -> None:
        self._sorted: list[tuple[int, str, str]] = []
        self._by_key: dict[str, dict[str, int]] = {}

    def set(self, key: str, kind: str, time_ms: int) -> None:
        kinds = self._by_key.setdefault(key, {})
        old = kinds.get(kind)
        if old is not None:
            self._remove((old, key, kind))
        kinds[kind] = time_ms
        insort(self._sorted, (time_ms, key, kind))

    def clear(self, key: str) -> None:
        for kind, t in self._by_key.pop(key, {}).items():
            self._remove((t, key, kind))

    def due(self, now_ms: int) -> list[tuple[int, str, str]]:
        """Entries at or before `now_ms`, in time order."""
        return self._sorted[: bisect_right(self._sorted, (now_ms, "\uffff", "\uffff"))]

    def next_after(self, now_ms: int) -> int | None:
        i = bisect_right(self._sorted, (now_ms, "\uffff", "\uffff"))
        return self._sorted[i][0] if i < len(self._sorted) else None

    def times(self, key: str) -> tuple[int, ...]:
        """The instants recorded for one key (any kind), in time order."""
        return tuple(sorted(self._by_key.get(key, {}).values()))

    def _remove(self, entry: tuple[int, str, str]) -> None:
        i = bisect_right(self._sorted, entry) - 1
        if i >= 0 and self._sorted[i] == entry:
            del self._sorted[i]
