"""The preemption service's drain pass: the runs on nodes the operator drains
(`NodeCordoned` with `drain`, events/control.py), and on the nodes of a maintenance window
once it starts (`MaintenanceScheduled`; the fold's `maintenance.in_force_on`), are asked to
checkpoint and leave.

Each active allocation with a member on a draining node, not already asked to stop, gets a
`PreemptionRequested` with reason `Drain` and no beneficiary (its job is requeued and placed
elsewhere: the `cordon` stage keeps it off the node) as soon as it may:

- at once with `force`, once the drain's `deadline_ms` has passed, or on a node whose
  maintenance window is in force (the window's start is its deadline: minimum runtime and
  non-preemptibility hold work back only until then);
- otherwise only preemptible work, once it has run `policy.min_runtime_s` (until then the
  drain waits for it, and asks for a wake-up when the minimum runtime lapses), and only
  within its job's disruption budget (`min_available`, drain_budget.py); non-preemptible
  work is left to finish (or to the deadline). `waiting` says why each run left waits.

Pure: reads the ledger; the caller emits. One request per run (keyed by its allocation).
"""

from __future__ import annotations

from typing import NamedTuple

from gpuledger.events import Event, PreemptionRequested
from gpuledger.events.reasons import PreemptionReason
from gpuledger.services.domain.fold.ledger import AllocationRecord, Ledger
from gpuledger.services.domain.fold.maintenance import in_force_on, next_start
from gpuledger.services.domain.policy.member_stop import grace_ms
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.timefmt import instant
from gpuledger.services.preemption.drain_budget import holds_back


class Draining(NamedTuple):
    """Why a node is drained: the requests' message, and the maintenance window in force on
    it (None: the operator's drain, `NodeCordoned` with `drain`)."""

    message: str
    window: str | None = None
    spares: str | None = None
    """The tenant a window holds the node for: its runs stay."""


def draining(state: Ledger, now_ms: int) -> dict[str, Draining]:
    """The nodes being drained at `now_ms`, by name: a maintenance window in force first
    (what runs there leaves at once), then the operator's drains, then a window held for a
    tenant (what other tenants run there leaves at once)."""
    out: dict[str, Draining] = {}
    windows = in_force_on(state, now_ms) if state.maintenance else {}
    for n, w in windows.items():
        if w.tenant is None:
            why = f" ({w.reason})" if w.reason else ""
            out[n] = Draining(f"node {n} is in maintenance window {w.window_id}{why}", w.window_id)
    nodes = state.nodes
    for n in sorted(state.sched.cordoned):
        if (c := nodes[n].cordon) and c.drain:
            out.setdefault(n, Draining(f"node {n} is being drained"))
    for n, w in windows.items():
        if w.tenant is not None and n not in out:
            why = f" ({w.reason})" if w.reason else ""
            held = f"node {n} is held for tenant {w.tenant} by window {w.window_id}{why}"
            out[n] = Draining(held, w.window_id, w.tenant)
    return dict(sorted(out.items()))


def _may_leave_at(
    state: Ledger, rec: AllocationRecord, now_ms: int, node: str, why: Draining
) -> int | None:
    """When the run may be drained (<= now_ms: now); None: not before the deadline."""
    if why.window is not None:
        return now_ms  # the window is in force: its start was the deadline
    cordon = state.nodes[node].cordon
    assert cordon is not None
    if cordon.force or (cordon.deadline_ms is not None and now_ms >= cordon.deadline_ms):
        return now_ms
    job = state.jobs.get(rec.job_id)
    if job is not None and not job.preemptible:
        return cordon.deadline_ms
    started = min(rec.started.values(), default=rec.placed_ms)
    after = started + state.config.policy.min_runtime_s * 1000
    if cordon.deadline_ms is not None:
        after = min(after, cordon.deadline_ms)
    return after


