"""The disruption budget a drain honours (Kubernetes' PodDisruptionBudget for `kubectl
drain`): a job's `min_available` (`JobSpec.min_available`, events/specs.py).

- A service's replica leaves a draining node only while the service keeps at least
  `min_available` replicas running without it: replicas being preempted, and those this
  drain pass already asked to leave, are not running. The next one waits until an evicted
  replica runs again elsewhere (an allocation event, which wakes the preemption service).
- A gang with `min_available` does not leave: evicting a member evicts the gang, which would
  leave 0 of its members running (the same rule as preemption's `disruption_budget`).

The budget holds only a drain that waits anyway; `--force`, a passed `--deadline` and a
maintenance window in force (its start is its deadline) evict regardless. Pure.
"""

from __future__ import annotations

from gpuledger.services.domain.fold.ledger import AllocationRecord, Ledger


def running_replicas(state: Ledger, service: str, leaving: set[str]) -> int:
    """Replicas of `service` with an active allocation not being preempted nor in `leaving`."""
    up = 0
    for r in state.replicas_of(service):
        rec = state.allocations.get(r.allocation_id) if r.allocation_id is not None else None
        if rec is not None and not rec.ended and rec.preemption is None:
            up += rec.allocation_id not in leaving
    return up


def holds_back(state: Ledger, rec: AllocationRecord, leaving: set[str]) -> str | None:
    """Why the run `rec` may not leave now (None: it may), `leaving` being the allocations
    this pass has already asked to leave."""
    job = state.jobs.get(rec.job_id)
    if job is None:
        return None
    if job.service is not None:
        keep = state.jobs[job.service].spec.min_available
        if not keep:
            return None
        up = running_replicas(state, job.service, leaving)
        if up - 1 >= keep:
            return None
        return (
            f"service {job.service} keeps min_available {keep}: {up} of its replicas run, "
            f"evicting {rec.job_id} would leave {up - 1}"
        )
    keep = job.spec.min_available
    if not keep:
        return None
    n = len(rec.members)
    return (
        f"gang {rec.job_id} keeps min_available {keep} of {n} members: evicting it would "
        f"leave 0 running"
    )
