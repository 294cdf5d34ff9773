"""Admission: every submitted job is admitted (with its resolved class) or rejected with a
reason code and a quantitative message.

Checks, in order: ids, tenant known, class known, resource shape well-formed, shape possible
on the registered fleet (only once nodes are known), non-preemptible work within guarantee,
dependencies, and the submit limits of its tenant and user (services/domain/policy/
submit_limits.py; judged in the order of submission).

It also answers the client requests the ledger could not apply, so their senders (a CI job
waiting with `submit --wait`, `gpuledger why`) see why: a job id whose first submission was
dead-lettered (undecodable) is rejected with `InvalidSpec` and the decode error, using the
tenant and job id of its subject; a second submission of an existing job id with other
content, an unreadable one for an existing job, or a cancel of a job the tenant does not
have gets one `RequestRefused` per message (keyed by its stream sequence).
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from gpuledger.events import (
    Event,
    InvalidId,
    JobAdmitted,
    JobRejected,
    RequestRefused,
    validate_job_id,
    validate_tenant,
    validate_token,
)
from gpuledger.events import catalog as _ev
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.events.reasons import RejectReason
from gpuledger.events.specs import JobSpec
from gpuledger.services.domain.fold import job_status
from gpuledger.services.domain.fold.job_status import QUERY_SUBJECTS
from gpuledger.services.domain.fold.ledger import Ledger, replica_spec
from gpuledger.services.domain.policy import schedules as sched
from gpuledger.services.domain.policy import submit_limits
from gpuledger.services.domain.policy.dependencies import admission_problem
from gpuledger.services.domain.policy.shapes import FleetSummary, shape_problem, summarize
from gpuledger.services.domain.policy.time_limits import TimeLimitProblem, resolved_time_limit
from gpuledger.services.domain.tooling import reads
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import AGGREGATES, NODE_SET, Step, of

STEPS: tuple[Step, ...] = (
    Step(
        "submissions",
        "the jobs submitted and not decided yet, in submission order, with what their "
        "verdicts read of other jobs (dependencies, the live jobs the submit limits count); "
        "not what is placed, started or explained of an admitted job",
        of(
            AGGREGATES["jobs"]
            - {_ev.GangRequeued, _ev.PendingReasonChanged, _ev.PreemptionDeclined},
            _ev.JobRequeued,
            _ev.GangResized,
            _ev.TimeLimitReached,
        ),
    ),
    Step(
        "classes",
        "the tenant, the priority class, its time limits and the guarantee non-preemptible "
        "work must fit; schedules read the clock only to judge a submission, so a quiet "
        "answer stays quiet",
        of(AGGREGATES["tenants"] - {_ev.FairShareUpdated}),
    ),
    Step(
        "shapes",
        "the shapes the registered fleet can hold (`FleetSummary`, by `nodes_version`)",
        of(NODE_SET, "mig"),
    ),
    Step(
        "requests",
        "invalid submissions and refused requests, answered once each",
        of("intake"),
    ),
)
"""What admission's decide reads, step by step: its quiet set is derived from it."""


class Rejection(Exception):
    def __init__(self, reason: str, message: str, **details) -> None:
        super().__init__(message)
        self.reason, self.message, self.details = reason, message, details