def _forced(state: Ledger, node: str, why: Draining, now_ms: int) -> bool:
    """Whether what is left on `node` leaves regardless of budgets: a window in force,
    `--force`, or a passed `--deadline`."""
    cordon = state.nodes[node].cordon
    return (
        why.window is not None
        or cordon is None
        or cordon.force
        or (cordon.deadline_ms is not None and now_ms >= cordon.deadline_ms)
    )


def _runs(state: Ledger, nodes: dict[str, Draining]) -> list[tuple[str, AllocationRecord]]:
    """(node, allocation) of every run on `nodes` not yet asked to stop."""
    out, seen = [], set()
    for node, why in nodes.items():
        for alloc_id in sorted(state.agents.node_allocations.get(node, ())):
            rec = state.allocations[alloc_id]
            if alloc_id in seen or rec.ended or rec.preemption is not None:
                continue
            if (
                why.spares is not None
                and (j := state.jobs.get(rec.job_id))
                and j.tenant == why.spares
            ):
                continue  # the tenant the window holds the node for
            seen.add(alloc_id)
            out.append((node, rec))
    return out


def requests(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """`PreemptionRequested` (reason `Drain`) for every run that may leave a draining node now."""
    out: list[Event] = []
    nodes = draining(state, now_ms)
    leaving: set[str] = set()
    for node, rec in _runs(state, nodes):
        why = nodes[node]
        at = _may_leave_at(state, rec, now_ms, node, why)
        if at is None or at > now_ms:
            continue
        if not _forced(state, node, why, now_ms) and holds_back(state, rec, leaving):
            continue  # its disruption budget: it waits until a replica runs again elsewhere
        leaving.add(rec.allocation_id)
        job = state.jobs.get(rec.job_id)
        details = {"node": node} if why.window is None else {"node": node, "window": why.window}
        out.append(
            svc.emit(
                state,
                now_ms,
                PreemptionRequested,
                key=f"{rec.allocation_id}:drain",
                correlation_id=rec.job_id,
                job_id=rec.job_id,
                allocation_id=rec.allocation_id,
                beneficiary="",
                reason=PreemptionReason.Drain,
                deadline_ms=now_ms + grace_ms(state, job),
                message=why.message,
                details=details,
            )
        )
    return out


def next_wakeup_ms(state: Ledger, now_ms: int) -> int | None:
    """When a waiting run on a draining node may leave (a minimum runtime, or a deadline
    that also ends a disruption budget's hold), or a maintenance window starts on a node
    that runs work."""
    nodes = draining(state, now_ms) if state.sched.cordoned else {}
    runs = _runs(state, nodes)
    times = [_may_leave_at(state, rec, now_ms, n, nodes[n]) for n, rec in runs]
    # a run held back by its disruption budget leaves at the deadline
    times += [c.deadline_ms for n, _ in runs if (c := state.nodes[n].cordon) is not None]
    if state.maintenance:
        busy = sorted(n for n, allocs in state.agents.node_allocations.items() if allocs)
        times += [next_start(state, n, now_ms) for n in busy]
    return min((t for t in times if t is not None and t > now_ms), default=None)


def waiting(state: Ledger, now_ms: int) -> dict[str, list[tuple[str, str]]]:
    """Per draining node with runs left, each run's job and why it has not been asked to
    leave yet (`gpuledger node drain --wait` names them when its timeout passes)."""
    nodes = draining(state, now_ms)
    out: dict[str, list[tuple[str, str]]] = {}
    for node, rec in _runs(state, nodes):
        why = nodes[node]
        at = _may_leave_at(state, rec, now_ms, node, why)
        if at is None:
            text = "not preemptible: it leaves at its end, with --force or at a deadline"
        elif at > now_ms:
            text = f"protected by its minimum runtime until {instant(at)}"
        elif _forced(state, node, why, now_ms):
            continue
        else:
            text = holds_back(state, rec, set()) or "about to be asked to leave"
        out.setdefault(node, []).append((rec.job_id, text))
    return out
