"""Scheduler: declares silent nodes lost, settles allocations whose members have exited,
and places pending gangs atomically in queue order.

Level-triggered: every call looks at the ledger afresh. The decide is the ordered table of
phases (`phases.PHASES`: lost nodes, start timeouts, time limits, settling, placement, grow);
the first phase with events answers, so placement always sees the capacity settling
released. Placement and grow run the ordered table of stages (`stages.STAGES`). Within one
call, tentative allocations go to a copy-on-write `TrialFleet` that is dropped on return, so
`decide` never writes the folded state.
"""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events import catalog as ev
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.scheduler.phases import PHASES
from gpuledger.services.scheduler.stages import STAGES


class Scheduler(LedgerService):
    name = "scheduler"
    # reads nearly everything; queue order and pending reasons also move with the clock
    # (decayed usage), so it is asked at every instant. A heartbeat only postpones a node's
    # loss (its wake-up); one that revives a lost node changes `nodes_version`, which counts.
    unaffected_by = frozenset(
        {
            ev.JobSubmitted,
            ev.JobRejected,
            ev.GpuMetricsReported,
            ev.RequestRefused,
            ev.DeadLettered,
            ev.NodeHeartbeat,
        }
    )

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        for phase in PHASES:
            out = phase.run(self, state, now_ms)
            if out:
                return out
        return []

    def next_wakeup_ms(self, state: Ledger, now_ms: int) -> int | None:
        # asked at every instant: each source is read only when it has entries
        times: list[int] = []
        for unit in (*PHASES, *STAGES):
            if unit.wakeup is not None:
                times += unit.wakeup(state, now_ms)
        return min(times, default=None)
