"""The common base of the services' deciders: a service over the shared ledger.

Every service folds the whole log into a `Ledger` (one evolve for all), and differs only in
`decide` and `next_wakeup_ms`. `emit` stamps an event with the decision envelope (input
sequence, configuration digest, leader epoch) and a deterministic id from its semantic key.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from gpuledger.events import Event
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.tooling.stamp import enveloped

E = TypeVar("E", bound=Event)


class LedgerService:
    """Base class: subclasses set `name` and implement `decide` (and maybe `next_wakeup_ms`)."""

    name = "service"

    unaffected_by: frozenset[type] = frozenset()
    """Event types whose fold can change neither this service's `decide` nor its
    `next_wakeup_ms`: after a quiet answer, the simulator does not ask again until an event
    of another type is folded (checking mode asks anyway and requires the same quiet answer).
    A fold that changes the node set (`Ledger.nodes_version`) always counts. Empty: every
    event may matter."""

    quiet_until_wakeup: bool = False
    """True when a quiet answer stays quiet as time passes until `next_wakeup_ms` (nothing
    else in `decide` reads the clock): the simulator then need not ask at a later instant
    unless an event that affects it was folded or its wake-up has come."""

    def __init__(self, instance: str = "0", leader_epoch: int = 0) -> None:
        self.instance = instance
        self.leader_epoch = leader_epoch

    @property
    def producer(self) -> str:
        return f"{self.name}/{self.instance}"

    def initial_state(self) -> Ledger:
        return Ledger()

    def evolve(self, state: Ledger, seq: int, event: Event) -> Ledger:
        return state.apply(seq, event)

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        raise NotImplementedError

    def fold_of(self, state: Ledger) -> Any:
        """The part of the state that is a fold of the log (what a snapshot keeps): all of it."""
        return state

    def from_fold(self, fold: Any, state: Ledger) -> Ledger:
        """The state to go on from, given a restored `fold_of` and a fresh `initial_state()`
        (the inverse of `fold_of`). TypeError for anything else than a `Ledger`."""
        if not isinstance(fold, Ledger):
            raise TypeError(f"a {type(fold).__name__}, not a Ledger")
        return fold

    def next_wakeup_ms(self, state: Ledger, now_ms: int) -> int | None:
        return None

    def cache_defaults(self) -> dict[str, Any]:
        """The empty value of every memo this service keeps on itself (attribute -> value)."""
        return {}

    def uncached(self) -> LedgerService:
        """A copy of this service with every memo empty (the checking mode re-runs each
        decide on it; its answers must be the same)."""
        clone = copy.copy(self)
        clone.__dict__.update(self.cache_defaults())
        return clone

    def emit(
        self,
        state: Ledger,
        now_ms: int,
        cls: type[E],
        *,
        key: str,
        correlation_id: str,
        causation_id: str = "",
        **fields: Any,
    ) -> E:
        """`stamp` an event of this service decided on `state` at `now_ms`."""
        return enveloped(
            cls,
            key,
            self.producer,
            now_ms,
            correlation_id,
            causation_id,
            state.last_seq,
            state.config.digest,
            self.leader_epoch,
            fields,
        )
