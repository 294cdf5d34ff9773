"""Given a ledger, a `Round` of the scheduler at `now_ms` and a job's fresh `Limits`: what a
stage's functions read (the stage tests call them directly, then check the decide)."""

from __future__ import annotations

from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stages import STAGES


def round_at(ledger: Ledger, now_ms: int) -> Round:
    return Round.start(Scheduler(), ledger, now_ms)


def limits(rnd: Round, job_id: str) -> Limits:
    """The job's limits after every exclusion of the table (as the place phase builds them)."""
    job = rnd.state.jobs[job_id]
    lim = Limits(need=job.spec.resources.gpu_milli_total() * job.spec.members_min())
    for s in STAGES:
        if s.exclude is not None:
            lim.excluded[s.name] = s.exclude(rnd, job, lim)
    return lim
