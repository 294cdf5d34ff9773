"""A phase of the scheduler's decide: one function of (service, ledger, now) to events.

`phases.PHASES` is ordered; a decide returns the events of the first phase that has any, so
a later phase always sees the folded outcome of an earlier one (placement sees the capacity
settling released). `wakeup(state, now_ms)` gives the instants at which the phase's answer
may change by time alone; `reads` the events (and maybe `CLOCK`) that can change its answer
otherwise (`services.domain.tooling.reads`; None, the default: everything, never quiet).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuledger.events import Event
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import Reads


@dataclass(frozen=True)
class Phase:
    """One named phase (see the module doc)."""

    name: str
    run: Callable[[LedgerService, Ledger, int], list[Event]]
    wakeup: Callable[[Ledger, int], list[int]] | None = None
    reads: Reads | None = None
