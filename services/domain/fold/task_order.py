"""The order in which an array's tasks are released into the queue: the queue's own order
among tasks that wait alike, i.e. its last tie-break, the task id. Natively that is the id as
text (`sweep@10` before `sweep@2`: services/domain/policy/queue.py), under the `slurm` profile
the number (`sweep@2` first: slurm_priority.id_key). All tasks of one array share the id's
head, so the order is that of their indexes as decimal text, or as numbers.

Pure, O(digits) per step, no list of the indexes is ever built: `first(lo, hi, text)` and
`after(i, lo, hi, text)` walk the indexes `lo .. hi` in that order (None past the last).
"""

from __future__ import annotations


def first(lo: int, hi: int, text: bool) -> int | None:
    """The first index of `lo .. hi` in the order (None: an empty range)."""
    if lo > hi:
        return None
    if not text or lo == 0:
        return lo
    return _scan(1, lo, hi)


def after(i: int, lo: int, hi: int, text: bool) -> int | None:
    """The index that follows `i` in the order among `lo .. hi` (None: `i` is the last)."""
    if not text:
        return i + 1 if i < hi else None
    node = _advance(i, hi, descend=True)
    return None if node is None else _scan(node, lo, hi)


def _scan(node: int | None, lo: int, hi: int) -> int | None:
    """The first index in `lo .. hi` at or after `node` in decimal-text order."""
    while node is not None:
        if lo <= node <= hi:
            return node
        descend = _holds(node, lo, hi)  # below `lo`, but some longer number with its digits
        node = _advance(node, hi, descend)
    return None


def _advance(x: int, hi: int, descend: bool) -> int | None:
    """The next number after `x` in decimal-text order among `0 .. hi`; not into the numbers
    that start with `x`'s digits unless `descend`."""
    if x == 0:
        return 1 if hi >= 1 else None
    if descend and x * 10 <= hi:
        return x * 10
    while x % 10 == 9 or x + 1 > hi:
        x //= 10
        if x == 0:
            return None
    return x + 1


def _holds(prefix: int, lo: int, hi: int) -> bool:
    """Whether some number in `lo .. hi` starts with the digits of `prefix` (> 0)."""
    a = b = prefix
    while a <= hi:
        if b >= lo:
            return True
        a, b = a * 10, b * 10 + 9
    return False
