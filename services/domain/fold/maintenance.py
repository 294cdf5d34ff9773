"""Maintenance windows (issue 42; Slurm `scontrol create reservation flags=maint`): part of
the nodes aggregate (`nodes.FOLD`), which owns `maintenance`.

A window is folded once into a `MaintenanceWindow` (records.py) and every reader takes its
planned-down interval from there: the scheduler's `maintenance` stage, `gpuledger nodes`,
`why` and the projection's `maintenance_windows` table (so `gpuledger report`'s planned
down, or reserved for a window held for a tenant; `closed_nodes` is what a run started now may not use; `in_force_on` is what the
preemption service drains at a window's start). Invariants: a window names only registered
nodes (the configuration's `reservations:` may name nodes before they register), ends after
it starts, has an id of its own and overlaps no live window on a node they share; otherwise
it is refused and changes nothing (a configuration's window declared again unchanged is
accepted and changes nothing).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import msgspec

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold.records import MaintenanceWindow
from gpuledger.services.domain.fold.refusals import Refusal

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import JobRecord, LedgerState

HINT_MARGIN_PCT = 50
"""A job without a time limit is bounded, for windows, by what is left of its duration hint
(`duration_s` less its progress) plus this share of it: a hint is a guess, and a run still
there at a window's start is drained then."""


def run_bound_s(job: JobRecord) -> int | None:
    """How long a run of `job` started now may last, as windows read it: its time limit; else
    what is left of its duration hint plus `HINT_MARGIN_PCT` of it (whole seconds, rounded
    up); None (unbounded: it reaches every window ahead) with neither."""
    if job.time_limit_s is not None:
        return job.time_limit_s
    hint = job.spec.duration_s
    if hint is None:
        return None
    left_ms = max(0, hint * 1000 - job.progress_ms)
    return -(-left_ms * (100 + HINT_MARGIN_PCT) // 100_000)


def declared_again(ledger: LedgerState, e: ev.MaintenanceScheduled) -> bool:
    """Whether `e` is a window of the configuration's `reservations:` declared again as the
    log already holds it (the configuration applied once more): it changes nothing."""
    w = ledger.maintenance.get(e.window_id)
    return (
        e.origin == "config"
        and w is not None
        and (w.nodes, w.start_ms, w.end_ms, w.tenant)
        == (tuple(sorted(set(e.nodes))), e.start_ms, e.end_ms, e.tenant or None)
    )


def problem(ledger: LedgerState, e: ev.MaintenanceScheduled) -> Refusal | None:
    """Why the window `e` cannot be scheduled (None: it can). The CLI asks the same. A
    window of the configuration may name nodes not registered yet (declared before their
    agents start, as a configuration declares its nodes)."""
    if e.window_id in ledger.maintenance:
        return Refusal(FoldRefusal.DuplicateWindow, f"window {e.window_id!r} exists already")
    if not e.nodes:
        return Refusal(FoldRefusal.InvalidWindow, f"window {e.window_id!r} names no node")
    unknown = [n for n in e.nodes if n not in ledger.nodes and e.origin != "config"]
    if unknown:
        return Refusal(FoldRefusal.UnknownNode, f"no node {', '.join(map(repr, unknown))}")
    if e.end_ms <= e.start_ms:
        return Refusal(FoldRefusal.InvalidWindow, "the window ends before it starts")
    for other in ledger.maintenance.values():
        shared = sorted(set(other.nodes) & set(e.nodes))
        if shared and other.reaches(e.start_ms, e.end_ms):
            return Refusal(
                FoldRefusal.InvalidWindow,
                f"overlaps window {other.window_id!r} on {', '.join(shared)}",
            )
    return None


def scheduled(ledger: LedgerState, e: ev.MaintenanceScheduled) -> Refusal | None:
    if declared_again(ledger, e):
        return None
    refusal = problem(ledger, e)
    if refusal is not None:
        return refusal
    ledger.maintenance[e.window_id] = MaintenanceWindow(
        e.window_id,
        tuple(sorted(set(e.nodes))),
        e.start_ms,
        e.end_ms,
        e.reason,
        e.occurred_at_ms,
        tenant=None if isinstance(e.tenant, msgspec.UnsetType) else e.tenant,
    )
    return None


def cancelled(ledger: LedgerState, e: ev.MaintenanceCancelled) -> Refusal | None:
    window = ledger.maintenance.get(e.window_id)
    if window is None or window.cancelled_ms is not None:
        return Refusal(FoldRefusal.UnknownWindow, f"no window {e.window_id!r} to cancel")
    ledger.maintenance[e.window_id] = replace(window, cancelled_ms=e.occurred_at_ms)
    return None


def reaching(
    ledger: LedgerState, node: str, from_ms: int, to_ms: int | None, tenant: str | None = None
) -> MaintenanceWindow | None:
    """The first window (by start, then id) of `node` that work of `tenant` over
    [from_ms, to_ms) would reach into, a window held for `tenant` not counting; None when
    none would."""
    hits = [
        w
        for w in ledger.maintenance.values()
        if node in w.nodes and w.closes_for(tenant) and w.reaches(from_ms, to_ms)
    ]
    return min(hits, key=lambda w: (w.start_ms, w.window_id)) if hits else None


def closed_nodes(
    ledger: LedgerState, now_ms: int, limit_s: int | None, tenant: str | None = None
) -> frozenset[str]:
    """The nodes a run of `tenant` started at `now_ms` lasting at most `limit_s`
    (`run_bound_s`; None: unbounded) may not start on: those of every window it would reach but those held for `tenant` (the
    scheduler's `maintenance` stage, and preemption, which frees no capacity there for such
    a job)."""
    if not ledger.maintenance:
        return frozenset()
    end = None if limit_s is None else now_ms + limit_s * 1000
    return frozenset(
        n
        for w in ledger.maintenance.values()
        if w.closes_for(tenant) and w.reaches(now_ms, end)
        for n in w.nodes
    )


def in_force(ledger: LedgerState, node: str, now_ms: int) -> MaintenanceWindow | None:
    """The window that has `node` planned down at `now_ms`, if any."""
    return reaching(ledger, node, now_ms, now_ms + 1)


def in_force_on(ledger: LedgerState, now_ms: int) -> dict[str, MaintenanceWindow]:
    """Per node under a window at `now_ms`, the window: what still runs there (but the work
    of the tenant it is held for) is drained as a drain whose deadline has passed
    (services/preemption/drain.py)."""
    out: dict[str, MaintenanceWindow] = {}
    for w in sorted(ledger.maintenance.values(), key=lambda w: (w.start_ms, w.window_id)):
        if w.start_ms <= now_ms < w.until_ms:
            for n in w.nodes:
                out.setdefault(n, w)
    return out


def next_start(ledger: LedgerState, node: str, now_ms: int) -> int | None:
    """When the next window of `node` starts after `now_ms` (None: none ahead)."""
    starts = [
        w.start_ms
        for w in ledger.maintenance.values()
        if node in w.nodes and now_ms < w.start_ms < w.until_ms
    ]
    return min(starts, default=None)
