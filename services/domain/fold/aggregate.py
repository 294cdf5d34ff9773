"""An aggregate fold: the part of the ledger one kind of thing owns (jobs, allocations, nodes,
tenants, MIG, intake), as a record of the `Ledger` fields it alone writes and a dispatch table
from the event types it handles to its handlers (the per-aggregate mutators of an event-sourced
model). `Ledger.fold` folds an event with the one handler of its type (`handlers_of`).

Invariants (tests/fold/test_fold_ownership.py): every event type the ledger folds
has exactly one handler; every `Ledger` field, or field of a sub-record (`sched.growable`),
is owned by exactly one fold, and only that fold's modules write it; another fold changes it
by calling the owner's functions. The fleet (`Fleet`) is an aggregate of its own with an
atomic API (allocate, release, add_node): the allocations, nodes and MIG folds book into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import LedgerState
    from gpuledger.services.domain.fold.refusals import Refusal

Handler = Callable[["LedgerState", Any], "Refusal | None"]
"""Folds one event into the ledger: None if it was applied, else why it changed nothing
(or raises `Refused`, changing nothing)."""


@dataclass(frozen=True)
class Fold:
    """One aggregate's fold."""

    name: str
    owns: frozenset[str]
    """The `Ledger` fields (dotted for a sub-record's: `sched.growable`) only this fold writes."""
    handlers: Mapping[type, Handler]
    """Event type -> its handler."""
    modules: tuple[str, ...]
    """The modules of services/domain/fold/ that hold the fold's code (its writers)."""


def handlers_of(folds: Iterable[Fold]) -> dict[type, Handler]:
    """The dispatch table of the whole ledger; raises ValueError if two folds handle one
    event type (an event has exactly one owner)."""
    table: dict[type, Handler] = {}
    owner: dict[type, str] = {}
    for f in folds:
        for tp, handler in f.handlers.items():
            if tp in table:
                raise ValueError(f"{tp.__name__} is handled by {owner[tp]} and {f.name}")
            table[tp], owner[tp] = handler, f.name
    return table
