"""Part of the jobs fold: priority changes (`JobPriorityChanged`, events/control.py) and
moves to the top of a tenant's queue (`JobMovedToTop`: the job's queue time becomes just
before the earliest of its tenant's other pending jobs, `JobRecord.queue_ms`).

A change sets the job's `priority` (queue order and preemption read it from the next decide
on, so preemption re-evaluates at once); the first one keeps the priority admission gave in
`class_priority`. A tenant may lower its job's priority and raise it back up to that value;
above it needs the operator. A change of class (`priority_class`, a pending job only) gives
the job the class's value, preemptibility and SLO class, and the class's value becomes
`class_priority`; a tenant may move its job to a class of at most that value. What cannot apply is refused and answered (`RequestRefused`):
no such job of the tenant (`UnknownJob`); a job not admitted yet or finished, an array or
service (its tasks and replicas are changed one by one), neither or both of `priority` and
`nice`, a result out of range, or a tenant raising above its class (`InvalidSpec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from gpuledger import events as ev
from gpuledger.events.control import PRIORITY_MAX
from gpuledger.events.reasons import JobState, RequestReason
from gpuledger.services.domain.fold import intake
from gpuledger.services.domain.fold.records import TERMINAL
from gpuledger.services.domain.fold.refusals import Refusal

if TYPE_CHECKING:
    from gpuledger.services.domain.fold.records import JobRecord, LedgerState


def problem(
    job: JobRecord, e: ev.JobPriorityChanged, classes: Mapping[str, ev.PriorityClassConfigured]
) -> tuple[str | None, int]:
    """Why the change cannot apply to `job` (None if it can), and the new priority."""
    base = job.class_priority if job.class_priority is not None else job.priority
    given = [f for f in (e.priority, e.nice, e.priority_class) if f is not None]
    if len(given) != 1:
        return "give exactly one of priority, nice and priority_class", 0
    cls = None if e.priority_class is None else classes.get(e.priority_class)
    if e.priority is not None:
        new = e.priority
    elif cls is not None:
        new = cls.value
    else:
        new = base - (e.nice or 0)
    why = _job_problem(job, e) or _class_problem(job, e, cls, classes)
    return why or _value_problem(e, new, base), new


def _job_problem(job: JobRecord, e: ev.JobPriorityChanged) -> str | None:
    """Why `job` takes no priority change: an array or a service (its tasks do), or not
    admitted yet or finished."""
    if job.spec.array or job.spec.is_service or job.service is not None:
        return f"{e.job_id!r} is an array or a service: change its tasks one by one"
    if job.state == JobState.submitted or job.state in TERMINAL:
        return f"{e.job_id!r} is {job.state}: only an admitted, unfinished job"
    return None


def _class_problem(
    job: JobRecord,
    e: ev.JobPriorityChanged,
    cls: ev.PriorityClassConfigured | None,
    classes: Mapping[str, ev.PriorityClassConfigured],
) -> str | None:
    """Why the job cannot change to the class `e` names: not configured, or the job is not
    pending (a placed job keeps its class)."""
    if e.priority_class is None:
        return None
    if cls is None:
        known = ", ".join(sorted(classes))
        return f"priority class {e.priority_class!r} is not configured (known: {known})"
    if job.state != JobState.pending:
        return (
            f"{e.job_id!r} is {job.state}: only a pending job's class can change "
            "(a placed job keeps the class it was placed under)"
        )
    return None


def _value_problem(e: ev.JobPriorityChanged, new: int, base: int) -> str | None:
    """Why priority `new` cannot be set: out of range, or above the class's `base` by
    anyone but the operator."""
    if not 0 <= new <= PRIORITY_MAX:
        return f"priority {new} is out of range (0 to {PRIORITY_MAX})"
    if new > base and e.actor != "operator":
        return f"raising {e.job_id!r} above its class's {base} needs the operator"
    return None


def changed(ledger: LedgerState, e: ev.JobPriorityChanged) -> Refusal | None:
    job = intake.own_job(ledger, e, "change")
    if isinstance(job, Refusal):
        return job
    why, new = problem(job, e, ledger.config.classes)
    if why is not None:
        return intake.answer(ledger, e, RequestReason.InvalidSpec, why)
    if e.priority_class is not None:  # as if submitted with it: its value is the new base
        cls = ledger.config.classes[e.priority_class]
        if job.submitted_class is None:
            job.submitted_class = job.spec.priority_class
        job.spec = msgspec.structs.replace(job.spec, priority_class=cls.name)
        job.class_priority, job.preemptible, job.slo_class = (
            cls.value,
            cls.preemptible,
            cls.slo_class,
        )
    elif job.class_priority is None:
        job.class_priority = job.priority
    job.priority = new
    return None


def topped(ledger: LedgerState, e: ev.JobMovedToTop) -> Refusal | None:
    job = intake.own_job(ledger, e, "move")
    if isinstance(job, Refusal):
        return job
    if job.state != JobState.pending or job.job_id not in ledger.pending:
        message = f"{e.job_id!r} is {job.state}: only a pending job can be moved to the top"
        return intake.answer(ledger, e, RequestReason.InvalidSpec, message)
    own = (ledger.jobs[j] for j in sorted(ledger.pending) if j != job.job_id)
    times = [
        o.submitted_ms if o.queue_ms is None else o.queue_ms for o in own if o.tenant == job.tenant
    ]
    mine = job.submitted_ms if job.queue_ms is None else job.queue_ms
    first = min(times, default=mine)
    if first <= mine:
        job.queue_ms = first - 1
    return None
