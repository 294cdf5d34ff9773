"""Phase `time_limits`: `TimeLimitReached` for every run whose time limit has come: its
members are asked to checkpoint and stopped after the grace. A run being preempted or
cancelled is left to that (its next run starts a fresh limit). Settling ends the run
(`endings.timed_out`) once its members exited.

Under `policy.profile: slurm` a limit is enforced as Slurm's controller enforces it: by a
periodic check (`slurm.time_limit_check_s`), so a run over its limit (plus its grace,
`OverTimeLimit`) is stopped at the first check after that, not at the instant."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events import catalog as ev
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.policy import slurm_priority
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.domain.tooling.timefmt import duration, instant
from gpuledger.services.scheduler.phase import Phase


def run(svc: LedgerService, state: Ledger, now_ms: int) -> list[Event]:
    """`TimeLimitReached` for every run due now."""
    out: list[Event] = []
    every = _check_every_ms(state)
    for at, alloc_id, _kind in state.time_limits.due(now_ms):
        if _checked(at, every) > now_ms:
            continue
        rec = state.allocations.get(alloc_id)
        if rec is None or rec.ended or rec.time_limit is not None or rec.preemption:
            continue
        job = state.jobs[rec.job_id]
        if job.cancel_requested or job.time_limit_s is None:
            continue
        started = max(rec.started.values(), default=rec.placed_ms)
        grace = state.config.grace_ms(job.spec.checkpoint.grace_s, job.spec.priority_class)
        limit_ms = job.time_limit_s * 1000
        stop = max(now_ms, _checked(at + grace, every)) if every else now_ms + grace
        out.append(
            svc.emit(
                state,
                now_ms,
                ev.TimeLimitReached,
                key=alloc_id,
                correlation_id=job.job_id,
                job_id=job.job_id,
                allocation_id=alloc_id,
                time_limit_s=job.time_limit_s,
                started_ms=started,
                deadline_ms=stop,
                message=(
                    f"ran {duration(now_ms - started)} since {instant(started)}, its time "
                    f"limit is {duration(limit_ms)}: asked to checkpoint, stopped at "
                    f"{instant(stop)} (grace {duration(grace)})"
                ),
            )
        )
    return out


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """The next time limit to come (under the `slurm` profile: the next check that finds
    a run over its limit, including a limit already past)."""
    limit = state.time_limits.next_after(now_ms)
    every = _check_every_ms(state)
    if not every:
        return [] if limit is None else [limit]
    checks = {_checked(at, every) for at, _, _ in state.time_limits.due(now_ms)}
    if limit is not None:
        checks.add(_checked(limit, every))
    later = [t for t in checks if t > now_ms]
    return [min(later)] if later else []


def _check_every_ms(state: Ledger) -> int:
    """The `slurm` profile's time-limit check period in ms; 0 (at the limit) otherwise."""
    site = slurm_priority.profile(state)
    return 0 if site is None else max(0, site.time_limit_check_s) * 1000


def _checked(at_ms: int, every_ms: int) -> int:
    """The first check at or after `at_ms` (checks at whole multiples of `every_ms`)."""
    return at_ms if not every_ms else -(-at_ms // every_ms) * every_ms


PHASE = Phase("time_limits", run, wakeup, reads=of(ADMITTED_JOBS, "allocations", "tenants"))
