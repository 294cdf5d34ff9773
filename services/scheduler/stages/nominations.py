"""Stage `nominations`: capacity freed by preemption is kept for its beneficiaries until the
nomination expires. Beneficiaries share it among themselves in queue order (tentative
allocations keep them apart), so two whose victims shared a node never lock each other out;
but a beneficiary does not take another's nodes where it has no victim of its own. An
exclusion only (no pending reason of its own); it binds a grow too."""

from __future__ import annotations

from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.scheduler.round import Limits, PlacedOr, Round
from gpuledger.services.scheduler.stage import Stage


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """Nodes nominated for other jobs not placed in this decide."""
    state, now_ms = rnd.state, rnd.now_ms
    out = state.nominated_nodes(except_jobs=PlacedOr(rnd.placed, job.job_id), now_ms=now_ms)
    if job.job_id in state.nominations:
        out = out - state.nominated_nodes(
            except_jobs=frozenset(state.nominations) - {job.job_id}, now_ms=now_ms
        )
    return out


def wakeup(state: Ledger, now_ms: int) -> list[int]:
    """When a nomination expires."""
    if not state.nominations:
        return []
    return [
        t
        for b in state.nominations
        if (t := state.nomination_expires_ms(b)) is not None and t > now_ms
    ]


STAGE = Stage(
    "nominations",
    __doc__ or "",
    exclude=exclude,
    wakeup=wakeup,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, "allocations"),
)
