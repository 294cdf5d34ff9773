"""A stage of the placement pass: a small frozen record of optional pure functions.

The scheduler tries each pending job against `stages.STAGES`, in table order:

1. `gate(rnd, job, lim)`: before placement; a list of events (maybe empty) keeps the job out
   of this decide (a pending reason, a withdrawal), None lets it on.
2. `cap(rnd, job, lim, k)`: an elastic gang: whether `k` members are allowed (the gang is
   shrunk towards `min_members` until every stage allows it).
3. `exclude(rnd, job, lim)`: the nodes it keeps the job off (noting why in `lim`).
4. the trial placement, then, if it failed, `explain(rnd, job, lim, why)` of every stage in
   table order: the first stage whose exclusion alone keeps the job out (`Round.binds`: it
   would fit without that stage, every other in force) gives the reason; the refinements
   after the exclusions (a reservation made, victims leaving, a layout changing) override
   it. Table order is the reason precedence.
5. after a bind (a placement or a grow), `book(rnd, job, members)` of every stage.

`wakeup(state, now_ms)` gives the instants at which its answer may change by time alone;
`binds_grow` says whether a growing elastic gang obeys its cap and exclusion too.
`reads` is what can change its answer (event types, fold aggregates, `CLOCK`: see
`services.domain.tooling.reads`); the scheduler's quiet set is derived from the stages' and
phases' `reads`. A stage that declares none is read as reading everything: never quiet.
`reasons` are the pending reasons it owns (each reason has exactly one owner: a stage, or
the placement engine's `UNPLACEABLE` rules); `gives` are reasons owned elsewhere that it may
also give (per-model quota codes, a refinement of a placement code).

Every function is pure: it reads the `Round` and the job; only `exclude` writes its own notes
into `lim`, `explain` into `why`, `book` its own tallies into the `Round`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuledger.events import Event
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.tooling.reads import Reads
from gpuledger.services.scheduler.round import Limits, Round, Why

Gate = Callable[[Round, JobRecord, Limits], "list[Event] | None"]
Cap = Callable[[Round, JobRecord, Limits, int], bool]
Exclude = Callable[[Round, JobRecord, Limits], frozenset[str]]
Explain = Callable[[Round, JobRecord, Limits, Why], None]
Book = Callable[[Round, JobRecord, tuple], None]
Wakeup = Callable[[Ledger, int], "list[int]"]


@dataclass(frozen=True)
class Stage:
    """One named stage of the placement pass (see the module doc)."""

    name: str
    doc: str
    reasons: tuple[str, ...] = ()
    gives: tuple[str, ...] = ()
    gate: Gate | None = None
    cap: Cap | None = None
    exclude: Exclude | None = None
    explain: Explain | None = None
    book: Book | None = None
    wakeup: Wakeup | None = None
    binds_grow: bool = False
    reads: Reads | None = None
    """The events (and maybe the clock) that can change its answer; None: everything."""
