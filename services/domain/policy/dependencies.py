"""Job dependencies (`JobSpec.depends_on`, Slurm `--dependency`): whether each is met, still
awaited, or can never be met, from the folded state of the job it names. Pure.

| `on`        | met when the job it names...                         | never met when it...                      |
|-------------|------------------------------------------------------|-------------------------------------------|
| `succeeded` | completed                                            | ended otherwise                            |
| `failed`    | failed, timed out, or was cancelled after it started | completed, or ended without ever starting  |
| `finished`  | ended in any way (rejected and cancelled included)   | -                                          |
| `started`   | was placed at least once (an array: one of its tasks) | ended without ever being placed           |

A dependency names a job of the same tenant by the id that tenant submitted (job ids are per
tenant). Admission refuses (`UnknownDependency`) a dependency on a job id its tenant has not
submitted (another tenant's job of that id is no answer) and (`DependencyCycle`) one whose chain leads back
to the job itself.
"""

from __future__ import annotations

from typing import Any, Literal

from gpuledger.events.reasons import TERMINAL_STATES, JobState, RejectReason
from gpuledger.events.specs import Dependency, JobSpec

Status = Literal["met", "waiting", "never"]

_VERB = {
    "succeeded": "to succeed",
    "failed": "to fail",
    "finished": "to finish",
    "started": "to start",
}


def dependencies(spec: JobSpec) -> tuple[Dependency, ...]:
    """The job's dependencies (empty when it names none)."""
    deps = spec.depends_on
    return tuple(deps) if deps else ()


def status(dep_job: Any, on: str) -> Status:
    """Whether a dependency `on` of the job record `dep_job` is met now."""
    state = dep_job.state
    ran = dep_job.attempts > 0 or dep_job.tasks_started  # an array: one of its tasks ran
    ended = state in TERMINAL_STATES
    if on == "finished":
        return "met" if ended else "waiting"
    if on == "started":
        return "met" if ran else ("never" if ended else "waiting")
    if on == "succeeded":
        if state == JobState.completed:
            return "met"
        return "never" if ended else "waiting"
    # failed
    if state in (JobState.failed, JobState.timeout) or (state == JobState.cancelled and ran):
        return "met"
    return "never" if ended else "waiting"


def unmet(ledger: Any, spec: JobSpec) -> bool:
    """Whether some dependency of `spec` is not met now (awaited, or never to be met): such a
    pending job is not demand (fair share, reclaim, preemption, reservations, pending-work
    figures) until all are met. Names resolve within the job's tenant (`dependency_key`)."""
    for d in dependencies(spec):
        other = dependency_job(ledger, spec.tenant, d.job)
        if other is None or status(other, d.on) != "met":
            return True
    return False


def queued_since_ms(ledger: Any, job: Any) -> int | None:
    """Since when the pending `job` has waited for capacity, for aging and reservations: its
    `pending_since_ms`, or, while waiting on dependencies for the first time, the moment the
    last of them was met (the named job ended, or was first placed for `started`); None
    while one is not met (its wait does not count yet)."""
    since: int = job.pending_since_ms
    for d in dependencies(job.spec):
        other = dependency_job(ledger, job.spec.tenant, d.job)
        if other is None or status(other, d.on) != "met":
            return None
        if d.on == "started":
            at = other.placements[0][0] if other.placements else None
        else:
            at = other.finished_ms
        if at is not None and at > since:
            since = at
    return since


def verb(on: str) -> str:
    """`to succeed`, `to fail`, `to finish`, `to start`."""
    return _VERB.get(on, on)


def dependency_key(ledger: Any, tenant: str, job: str) -> str:
    """The fold's key of the job a dependency of a `tenant` job names: job ids are per
    tenant, so `job` is resolved within `tenant` (`Ledger.job_key`); a name the tenant does
    not have resolves to nothing (an empty key no job holds)."""
    return ledger.job_key(tenant, job) or ""


def dependency_job(ledger: Any, tenant: str, job: str) -> Any:
    """The record of the job a dependency names (`dependency_key`), or the stand-in of an
    array task not released yet (`Ledger.job_record`); None when there is none."""
    return ledger.job_record(dependency_key(ledger, tenant, job))


def admission_problem(ledger: Any, spec: JobSpec) -> tuple[str, str, dict[str, Any]] | None:
    """(reason, message, details) refusing the dependencies of `spec` given the folded
    ledger, or None: every named job exists in the same tenant and no chain leads back to
    `spec`."""
    deps = dependencies(spec)
    for i, d in enumerate(deps):
        other = dependency_job(ledger, spec.tenant, d.job)
        if other is None or other.tenant != spec.tenant or other.unreadable:
            return (
                RejectReason.UnknownDependency,
                f"depends_on[{i}].job: tenant {spec.tenant} has no job {d.job!r}"
                " (a dependency names a job of the same tenant submitted before)",
                {"dependency": d.job},
            )
    path = _cycle(ledger, spec, deps)
    if path is not None:
        return (
            RejectReason.DependencyCycle,
            "depends_on: the dependencies lead back to the job: " + " -> ".join(path),
            {"cycle": path},
        )
    return None


def _cycle(ledger: Any, spec: JobSpec, deps: tuple[Dependency, ...]) -> list[str] | None:
    """A chain of dependencies from `spec`'s job back to itself (depth-first, in the order the
    dependencies are listed; every name resolved within the job's tenant), or None. The
    chain is given in the names the tenant submitted."""
    start, tenant = spec.job_id, spec.tenant
    name = ledger.jobs[start].name if start in ledger.jobs else None
    shown = name or start
    seen: set[str] = set()
    stack: list[tuple[str, list[str]]] = [
        (dependency_key(ledger, tenant, d.job), [shown, d.job]) for d in reversed(deps)
    ]
    while stack:
        job_id, path = stack.pop()
        if job_id == start:
            return path
        if job_id in seen or not job_id:
            continue
        seen.add(job_id)
        rec = ledger.job_record(job_id)
        if rec is None:
            continue
        for d in reversed(dependencies(rec.spec)):
            stack.append((dependency_key(ledger, tenant, d.job), [*path, d.job]))
    return None
