"""The in-process shell: a discrete-event loop with a virtual clock that routes events among
the same deciders the live services run.

All services share one folded `Ledger` (their evolve is the same fold). At each instant the
loop injects the external inputs due, then lets every service decide in a fixed order, folding
each published event at once, until none has anything to say; then the clock jumps to the next
input or the earliest wake-up a service asked for. Event ids are deduplicated as JetStream's
`Nats-Msg-Id` window would. The result is deterministic: same inputs, same log.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from gpuledger.events import Event, subject_for
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.node_agent.simulated import SimulatedAgent
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.quota.decider import Quota
from gpuledger.services.runtime.gctune import FREEZE_ABOVE, collector_paused
from gpuledger.services.scheduler.decider import Scheduler

MAX_ROUNDS_PER_INSTANT = 100_000
SCHEDULES_ONLY_HORIZON_MS = 7 * 86_400_000
"""Without an `until`, time-of-day policies keep a run going at most this long after the last
input (a job that waits forever would otherwise be woken at every fire time, forever)."""


class SimulationStuck(RuntimeError):
    """Services kept producing events at one instant without converging."""


class Simulator:
    def __init__(self, services: list, ledger: Ledger | None = None, check: bool = False) -> None:
        self.services = services
        self.check = check
        """Checking mode: every decide is digested and re-run without caches
        (`replay.checking.checked_decide`, raises `DecideDrift`)."""
        self.ledger = ledger or Ledger()
        self.log: list[tuple[int, str, Event]] = []
        self._seen: set[str] = set()
        self._inputs: list[tuple[int, int, Event]] = []
        self.now_ms = 0
        self._last_input_ms = 0
        self.on_event: Callable[[int, str, Event], None] | None = None
        self._stale = [True] * len(services)
        """Per service: whether it must be asked (it published at its last decide, or an
        event that can change its answer was folded since its last quiet one)."""
        self._wake: list[int | None] = [None] * len(services)
        """Per service: its `next_wakeup_ms` at the end of the last instant."""
        self._affects: dict[type, tuple[int, ...]] = {}
        self._order = tuple(enumerate(services))
        quiet = [bool(getattr(s, "quiet_until_wakeup", False)) for s in services]
        self._quiet_until_wakeup = tuple(i for i, q in enumerate(quiet) if q)
        self._asked_each_instant = tuple(i for i, q in enumerate(quiet) if not q)

    def publish(self, event: Event) -> bool:
        """Append and fold one event; False when its id was already published."""
        if event.event_id:
            if event.event_id in self._seen:
                return False
            self._seen.add(event.event_id)
        seq = len(self.log) + 1
        subject = subject_for(event)
        self.log.append((seq, subject, event))
        ledger = self.ledger
        nodes_version = ledger.nodes_version
        ledger.apply(seq, event)
        stale = self._stale
        if ledger.nodes_version != nodes_version:  # the node set changed: counts for all
            affected: tuple[int, ...] | None = tuple(range(len(stale)))
        else:
            kind = type(event)
            affected = self._affects.get(kind)
            if affected is None:
                affected = self._affects[kind] = tuple(
                    i
                    for i, s in enumerate(self.services)
                    if kind not in getattr(s, "unaffected_by", ())
                )
        for i in affected:
            stale[i] = True
        if self.on_event is not None:
            self.on_event(seq, subject, event)
        return True

    def schedule(self, inputs: Iterable[tuple[int, Event]]) -> None:
        for at_ms, event in inputs:
            heapq.heappush(self._inputs, (at_ms, len(self._inputs), event))
            self._last_input_ms = max(self._last_input_ms, at_ms)

    def settle(self) -> None:
        # A service whose last decision published nothing is not asked again until an event
        # that can change its answer is published (`unaffected_by`), nor at a later instant
        # before its wake-up when it says the clock changes nothing else
        # (`quiet_until_wakeup`): deciders are functions of (ledger, now), so it would repeat
        # itself (events already published are dropped as duplicates anyway). Checking mode
        # asks anyway and requires that quiet answer.
        log = self.log
        ledger = self.ledger
        now_ms = self.now_ms
        publish = self.publish
        stale = self._stale
        order = self._order
        wake = self._wake
        for i in self._asked_each_instant:
            stale[i] = True
        for i in self._quiet_until_wakeup:
            if (w := wake[i]) is not None and w <= now_ms:
                stale[i] = True
        if self.check:
            from gpuledger.replay.checking import checked_decide, checked_quiet
        else:
            checked_decide = checked_quiet = None
        for _ in range(MAX_ROUNDS_PER_INSTANT):
            produced = False
            for i, service in order:
                if not stale[i]:
                    if checked_quiet is not None:
                        checked_quiet(service, ledger, now_ms)
                    continue
                stale[i] = False
                events = (
                    service.decide(ledger, now_ms)
                    if checked_decide is None
                    else checked_decide(service, ledger, now_ms)
                )
                if events:
                    mark = len(log)
                    for event in events:
                        produced |= publish(event)
                    if len(log) != mark:
                        stale[i] = True
            if not produced:
                return
        raise SimulationStuck(f"no convergence at t={self.now_ms / 1000:.3f}s")

    def run(self, until_ms: int | None = None) -> None:
        # deciding and folding make no reference cycles (tests/replay/test_no_reference_cycles.py):
        # the collector's passes would only walk the growing state, and the log and ledger
        # outlive the run
        with collector_paused(freeze_above=FREEZE_ABOVE):
            self._run(until_ms)

    def _run(self, until_ms: int | None) -> None:
        while True:
            while self._inputs and self._inputs[0][0] <= self.now_ms:
                self.publish(heapq.heappop(self._inputs)[2])
            self.settle()
            if until_ms is None and self.ledger.config.schedules and not self._inputs:
                # time-of-day policies wake the run at every fire time; with nothing running
                # or waiting there is nothing left for them to change
                if not self.ledger.pending and not self.ledger.active:
                    return
                until_ms = self._last_input_ms + SCHEDULES_ONLY_HORIZON_MS
            wake = self._wake
            times = []
            for i, s in enumerate(self.services):
                t = wake[i] = s.next_wakeup_ms(self.ledger, self.now_ms)
                if t is not None and t > self.now_ms:
                    times.append(t)
            if self._inputs:
                times.append(self._inputs[0][0])
            if not times:
                return
            nxt = min(times)
            if until_ms is not None and nxt > until_ms:
                self.now_ms = until_ms
                return
            self.now_ms = nxt


def standard_services(nodes) -> list:
    """The five services in their deciding order (agents first, so nodes register before
    anything is decided about them), with one simulated agent for all nodes."""
    return [SimulatedAgent(tuple(nodes)), Admission(), Quota(), Scheduler(), Preemption()]


def simulate(
    scenario, until_ms: int | None = None, on_event=None, check: bool = False
) -> Simulator:
    """Run a loaded scenario to the end (or `until_ms`); `check`: checking mode."""
    sim = Simulator(standard_services(scenario.nodes), check=check)
    sim.on_event = on_event
    for event in scenario.config:
        sim.publish(event)
    sim.schedule(scenario.inputs)
    sim.run(until_ms if until_ms is not None else getattr(scenario, "until_ms", None))
    return sim
