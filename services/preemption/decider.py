"""Preemption: for each blocked job (the scheduler recorded a capacity reason), request the
eviction of the smallest sufficient victim set, or record why not.

A job whose nominated capacity is still being released gets nothing new; victims chosen for
one job in a call are not offered to the next. Refusals are emitted only when their reason
changes, so repeated cycles do not flood the log.
"""

from __future__ import annotations

from events import Event, PreemptionDeclined, PreemptionRequested
from services.domain.deciding import LedgerService
from services.domain.ledger import Ledger
from services.placement import Placement
from services.preemption.victims import plan
from services.scheduler.queue import ordered_pending

BLOCKED = frozenset(
    {"Resources", "GangIncomplete", "TopologyUnsatisfiable", "MIGPlacementUnavailable", "IsolationConflict"}
)


class Preemption(LedgerService):
    name = "preemption"

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        policy = state.config.policy
        out: list[Event] = []
        taken: set[str] = set()
        for job in ordered_pending(state, now_ms):
            if job.reason not in BLOCKED or job.cancel_requested:
                continue
            inflight = [
                a for a in state.nominations.get(job.job_id, ())
                if not state.allocations[a].ended
            ]
            if inflight:
                continue
            if state.preemption_memo.get(job.job_id) == state.allocation_version:
                continue
            if not policy.preemption:
                out += self._decline(state, now_ms, job, "PreemptionDisabled",
                                     "preemption is disabled by policy", {})
                continue
            request = state.gang_request(job)
            now_fits = state.fleet.place(
                request, policy.placement_policy,
                exclude=state.nominated_nodes(except_jobs={job.job_id}),
            )
            if isinstance(now_fits, Placement):
                continue  # idle capacity will do; the scheduler places it
            p = plan(state, job, now_ms, taken)
            if p.declined is not None:
                state.preemption_memo[job.job_id] = state.allocation_version
                out += self._decline(state, now_ms, job, p.declined[0], p.declined[1], p.details())
                continue
            details = p.details()
            victims = ", ".join(c.victim.job_id for c in p.victims)
            freed = sum(c.rec.gpu_milli for c in p.victims) / 1000
            for c in p.victims:
                taken.add(c.rec.allocation_id)
                grace = state.config.grace_ms(c.victim.spec.checkpoint.grace_s, c.victim.spec.priority_class)
                out.append(
                    self.emit(
                        state, now_ms, PreemptionRequested, key=c.rec.allocation_id,
                        correlation_id=c.victim.job_id, job_id=c.victim.job_id,
                        allocation_id=c.rec.allocation_id, beneficiary=job.job_id, reason=c.reason,
                        deadline_ms=now_ms + grace,
                        message=(
                            f"{c.reason}: {job.job_id} (priority {job.priority}, tenant {job.tenant}) "
                            f"needs {job.gpu_milli() / 1000:g} GPUs; evicting {victims} frees {freed:g}"
                        ),
                        details=details,
                    )
                )
        return out

    def _decline(self, state: Ledger, now_ms: int, job, reason: str, message: str, details) -> list[Event]:
        if job.declined == reason:
            return []
        return [
            self.emit(
                state, now_ms, PreemptionDeclined,
                key=f"{job.job_id}:{reason}:{job.pending_changes}:{len(job.preemptions)}",
                correlation_id=job.job_id, job_id=job.job_id, reason=reason, message=message,
                details=details,
            )
        ]