class Admission(LedgerService):
    name = "admission"
    query_subjects = QUERY_SUBJECTS
    serves_intake = True
    """The admission process stores CI keys' client events (services/runtime/intake.py)."""
    unaffected_by = reads.unaffected_by(STEPS)
    quiet_until_wakeup = reads.quiet_until_wakeup(STEPS)
    """Job status queries from tenant CI identities (services/domain/fold/job_status.py)."""

    @staticmethod
    def answer(state: Ledger, subject: str) -> bytes:
        return job_status.answer(state, subject)

    def __init__(self, instance: str = "0", leader_epoch: int = 0) -> None:
        super().__init__(instance, leader_epoch)
        self._fleet: tuple[int, FleetSummary | None] = (-1, None)  # memo by nodes_version

    def cache_defaults(self) -> dict:
        return {"_fleet": (-1, None)}

    def fleet_summary(self, state: Ledger) -> FleetSummary:
        if self._fleet[0] != state.nodes_version or self._fleet[1] is None:
            self._fleet = (state.nodes_version, summarize(state.nodes.values()))
        return self._fleet[1]

    def verdicts(self, state: Ledger, now_ms: int) -> dict[str, Any]:
        """Each submitted job's priority class, or its `Rejection`, judged in the order of
        submission (the submit limits count the jobs admitted before it)."""
        out: dict[str, Any] = {}
        admitted = submit_limits.Admitted()
        for job_id in sorted(state.submitted, key=lambda j: (state.jobs[j].submit_seq, j)):
            job = state.jobs[job_id]
            try:
                cls = check(state, job.client_spec, self.fleet_summary(state), now_ms)
                problem = admission_problem(state, job.spec)
                if problem is not None:
                    raise Rejection(problem[0], problem[1], **problem[2])
                over = submit_limits.problem(
                    state.config.tenants[job.tenant],
                    job.spec,
                    submit_limits.live_counts(state, job.spec),
                    admitted,
                )
                if over is not None:
                    raise Rejection(over.reason, over.message, **over.details)
            except Rejection as r:
                out[job_id] = r.with_traceback(None)  # kept: no frame, so no reference cycle
                continue
            admitted.add(job.spec)
            out[job_id] = cls
        return out

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        out: list[Event] = []
        verdicts = self.verdicts(state, now_ms) if state.submitted else {}
        for job_id in sorted(state.submitted):
            job = state.jobs[job_id]
            cls = verdicts[job_id]
            if isinstance(cls, Rejection):
                out.append(
                    self._rejected(
                        state,
                        now_ms,
                        job_id,
                        job.tenant,
                        job.submit_event_id,
                        cls.reason,
                        cls.message,
                        cls.details,
                    )
                )
                continue
            out.append(
                self.emit(
                    state,
                    now_ms,
                    JobAdmitted,
                    key=job_id,
                    correlation_id=job_id,
                    causation_id=job.submit_event_id,
                    job_id=job_id,
                    tenant=job.tenant,
                    priority_class=cls.name,
                    priority=cls.value,
                    preemptible=cls.preemptible,
                    slo_class=cls.slo_class,
                    **_time_limit_field(job.spec, cls),
                )
            )
        for job_id in sorted(state.intake.invalid_submissions):
            bad = state.intake.invalid_submissions[job_id]
            out.append(
                self._rejected(
                    state,
                    now_ms,
                    job_id,
                    bad.tenant,
                    bad.cause,
                    RejectReason.InvalidSpec,
                    bad.message,
                    copy.deepcopy(bad.details),  # the event's own, not the state's
                )
            )
        for seq in sorted(state.intake.refusals):
            out.append(self._refused(state, now_ms, seq))
        return out

    def _rejected(
        self,
        state: Ledger,
        now_ms: int,
        job_id: str,
        tenant: str,
        cause: str,
        reason: str,
        message: str,
        details: dict[str, Any],
    ) -> Event:
        """The rejection of submission `job_id` (caused by event `cause`)."""
        return self.emit(
            state,
            now_ms,
            JobRejected,
            key=job_id,
            correlation_id=job_id,
            causation_id=cause,
            job_id=job_id,
            tenant=tenant,
            reason=reason,
            message=message,
            details=details,
        )

    def _refused(self, state: Ledger, now_ms: int, seq: int) -> Event:
        """The answer to the request of stream sequence `seq` the ledger could not apply."""
        r = state.intake.refusals[seq]
        return self.emit(
            state,
            now_ms,
            RequestRefused,
            key=f"{r.job_id}@{seq}",
            correlation_id=state.filed_under(r.tenant, r.job_id),
            causation_id=r.cause,
            job_id=r.job_id,
            tenant=r.tenant,
            request=r.request,
            request_seq=seq,
            reason=r.reason,
            message=r.message,
            details=copy.deepcopy(r.details),
        )


def _time_limit_field(spec: JobSpec, cls) -> dict:
    """`{time_limit_s: ...}` for a job with a limit (its own or its class's), else nothing:
    an admission without one encodes as before the field existed."""
    if spec.is_service:
        return {}
    limit = resolved_time_limit(spec, cls)  # checked by `check` already
    return {} if limit is None else {"time_limit_s": limit}


def check(state: Ledger, spec: JobSpec, fleet: FleetSummary, now_ms: int | None = None):
    """Return the job's priority class if admissible, else raise Rejection.

    Non-preemptible work must fit its tenant's guarantee: the largest one the schedules in
    force give within `schedules.HORIZON_MS` of `now_ms` (a job that fits only later is
    admitted and waits with `QuotaScheduled`), or a stretch in which a schedule makes its
    class preemptible. Without `now_ms`, only the configuration in force counts."""
    cls = _known_class(state.config, spec)
    _check_service(spec)
    _check_array(spec)
    _check_time_limit(spec, cls)
    shape = replica_spec(spec, 0) if spec.is_service else spec  # a service: one replica's shape
    problem = shape_problem(shape, fleet, cls.allow_timeslice)
    if problem is not None:
        reason, message, details = problem
        raise Rejection(reason, message, **details)
    if not cls.preemptible:
        _check_guarantee(state.config, spec, cls, now_ms)
    return cls


