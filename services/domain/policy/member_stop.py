"""The one rule for stopping a member, shared by the simulated agent
(services/node_agent/simulated.py) and the real one (services/node_agent/decider.py). Pure.

A member of an allocation is asked to stop, in this order of precedence:

1. its allocation *ended* while it runs (evicted because another member's node was lost, a
   start timeout, ...): outcome `preempted`, nothing to save, gone by the end + the job's grace;
2. its job is *cancelled*: outcome `cancelled`, nothing to save (the job will not resume), gone
   by the cancellation + the job's grace;
3. a *preemption* names it (the whole gang's, or a partial one of an elastic gang): outcome
   `preempted`, a checkpoint taking the job's `save_s`, gone by the preemption's deadline;
4. its run reached the job's *time limit*: the same, by the time limit's deadline.

Otherwise it may run on: a silent control plane, or an allocation the log does not know, never
stops anything. A member asked to stop before it started exits with the outcome without
starting. Each agent applies the rule its own way: the real agent signals the process at once
(SIGTERM, the checkpoint signal) and kills it at the deadline; a simulated member saves for
`save_ms` and exits then, or at the deadline when saving would overrun it (work lost), so a
simulated member with nothing to save exits at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENDED, CANCELLED, PREEMPTED, TIME_LIMIT = "ended", "cancelled", "preempted", "time_limit"


@dataclass(frozen=True)
class Stop:
    """Why and by when a member must stop."""

    kind: str
    """`ended`, `cancelled`, `preempted` or `time_limit` (the rule that applies)."""
    outcome: str
    """The `MemberExited` outcome it ends with: `cancelled` or `preempted`."""
    asked_ms: int | None
    """When it was asked (None: when the agent sees it; the simulated agent reacts at once)."""
    save_ms: int
    """How long saving a checkpoint takes (0: nothing to save)."""
    deadline_ms: int | None
    """When it must be gone (None: not known yet, so it may run on for now)."""


def grace_ms(ledger: Any, job: Any) -> int:
    """The job's checkpoint grace (its own, else its class's, else the policy default)."""
    if job is None:
        return int(ledger.config.policy.default_grace_s) * 1000
    return int(ledger.config.grace_ms(job.spec.checkpoint.grace_s, job.spec.priority_class))


def member_stop(
    ledger: Any,
    rec: Any,
    job: Any,
    rank: int,
    *,
    ended_ms: int | None = None,
    cancelled_ms: int | None = None,
) -> Stop | None:
    """The stop that applies to member `rank` of allocation `rec` (job `job`, may be None), or
    None when it may run on. `ended_ms` / `cancelled_ms`: when the agent folded the end of the
    allocation / the cancellation (the grace runs from then; None: not known)."""
    if rec.ended:
        return Stop(
            ENDED,
            PREEMPTED,
            ended_ms,
            0,
            None if ended_ms is None else ended_ms + grace_ms(ledger, job),
        )
    if job is not None and job.cancel_requested:
        return Stop(
            CANCELLED,
            CANCELLED,
            cancelled_ms,
            0,
            None if cancelled_ms is None else cancelled_ms + grace_ms(ledger, job),
        )
    save_ms = 0 if job is None else job.spec.checkpoint.save_s * 1000
    if rec.preempts(rank):
        p = rec.preemption
        return Stop(PREEMPTED, PREEMPTED, p.occurred_at_ms, save_ms, p.deadline_ms)
    if rec.time_limit is not None:
        t = rec.time_limit
        return Stop(TIME_LIMIT, PREEMPTED, t.occurred_at_ms, save_ms, t.deadline_ms)
    return None
