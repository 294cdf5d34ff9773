"""The operator's controls a Slurm site shows at export, as a Slurm import's head events:
node states from sinfo's state column (`--node-states`: `slurm_node_states`) and
maintenance reservations (`--reservations FILE`: `slurm_reservations`). Both are read before
the dump (a bad file costs no work) and written after the nodes, at the trace's first event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

from gpuledger import events as ev
from gpuledger.replay.importers.common import SkipLog, TraceImportError
from gpuledger.replay.importers.slurm_node_states import NodeStates, read_node_states
from gpuledger.replay.importers.slurm_reservations import Reservations, read_reservations


@dataclass
class SiteControls:
    states: NodeStates | None = None
    reservations: Reservations | None = None

    @classmethod
    def read(
        cls,
        sinfo: str | Path | None,
        node_states: bool,
        reservations: str | Path | None,
        tz: ZoneInfo,
        tenant_from: str,
        tenant_for: Callable[[str], str],
    ) -> SiteControls:
        """Both files, read (before the dump); a reservation's tenant named as its jobs'."""
        if node_states and sinfo is None:
            raise TraceImportError("--node-states reads the state column of --sinfo FILE")
        held = read_reservations(reservations, tz) if reservations is not None else None
        if held is not None:
            held.hold_for(tenant_from, tenant_for)
        return cls(read_node_states(sinfo) if node_states and sinfo is not None else None, held)

    def events(
        self, nodes: tuple[ev.NodeInfo, ...], producer: str, at_ms: int, skips: SkipLog
    ) -> list[ev.Event]:
        """Cordons, then windows, at `at_ms` (after the nodes' `NodeRegistered`)."""
        known = [n.name for n in nodes]
        out: list[ev.Event] = []
        if self.states is not None:
            out += self.states.events(set(known), producer, at_ms, skips)
        if self.reservations is not None:
            out += self.reservations.events(known, producer, at_ms, skips)
        return out

    def summary(self) -> dict[str, int]:
        return {
            **(self.states.summary() if self.states is not None else {}),
            **(self.reservations.summary() if self.reservations is not None else {}),
        }
