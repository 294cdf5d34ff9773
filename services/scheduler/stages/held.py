"""Stage `held`: a job held by its tenant or the operator (`JobHeld`, events/control.py)
stays pending with reason `Held` until released; it is not placed, nominated or reserved
for. A gate, first in the table: a held job is told nothing else."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stage import Stage


def gate(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """None for a job that is not held; else its `Held` reason (once)."""
    hold = job.hold
    if hold is None:
        return None
    message = f"held by {hold.actor}" + (f": {hold.reason}" if hold.reason else "")
    details = {"actor": hold.actor, "held_at_ms": hold.at_ms, "queue_position": lim.position}
    return rnd.pending(job, PendingReason.Held, message, details)


STAGE = Stage(
    "held",
    __doc__ or "",
    reasons=(PendingReason.Held,),
    gate=gate,
    reads=of(ADMITTED_JOBS),
)
