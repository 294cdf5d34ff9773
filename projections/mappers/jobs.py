"""Event -> row handlers of jobs: submission, admission, refusals, scaling, cancellation, pending reasons."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.events.ids import tenant_job_key
from gpuledger.events.reasons import TERMINAL_STATES as TERMINAL
from gpuledger.events.reasons import JobState, RequestReason
from gpuledger.projections.mappers.rows import (
    JobRow,
    _dumps,
)
from gpuledger.projections.mappers.state import ProjectionState
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side


class JobMappers(ProjectionState):
    """The `jobs` rows from the intake's and the scheduler's job events."""

    # -------------------------------------------------------------- handlers: jobs

    def _submitted(self, seq: int, e: ev.JobSubmitted) -> None:
        spec = e.job
        key = self._key_of(e) or spec.job_id
        existing = self.jobs.get(key)
        if existing is not None and existing.submitted_at_ms is not None:
            return  # a retried submission: first one wins
        res = spec.resources
        job = existing or JobRow(job_id=key, state=JobState.submitted)
        job.tenant = spec.tenant
        job.user = spec.submitter
        job.priority_class = spec.priority_class
        job.replicas = spec.replicas
        job.min_members = spec.members_min()
        job.member_gpus = res.gpus
        job.member_gpu_milli = res.gpu_milli
        job.member_mig_profile = res.mig_profile
        job.gpu_models = list(res.gpu_models)
        job.min_gpu_memory_mib = res.min_gpu_memory_mib
        job.gpu_milli = res.gpu_milli_total() * spec.replicas
        job.duration_s = spec.duration_s
        job.submitted_at_ms = e.occurred_at_ms
        self.jobs[key] = job
        if existing is None:
            self._add_transition(
                seq,
                e.occurred_at_ms,
                job.job_id,
                job.tenant,
                None,
                JobState.submitted,
                "JobSubmitted",
                None,
            )
        self._touch(job, seq, e.occurred_at_ms)

    def _admitted(self, seq: int, e: ev.JobAdmitted) -> None:
        job = self._job(e.job_id, e.tenant)
        if job.state != JobState.submitted:
            return
        job.priority_class = e.priority_class
        job.priority = e.priority
        job.preemptible = e.preemptible
        job.slo_class = e.slo_class
        job.admitted_at_ms = job.pending_since_ms = e.occurred_at_ms
        self._transition(job, seq, e, None)
        self._touch(job, seq, e.occurred_at_ms)
        svc = self.ledger.jobs.get(e.job_id)
        if svc is not None and (svc.spec.is_service or svc.spec.array):  # runs as its replicas
            self._sync_replicas(e.job_id, seq, e)  # (or tasks)

    def _priority_changed(self, seq: int, e: ev.JobPriorityChanged) -> None:
        """`gpuledger update`: the row's priority (and class, after `--class`) as folded."""
        key = self.ledger.job_key(e.tenant, e.job_id)
        rec = None if key is None else self.ledger.jobs.get(key)
        job = None if key is None else self.jobs.get(key)
        if rec is None or job is None:
            return
        job.priority, job.priority_class = rec.priority, rec.spec.priority_class
        job.preemptible, job.slo_class = rec.preemptible, rec.slo_class
        self._touch(job, seq, e.occurred_at_ms)

    def _request_refused(self, seq: int, e: ev.RequestRefused) -> None:
        """A submission refused while job ids were global created no job (the fold undid
        it: `Ledger.refused_creation`): neither does its row."""
        if e.request != "JobSubmitted" or e.reason != RequestReason.JobIdConflict:
            return
        key = tenant_job_key(e.tenant, e.job_id)
        row = self.jobs.get(key)
        if row is not None and key not in self.ledger.jobs and row.state == JobState.submitted:
            del self.jobs[key]
            self.batch.delete("jobs", (key,))

    def _scaled(self, seq: int, e: ev.ServiceScaled) -> None:
        key = self._key_of(e) or e.job_id
        job = self.jobs.get(key)
        if job is not None:
            job.replicas = e.replicas
            job.gpu_milli = self.ledger.jobs[key].spec.resources.gpu_milli_total() * e.replicas
            self._touch(job, seq, e.occurred_at_ms)
        self._sync_replicas(key, seq, e)

    def _sync_replicas(self, service_id: str, seq: int, e: ev.Event) -> None:
        """Rows of a service's replicas (or an array job's released tasks) as the services'
        fold has them after `e`: created when queued, queued again or cancelled when the
        service is scaled (or the service or array cancelled)."""
        parent = self.ledger.jobs.get(service_id)
        records = (
            self.ledger.tasks_of(service_id)
            if parent is not None and parent.spec.array
            else self.ledger.replicas_of(service_id)
        )
        for rec in records:
            self._follow_child(rec, seq, e)

    def _released_rows(self, seq: int, e: ev.Event) -> None:
        """Rows of the array tasks the fold released on `e` (services/domain/fold/arrays.py:
        an array's rows follow its window; an unreleased task has none), and the arrays'
        counts on their rows."""
        parents: dict[str, None] = {}
        for task_id in self.ledger.released_tasks:
            rec = self.ledger.jobs[task_id]
            self._follow_child(rec, seq, e)
            parents[rec.array_parent or ""] = None
        for parent in parents:
            self._array_counts(parent, seq, e)

    def _array_counts(self, array_id: str, seq: int, e: ev.Event) -> None:
        """The array's tasks counted on its row (`details.array`: the fold's counts, which
        include the tasks not released yet: `jobs`' and `users`' counts read them)."""
        row = self.jobs.get(array_id)
        rec = self.ledger.jobs.get(array_id)
        if row is None or rec is None or not rec.spec.array or rec.admitted_ms is None:
            return  # (a rejected array's details are its rejection's)
        counts = {
            "tasks": rec.spec.array.count,
            "first": rec.spec.array.first,
            "running": rec.tasks_up,
            "unreleased": rec.window.unreleased if rec.window is not None else 0,
            "ended": dict(sorted(rec.tasks_ended.items())),
        }
        text = _dumps({"array": counts})
        if row.details != text:
            row.details = text
            self._touch(row, seq, e.occurred_at_ms)

    def _follow_child(self, rec, seq: int, e: ev.Event) -> None:
        """A replica's or task's row as the fold has it after `e`: created when queued,
        queued again or cancelled."""
        row = self.jobs.get(rec.job_id)
        if row is None:
            spec, res = rec.spec, rec.spec.resources
            row = JobRow(
                job_id=rec.job_id,
                tenant=rec.tenant,
                user=spec.submitter,
                state=JobState.submitted,
                priority_class=spec.priority_class,
                priority=rec.priority,
                preemptible=rec.preemptible,
                slo_class=rec.slo_class,
                replicas=1,
                min_members=1,
                member_gpus=res.gpus,
                member_gpu_milli=res.gpu_milli,
                member_mig_profile=res.mig_profile,
                gpu_models=list(res.gpu_models),
                min_gpu_memory_mib=res.min_gpu_memory_mib,
                gpu_milli=res.gpu_milli_total(),
                duration_s=spec.duration_s,
                submitted_at_ms=rec.submitted_ms,
                admitted_at_ms=rec.admitted_ms,
            )
            self.jobs[rec.job_id] = row
        state = rec.state
        if state in (JobState.pending, JobState.cancelled) and row.state != state:
            if state == JobState.pending:
                row.pending_since_ms, row.finished_at_ms = rec.pending_since_ms, None
                row.cancel_requested, row.reason, row.message = False, None, None
            else:
                row.finished_at_ms = e.occurred_at_ms
                row.reason = rec.reason
            self._transition(row, seq, e, rec.reason)
            self._touch(row, seq, e.occurred_at_ms)
        elif rec.cancel_requested and not row.cancel_requested:
            row.cancel_requested, row.reason = True, rec.reason
            self._touch(row, seq, e.occurred_at_ms)

    def _rejected(self, seq: int, e: ev.JobRejected) -> None:
        job = self._job(e.job_id, e.tenant)
        if job.state in TERMINAL:
            return
        job.reason, job.message, job.details = e.reason, e.message, _dumps(e.details)
        job.finished_at_ms = e.occurred_at_ms
        self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)

    def _cancelled(self, seq: int, e: ev.JobCancelled) -> None:
        key = self._key_of(e) or e.job_id
        job = self.jobs.get(key)
        if job is None or job.tenant != e.tenant or job.state in TERMINAL:
            return  # refused as the ledger refuses it (`RequestRefused`, UnknownJob): no row
        job.cancel_requested = True
        job.reason, job.message = e.reason, "cancelled by the client"
        if job.allocation_id is None:  # nothing placed: it ends at once
            job.finished_at_ms = e.occurred_at_ms
            self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)
        self._sync_replicas(key, seq, e)

    def _withdrawn(self, seq: int, e: ev.JobWithdrawn) -> None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state != JobState.pending:
            return  # refused as the ledger refuses it
        job.reason, job.message, job.details = e.reason, e.message, _dumps(e.details or {})
        job.finished_at_ms = e.occurred_at_ms
        self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)

    def _pending_reason(self, seq: int, e: ev.PendingReasonChanged) -> None:
        job = self._job(e.job_id)
        details = e.details or {}
        qp = details.get("queue_position")
        help_ = details.get("preemption_would_help")
        self._add_pending(
            seq,
            e.occurred_at_ms,
            e.job_id,
            job.tenant,
            e.reason,
            e.message,
            _dumps(details),
            qp if isinstance(qp, int) and not isinstance(qp, bool) else None,
            help_ if isinstance(help_, bool) else None,
        )
        if job.state in TERMINAL:
            return
        job.reason, job.message, job.details = e.reason, e.message, _dumps(details)
        self._touch(job, seq, e.occurred_at_ms)
