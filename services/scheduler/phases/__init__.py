"""The scheduler's decide as data: `PHASES`, in order; a decide returns the events of the
first phase that has any (see `phase.Phase`)."""

from __future__ import annotations

from gpuledger.services.scheduler.phase import Phase
from gpuledger.services.scheduler.phases import (
    grow,
    lost_nodes,
    place,
    settle,
    start_timeout,
    time_limits,
)

PHASES: tuple[Phase, ...] = (
    lost_nodes.PHASE,
    start_timeout.PHASE,
    time_limits.PHASE,
    settle.PHASE,
    place.PHASE,
    grow.PHASE,
)
