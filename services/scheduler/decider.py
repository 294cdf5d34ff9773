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
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.tooling import reads
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.scheduler.phases import PHASES
from gpuledger.services.scheduler.stages import STAGES


class Scheduler(LedgerService):
    name = "scheduler"
    # derived from what its phases and stages read (`services.domain.tooling.reads`):
    # a quiet decide is asked again only after an event some unit reads is folded; the
    # placement pass reads the clock (queue order), so it is asked at every instant too
    unaffected_by = reads.unaffected_by((*PHASES, *STAGES))
    quiet_until_wakeup = reads.quiet_until_wakeup((*PHASES, *STAGES))

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
