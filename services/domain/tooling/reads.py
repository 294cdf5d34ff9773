"""What a unit of a decide reads, and from it when a whole decide is quiet.

A unit (a scheduler phase or stage, a step of preemption's decide) declares `reads`: the
event types whose fold can change its answer, written as event types or fold aggregates
(`of("allocations", ev.JobAdmitted)`: an aggregate stands for every event its fold handles,
`fold.ledger.FOLDS`), plus `CLOCK` when its answer may move as time passes between the
instants its `wakeup` gives. A service's decide is the table of its units; the two facts the
simulator and the live host use to skip a decide follow from that table, never by hand:

- `unaffected_by(units)`: the event types no unit reads; folding one cannot turn a quiet
  answer into a non-quiet one, so a quiet decide need not be asked again for it.
- `quiet_until_wakeup(units)`: no unit reads the clock, so a quiet answer stays quiet until
  the service's next wake-up.

A unit that declares nothing (`reads` None, the safe default for a new stage) reads every
event and the clock: its service is then never skipped (`undeclared` names it, and the
meta-test tests/scheduler/test_reads_declared.py flags it). A fold that changes the node set
(`Ledger.nodes_version`) always counts, whatever is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuledger.events import Event
from gpuledger.events import catalog as ev
from gpuledger.services.domain.fold.ledger import FOLDS

CLOCK = "clock"
"""Read marker: the unit's answer may change as time passes, not only at its wake-ups."""

Reads = frozenset[Any]
"""What a unit reads: event types, and maybe `CLOCK`."""

AGGREGATES: dict[str, frozenset[type[Event]]] = {f.name: frozenset(f.handlers) for f in FOLDS}
"""Per fold aggregate, the event types it handles (what reading that aggregate means)."""

ADMITTED_JOBS = AGGREGATES["jobs"] - {ev.JobSubmitted, ev.JobRejected}
"""The jobs aggregate as the placement side sees it: a submission counts once admission
has decided it (`JobAdmitted`); the submission and its rejection change no pending job."""

NODE_SET = AGGREGATES["nodes"] - {ev.NodeHeartbeat}
"""The nodes aggregate without heartbeats: a heartbeat only postpones a node's loss (a
wake-up), and one that revives a lost node changes `nodes_version`, which always counts."""


@dataclass(frozen=True)
class Step:
    """One step of a service's decide (preemption, admission, quota, the simulated agent)
    and what can change its answer; the service's table of steps is its `UNITS`."""

    name: str
    doc: str
    reads: Reads | None = None


def of(*parts: type[Event] | frozenset[Any] | str) -> Reads:
    """A `reads` declaration from event types, sets of them, aggregate names and `CLOCK`;
    ValueError naming the part for anything else (an unknown aggregate included)."""
    out: set[Any] = set()
    for part in parts:
        if part == CLOCK:
            out.add(CLOCK)
        elif isinstance(part, str):
            if part not in AGGREGATES:
                known = ", ".join(sorted(AGGREGATES))
                raise ValueError(f"unknown fold aggregate {part!r} (known: {known})")
            out |= AGGREGATES[part]
        elif isinstance(part, frozenset):
            out |= part
        elif isinstance(part, type) and issubclass(part, Event):
            out.add(part)
        else:
            raise ValueError(f"not an event type, aggregate or CLOCK: {part!r}")
    return frozenset(out)


def _reads(units: Iterable[Any]) -> list[Reads | None]:
    return [getattr(u, "reads", None) for u in units]


def unaffected_by(units: Iterable[Any]) -> frozenset[type[Event]]:
    """The event types no unit of the table reads (none when a unit declares nothing)."""
    read: set[Any] = set()
    for r in _reads(units):
        if r is None:
            return frozenset()
        read |= r
    return frozenset(t for t in ev.ALL_EVENTS if t not in read)


def quiet_until_wakeup(units: Iterable[Any]) -> bool:
    """Whether no unit of the table reads the clock (every unit has declared its reads)."""
    return all(r is not None and CLOCK not in r for r in _reads(units))


def undeclared(units: Iterable[Any]) -> list[str]:
    """The names of the units that declare no reads (so their service is never quiet)."""
    return [getattr(u, "name", repr(u)) for u in units if getattr(u, "reads", None) is None]
