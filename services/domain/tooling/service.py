"""The shape of a service as both shells (live NATS host loop, simulator) drive it.

A service is a pure decider over a folded state:

- `initial_state()` returns an empty state;
- `evolve(state, seq, event)` folds one log event (stream sequence `seq`) into the state, in
  place, and returns it; it never fails on an event it does not care about;
- `decide(state, now_ms)` looks at the folded state (level-triggered: "which admitted jobs
  have no placement yet?") and returns the events to publish, fully enveloped with
  deterministic ids; it does not change the state (the shell folds the published events back);
- `next_wakeup_ms(state, now_ms)` says when `decide` must run again even if no event arrives
  (a deadline, a job's end in simulated mode), or None;
- optionally, `effects(state, now_ms)`: the effects hook, the one place a service touches the
  world (the real node agent starts, signals and kills processes and samples NVML there). The
  live host calls it right before every `decide`; it may record what it observed and did in
  the state as *local facts* (never published as such) that `decide` then turns into events.
  So every `decide` is pure by name: no I/O, no clock, no randomness.

The shell supplies `now_ms` and everything else external; a decider reads no clock.
"""

from __future__ import annotations

from typing import Any, Protocol

from gpuledger.events import Event


class Service(Protocol):
    name: str
    """Role name (`admission`, `quota`, `scheduler`, `preemption`, `node-agent`)."""
    instance: str
    """Instance id, e.g. `0` or a node name."""

    def initial_state(self) -> Any: ...

    def evolve(self, state: Any, seq: int, event: Event) -> Any: ...

    def decide(self, state: Any, now_ms: int) -> list[Event]: ...

    def next_wakeup_ms(self, state: Any, now_ms: int) -> int | None: ...
