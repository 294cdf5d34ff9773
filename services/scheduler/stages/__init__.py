"""The placement pass as data: `STAGES`, the ordered table of named stages (one module each,
a `stage.Stage` record). Table order is what the stages do in turn (gates, caps, exclusions,
explanations, bookkeeping) and so the reason precedence: the first exclusion that alone
keeps a job out gives its reason, the refinements after it override. See docs/deciders.md
for how to add one."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage
from gpuledger.services.scheduler.stages import (
    array_cap,
    cordon,
    dependencies,
    held,
    main_scheduler,
    maintenance,
    mig_layout,
    model_guarantee,
    model_limits,
    nominations,
    quota,
    regeometry,
    releasing,
    reservation,
    reserve,
    spread,
    user_limits,
)

STAGES: tuple[Stage, ...] = (
    held.STAGE,
    dependencies.STAGE,
    array_cap.STAGE,
    user_limits.STAGE,
    quota.STAGE,
    mig_layout.STAGE,
    cordon.STAGE,
    maintenance.STAGE,
    nominations.STAGE,
    spread.STAGE,
    reservation.STAGE,
    model_guarantee.STAGE,
    model_limits.STAGE,
    reserve.STAGE,
    releasing.STAGE,
    regeometry.STAGE,
    main_scheduler.STAGE,
)

BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
# the table's functions by kind, in table order (read per job: no attribute tests in the loop)
GATES = tuple(s.gate for s in STAGES if s.gate is not None)
EXCLUDES = tuple((s.name, s.exclude, s.binds_grow) for s in STAGES if s.exclude is not None)
CAPS = tuple((s.cap, s.binds_grow) for s in STAGES if s.cap is not None)
EXPLAINS = tuple(s.explain for s in STAGES if s.explain is not None)
BOOKS = tuple(s.book for s in STAGES if s.book is not None)
OWNER: dict[str, str] = {code: s.name for s in STAGES for code in s.reasons}
"""Per pending reason the scheduler finds, the stage that owns it."""


def gated(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """What the first gate that keeps the job out says; None when every gate lets it on."""
    for gate in GATES:
        stop = gate(rnd, job, lim)
        if stop is not None:
            return stop
    return None


def exclusions(rnd: Round, job: JobRecord, lim: Limits, *, grow: bool = False) -> None:
    """Fill `lim.excluded` with every stage's nodes, in table order (on a grow, of the
    stages that bind it)."""
    for name, exclude, binds_grow in EXCLUDES:
        if binds_grow or not grow:
            lim.excluded[name] = exclude(rnd, job, lim)


def capped(
    rnd: Round, job: JobRecord, lim: Limits, k: int, floor: int, *, grow: bool = False
) -> int:
    """The most members, from `k` down to `floor`, that every stage's cap allows."""
    for cap, binds_grow in CAPS:
        while (binds_grow or not grow) and k > floor and not cap(rnd, job, lim, k):
            k -= 1
    return k


def explained(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """Every stage's explanation, in table order."""
    for explain in EXPLAINS:
        explain(rnd, job, lim, why)


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """The one bookkeeping of a bind (a placement or a grow): every stage's tallies."""
    for tally in BOOKS:
        tally(rnd, job, members)
