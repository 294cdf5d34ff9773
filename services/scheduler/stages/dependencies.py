"""Stage `dependencies`: a job waits until every job it depends on (`depends_on`) has done
what it waits for (`Dependency`); when one never can, it is withdrawn (`JobWithdrawn`), or,
under the policy `dependency_never_satisfied: pend`, it stays with
`DependencyNeverSatisfied`. A gate: checked before quota and placement."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events import catalog as ev
from gpuledger.events.reasons import EndReason, PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stage import Stage


def gate(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """None when every dependency of `job` is met; else why it waits, or its withdrawal."""
    if not job.spec.depends_on:
        return None
    state = rnd.state
    waiting, never = [], []
    for d in deps.dependencies(job.spec):
        other = deps.dependency_job(state, job.tenant, d.job)
        st = deps.status(other, d.on) if other is not None else "never"
        what = {"job": d.job, "on": d.on, "state": str(other.state) if other else None}
        if st == "waiting":
            waiting.append(what)
        elif st == "never":
            never.append(what)
    if never:
        message = "; ".join(
            f"waits for {w['job']} {deps.verb(w['on'])}, which can no longer happen "
            f"({w['job']} is {w['state']})"
            for w in never
        )
        details = {"never": never, "waiting": waiting, "queue_position": lim.position}
        if state.config.policy.dependency_never_satisfied == "pend":
            return rnd.pending(job, PendingReason.DependencyNeverSatisfied, message, details)
        return [
            rnd.svc.emit(
                state,
                rnd.now_ms,
                ev.JobWithdrawn,
                key=job.job_id,
                correlation_id=job.job_id,
                job_id=job.job_id,
                reason=EndReason.DependencyNeverSatisfied,
                message=message,
                details={"never": never},
            )
        ]
    if not waiting:
        return None
    message = "waits for " + ", ".join(
        f"{w['job']} {deps.verb(w['on'])} ({w['job']} is {w['state']})" for w in waiting
    )
    return rnd.pending(
        job,
        PendingReason.Dependency,
        message,
        {"waiting_for": waiting, "queue_position": lim.position},
    )


STAGE = Stage(
    "dependencies",
    __doc__ or "",
    reasons=(PendingReason.Dependency, PendingReason.DependencyNeverSatisfied),
    gate=gate,
    reads=of(ADMITTED_JOBS, "allocations", "tenants"),
)
