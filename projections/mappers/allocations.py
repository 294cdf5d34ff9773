"""Event -> row handlers of allocations: placement, members, preemption, resizing, eviction, the end of a run."""

from __future__ import annotations

import msgspec

from gpuledger import events as ev
from gpuledger.events.reasons import TERMINAL_STATES as TERMINAL
from gpuledger.events.reasons import EvictReason, JobState
from gpuledger.projections.mappers.rows import (
    _NO_GPU,
    AllocationRow,
    PreemptionRow,
    Row,
    _dumps,
)
from gpuledger.projections.mappers.state import ProjectionState, _mig_milli
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side
from gpuledger.services.domain.fold.ledger import run_end_state


class AllocationMappers(ProjectionState):
    """The `allocations` and `preemptions` rows (and the jobs they move)."""

    def _placed(self, seq: int, e: ev.GangPlaced) -> None:
        job = self._job(e.job_id, e.tenant)
        if job.state in TERMINAL or e.allocation_id in self.open_allocs:
            return
        job.attempts = (job.attempts or 0) + 1
        job.allocation_id = e.allocation_id
        if job.first_placed_at_ms is None:
            job.first_placed_at_ms = e.occurred_at_ms
        job.placed_at_ms = e.occurred_at_ms
        job.reason = job.message = job.details = None
        attempt_s = e.allocation_id.rpartition("#")[2]
        attempt = int(attempt_s) if attempt_s.isdigit() else job.attempts
        ranks: dict[int, Row] = {}
        self._member_rows(
            seq,
            e.allocation_id,
            e.job_id,
            e.tenant or job.tenant,
            attempt,
            e.borrowing,
            e.members,
            e.occurred_at_ms,
            ranks,
        )
        self.open_allocs[e.allocation_id] = ranks
        self._transition(job, seq, e, None)
        self._touch(job, seq, e.occurred_at_ms)

    def _member_rows(
        self,
        seq: int,
        alloc_id: str,
        job_id: str,
        tenant: str,
        attempt: int,
        borrowing: bool,
        members,
        at: int,
        ranks: dict[int, Row],
    ) -> None:
        """One allocation row per member of `members` (per GPU index), into `ranks`."""
        gpus, ups, new_row = self.gpus, self._up_allocs, AllocationRow.new
        for m in members:
            rank, node, mig = m.rank, m.node, m.mig_profile
            if not m.gpus:
                sharing, milli, indices = "none", 0, (-1,)
            elif mig:
                sharing, milli, indices = "mig", _mig_milli(mig), m.gpus
            elif m.gpu_milli:
                sharing, milli, indices = "milli", m.gpu_milli, m.gpus
            else:
                sharing, milli, indices = "exclusive", 1000, m.gpus
            found = [gpus.get((node, idx)) for idx in indices]
            if None in found:  # GPUs the projection has not seen registered
                found = [g or _NO_GPU for g in found]
            ranks[rank] = ups[(alloc_id, rank, seq)] = new_row(  # AllocationRow.COLUMNS, in order
                alloc_id,
                job_id,
                tenant,
                attempt,
                rank,
                node,
                tuple(indices),  # (the same tuple when the event's is one)
                tuple([g.uuid for g in found]),
                tuple([g.model for g in found]),
                tuple([g.clique for g in found]),
                sharing,
                milli,
                mig,
                m.mig_start,
                borrowing,
                seq,
                at,
                None,  # started_at_ms
                None,  # ended_at_ms
                None,  # end_reason
            )

    def _member_started(self, seq: int, e: ev.MemberStarted) -> None:
        ranks = self.open_allocs.get(e.allocation_id)
        r = ranks.get(e.rank) if ranks else None
        if r is not None and r.started_at_ms is None:
            r.started_at_ms = e.occurred_at_ms
            self._up_allocs[(r.allocation_id, r.rank, r.placed_seq)] = r

    def _member_checkpointed(self, seq: int, e: ev.MemberCheckpointed) -> None:
        p = self.open_preemptions.get(e.allocation_id)
        if p is not None and p.checkpointed_at_ms is None:
            p.checkpointed_at_ms = e.occurred_at_ms
            self.batch.upsert(p)
        job = self.jobs.get(e.job_id)
        if job is not None and e.progress_ms and e.progress_ms > (job.progress_ms or 0):
            job.progress_ms = e.progress_ms
            self._touch(job, seq, e.occurred_at_ms)

    def _member_exited(self, seq: int, e: ev.MemberExited) -> None:
        ranks = self.open_allocs.get(e.allocation_id)
        if not ranks:
            return
        r = ranks.pop(e.rank, None)
        if r is not None and r.ended_at_ms is None:
            r.ended_at_ms = e.occurred_at_ms
            r.end_reason = e.outcome
            self._up_allocs[(r.allocation_id, r.rank, r.placed_seq)] = r
        if not ranks:
            del self.open_allocs[e.allocation_id]

    def _preemption_requested(self, seq: int, e: ev.PreemptionRequested) -> None:
        job = self._job(e.job_id)
        ben = self.jobs.get(e.beneficiary)
        if e.allocation_id in self.open_preemptions:
            return  # already being preempted: the first request stands
        p = PreemptionRow(
            request_seq=seq,
            requested_at_ms=e.occurred_at_ms,
            victim_job_id=e.job_id,
            victim_tenant=job.tenant,
            victim_priority=job.priority,
            allocation_id=e.allocation_id,
            beneficiary=e.beneficiary,
            beneficiary_tenant=ben.tenant if ben is not None else None,
            beneficiary_priority=ben.priority if ben is not None else None,
            reason=e.reason,
            message=e.message,
            deadline_ms=e.deadline_ms,
            details=_dumps(e.details or {}),
            outcome="requested",
        )
        self.open_preemptions[e.allocation_id] = p
        self.batch.upsert(p)
        if isinstance(e.ranks, tuple):
            return  # an elastic gang giving up members keeps running
        if job.state == JobState.running and job.allocation_id == e.allocation_id:
            self._transition(job, seq, e, e.reason)
            self._touch(job, seq, e.occurred_at_ms)

    def _resized(self, seq: int, e: ev.GangResized) -> None:
        """An elastic gang shrank: its partial preemption ends with outcome `shrunk` (the
        leavers' allocation rows were closed by their `MemberExited`)."""
        job = self.jobs.get(e.job_id)
        if e.to_members > e.from_members:  # a grow: rows for the members added
            ranks = self.open_allocs.get(e.allocation_id)
            if ranks is None or job is None:
                return
            first = next(iter(ranks.values()), None)
            attempt = first.attempt if first is not None else (job.attempts or 1)
            borrowing = bool(first.borrowing) if first is not None else False
            added = e.members[e.from_members :]
            self._member_rows(
                seq,
                e.allocation_id,
                e.job_id,
                job.tenant,
                attempt,
                borrowing,
                added,
                e.occurred_at_ms,
                ranks,
            )
            self._touch(job, seq, e.occurred_at_ms)
            return
        p = self._preemption_ended(e, "shrunk")
        if p is not None:
            details = msgspec.json.decode(p.details) if p.details else {}
            details["resized"] = {"from": e.from_members, "to": e.to_members}
            p.details = _dumps(details)
            self.batch.upsert(p)
        if job is not None:
            self._touch(job, seq, e.occurred_at_ms)

    def _preemption_ended(self, e: ev.GangEvicted | ev.GangResized, outcome: str) -> Row | None:
        """The allocation's open preemption, closed by `e` with `outcome` (`evicted`,
        `shrunk`) and not yet upserted; None when none was open."""
        p = self.open_preemptions.pop(e.allocation_id, None)
        if p is not None:
            p.evicted_at_ms = p.ended_at_ms = e.occurred_at_ms
            p.eviction_reason = e.reason
            p.checkpointed = e.checkpointed
            p.lost_gpu_ms = e.lost_gpu_ms
            p.outcome = outcome
        return p

    def _release(self, job: Row | None, allocation_id: str) -> None:
        if job is not None and job.allocation_id == allocation_id:
            job.allocation_id = None

    def _stopped_run(self, e: ev.GangEvicted | ev.GangCompleted | ev.GangFailed) -> Row | None:
        """The job of a run that stopped, its allocation released; None when there is no such
        job or it has already finished (nothing more to show)."""
        job = self.jobs.get(e.job_id)
        if job is None:
            return None
        self._release(job, e.allocation_id)
        return None if job.state in TERMINAL else job

    def _evicted(self, seq: int, e: ev.GangEvicted) -> None:
        self._close_alloc(e.allocation_id, e.occurred_at_ms, "evicted:" + e.reason)
        self._drained(e.allocation_id)
        p = self._preemption_ended(e, "evicted")
        if p is not None:
            p.progress_ms = e.progress_ms
            self.batch.upsert(p)
        job = self._stopped_run(e)
        if job is None:
            return
        job.progress_ms = e.progress_ms
        if e.reason in (EvictReason.Cancelled, EvictReason.ScaledDown) or job.cancel_requested:
            job.finished_at_ms = e.occurred_at_ms
            self._transition(job, seq, e, e.reason)
        else:
            job.preemptions = (job.preemptions or 0) + 1
            job.reason = e.reason
            job.message = (
                f"evicted from {e.allocation_id}"
                + (f" for {e.preempted_by}" if e.preempted_by else "")
                + f"; lost {e.lost_gpu_ms / 1000:.0f} GPU-s"
            )
            job.details = None
            job.pending_since_ms = e.occurred_at_ms
            self._transition(job, seq, e, e.reason)
        self._touch(job, seq, e.occurred_at_ms)
        rec = self.ledger.jobs.get(e.job_id)
        if rec is not None and rec.service is not None:  # scaled up again while it stopped
            self._sync_replicas(rec.service, seq, e)

    def _requeued(self, seq: int, e: ev.GangRequeued) -> None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state in TERMINAL or job.allocation_id is not None:
            return
        job.pending_since_ms = e.occurred_at_ms
        self._transition(job, seq, e, "Requeued")
        self._touch(job, seq, e.occurred_at_ms)

    def _ended(self, seq: int, e: ev.GangCompleted | ev.GangFailed) -> None:
        """A run ended: its allocation rows and open preemption close with the run's outcome
        (the fold's `run_end_state`); the job moves to its folded state."""
        self._drained(e.allocation_id)
        outcome = run_end_state(e)
        self._close_alloc(e.allocation_id, e.occurred_at_ms, outcome)
        self._end_preemption(e.allocation_id, e.occurred_at_ms, outcome)
        job = self._stopped_run(e)
        if job is None:
            return
        job.finished_at_ms = e.occurred_at_ms
        if isinstance(e, ev.GangFailed):
            job.reason, job.message = e.reason, e.message
        else:
            job.reason = job.message = job.details = None
        self._transition(job, seq, e, getattr(e, "reason", None))
        self._touch(job, seq, e.occurred_at_ms)