def _known_class(config: Any, spec: JobSpec) -> Any:
    """The job's priority class, once its id and tenant are valid and configured."""
    try:
        validate_job_id(spec.job_id)  # no `~`: replicas' ids are `<service>~<i>`
        validate_tenant(spec.tenant)
    except InvalidId as exc:
        raise Rejection(RejectReason.InvalidSpec, str(exc)) from exc
    if spec.tenant not in config.tenants:
        known = ", ".join(sorted(config.tenants)) or "none"
        raise Rejection(
            RejectReason.UnknownTenant, f"tenant {spec.tenant!r} is not configured (known: {known})"
        )
    cls = config.classes.get(spec.priority_class)
    if cls is None:
        known = ", ".join(sorted(config.classes))
        raise Rejection(
            RejectReason.UnknownPriorityClass,
            f"priority class {spec.priority_class!r} is not configured (known: {known})",
        )
    return cls


def _check_service(spec: JobSpec) -> None:
    """A service's replicas are independent: no min_members, min_available within its
    replicas, no array (checked with arrays), no dependencies, no time limit."""
    if not spec.is_service:
        return
    if spec.min_members is not None:
        raise Rejection(
            RejectReason.InvalidSpec,
            "min_members: a service's replicas are independent "
            "(placed one at a time); leave min_members out",
        )
    if spec.min_available > spec.replicas:
        raise Rejection(
            RejectReason.InvalidSpec,
            f"min_available: must be <= replicas ({spec.replicas}), got {spec.min_available}",
        )


def _check_array(spec: JobSpec) -> None:
    """An array is not a service, has one duration per task if any, and its last task's id is
    a valid token."""
    if not spec.array:
        return
    if spec.is_service:
        raise Rejection(
            RejectReason.InvalidSpec,
            "array: a service has replicas, not tasks; leave array out",
        )
    durations = spec.array.durations_s
    if durations is not msgspec.UNSET and len(durations) != spec.array.count:
        raise Rejection(
            RejectReason.InvalidSpec,
            f"array.durations_s: one per task ({spec.array.count}), got {len(durations)}",
        )
    last = spec.array.first + spec.array.count - 1
    try:
        validate_token("task id", f"{spec.job_id}{ARRAY_SEPARATOR}{last}")
    except InvalidId as exc:
        raise Rejection(RejectReason.InvalidSpec, f"array: {exc}") from exc


def _check_time_limit(spec: JobSpec, cls: Any) -> None:
    """A service has no dependencies and no time limit; a job's limit resolves within its
    class's maximum."""
    if spec.is_service and spec.depends_on:
        raise Rejection(
            RejectReason.InvalidSpec,
            "depends_on: a service's replicas start when it is submitted; leave depends_on out",
        )
    if spec.is_service and spec.time_limit_s is not msgspec.UNSET:
        raise Rejection(
            RejectReason.InvalidSpec,
            "time_limit_s: a service runs until it is scaled down; leave time_limit_s out",
        )
    if spec.is_service:
        return
    try:
        resolved_time_limit(spec, cls)
    except TimeLimitProblem as exc:
        reason = RejectReason.TimeLimitTooLong if exc.too_long else RejectReason.InvalidSpec
        raise Rejection(
            reason,
            str(exc),
            time_limit_s=spec.time_limit_s,
            max_time_limit_s=cls.max_time_limit_s or None,
        ) from exc


def _check_guarantee(config: Any, spec: JobSpec, cls: Any, now_ms: int | None) -> None:
    """Non-preemptible work fits its tenant's guarantee, now or under a schedule within the
    horizon (see `check`)."""
    guaranteed = config.tenants[spec.tenant].guaranteed_gpu_milli
    need = spec.resources.gpu_milli_total() * (
        spec.replicas if spec.is_service else spec.members_min()
    )
    if need <= guaranteed:
        return
    stretches = (
        sched.outlook(config, spec.tenant, cls.name, now_ms)
        if now_ms is not None and config.schedules
        else []
    )
    if sched.first_fit(stretches, need) is not None:
        return
    most = max((s.guaranteed_gpu_milli for s in stretches), default=guaranteed)
    later = (
        f" (and at most {most / 1000:g} under its schedules in the next "
        f"{sched.HORIZON_MS // 86_400_000} days)"
        if len(stretches) > 1
        else ""
    )
    raise Rejection(
        RejectReason.NonPreemptibleOverQuota,
        f"non-preemptible class {cls.name!r} needs {need / 1000:g} GPUs; tenant "
        f"{spec.tenant} is guaranteed {guaranteed / 1000:g}{later}",
        need_gpu_milli=need,
        guaranteed_gpu_milli=guaranteed,
    )
