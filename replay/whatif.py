"""What-if replay: the external inputs of a recorded log, re-run through the deciders on the
virtual clock, optionally under another configuration.

External inputs are what no decider chose: configuration, node inventories, node losses,
submissions and cancels. Each job's observed run time (the work it did up to completion in
the recorded log) replaces its duration hint, so a replay reproduces real run times while
the decisions (when and where it runs, who is preempted) are taken afresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from gpuledger import events as ev
from gpuledger.events.control import CONTROL_EVENTS, NODE_CONTROL_EVENTS
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.policy.schedules import SCHEDULE_PREFIX
from gpuledger.services.runtime.gctune import collector_paused


@dataclass(frozen=True)
class Inputs:
    start_ms: int
    config: list[ev.Event]
    nodes: tuple[ev.NodeInfo, ...]
    timeline: list[tuple[int, ev.Event]]


def observed_work_s(ledger: Ledger, job_id: str) -> int | None:
    """Seconds of work a job did up to its completion in the recorded log, or None."""
    job = ledger.jobs.get(job_id)
    if job is None or job.state != "completed":
        return None
    done = [
        a
        for a in ledger.allocations.values()
        if a.job_id == job_id
        and a.ended
        and a.exited
        and all(o == "completed" for o, _ in a.exited.values())
    ]
    if not done:
        return None
    rec = done[-1]
    start = min(rec.started.values(), default=rec.placed_ms)
    end = max(t for _, t in rec.exited.values())
    return -(-(rec.start_progress_ms + max(0, end - start)) // 1000)


NODE_CONTROLS = frozenset(NODE_CONTROL_EVENTS)
"""The operator's cordons and windows: replayed at their time (an imported Slurm site's
drained nodes and reservations are at the trace's start: docs/importers.md)."""
JOB_CONTROLS = frozenset(CONTROL_EVENTS)
"""A tenant's or the operator's holds, releases, requeues, priority changes and moves to the
top: replayed at their time, answered by the replay's fold as they were live (an imported
Slurm job not eligible when submitted is held, then released when it became eligible)."""


def external_inputs(entries: Iterable[tuple[int, str, ev.Event]]) -> Inputs:
    with collector_paused():  # a fold of the whole log (dropped on return), like the replay's
        return _external_inputs(list(entries))


def _external_inputs(entries: list[tuple[int, str, ev.Event]]) -> Inputs:
    # Observed run times need the recorded log folded, but only a log where some gang
    # completed has any (a job is `completed` by GangCompleted alone): an imported trace
    # (submissions only) is not folded.
    ledger: Ledger | None = None
    if any(e.__class__ is ev.GangCompleted for _, _, e in entries):
        ledger = Ledger()
        for seq, subject, e in entries:
            admit(ledger, seq, e, subject)  # the acceptance rules the live services apply
    config: list[ev.Event] = []
    nodes: dict[str, ev.NodeInfo] = {}
    timeline: list[tuple[int, ev.Event]] = []
    start = min((e.occurred_at_ms for _, _, e in entries), default=0)
    for _, _, e in entries:
        match e:
            case ev.TenantConfigured() | ev.PriorityClassConfigured() if (
                e.correlation_id.startswith(SCHEDULE_PREFIX)
            ):
                pass  # a time-of-day policy's change: the replayed quota service decides it again
            case (
                ev.TenantConfigured()
                | ev.PriorityClassConfigured()
                | ev.PolicyConfigured()
                | ev.ScheduleConfigured()
            ):
                config.append(e)
            case ev.NodeRegistered(node=info):
                nodes.setdefault(info.name, info)
            case ev.NodeLost():
                timeline.append((e.occurred_at_ms, e))
            case _ if e.__class__ in NODE_CONTROLS or e.__class__ in JOB_CONTROLS:
                timeline.append((e.occurred_at_ms, e))
            case ev.ServiceScaled() if e.correlation_id.startswith(SCHEDULE_PREFIX):
                pass  # a time-of-day policy's replica change: decided again by the replay
            case ev.JobCancelled() | ev.ServiceScaled():
                timeline.append((e.occurred_at_ms, e))
            case ev.JobSubmitted(job=spec):
                work = None if ledger is None else observed_work_s(ledger, spec.job_id)
                if work is not None:
                    spec = msgspec.structs.replace(spec, duration_s=work)
                timeline.append((e.occurred_at_ms, msgspec.structs.replace(e, job=spec)))
    return Inputs(start, config, tuple(nodes[n] for n in sorted(nodes)), timeline)


def with_config(inputs: Inputs, doc: dict[str, Any]) -> Inputs:
    """The same inputs under another configuration document (its nodes too, if it has any)."""
    nodes = node_infos(doc) or inputs.nodes
    return Inputs(
        inputs.start_ms,
        config_events(doc, producer="whatif", at_ms=inputs.start_ms),
        nodes,
        inputs.timeline,
    )


def replay(inputs: Inputs, until_ms: int | None = None, on_event=None, ledger=None):
    """Run the inputs through the standard services (folding into `ledger`, a fresh one by
    default); returns the Simulator."""
    from gpuledger.replay.simulator import Simulator, standard_services

    sim = Simulator(standard_services(inputs.nodes), ledger=ledger)
    sim.on_event = on_event
    sim.now_ms = inputs.start_ms
    for e in inputs.config:
        sim.publish(msgspec.structs.replace(e, occurred_at_ms=inputs.start_ms))
    if any(t <= inputs.start_ms and e.__class__ in NODE_CONTROLS for t, e in inputs.timeline):
        sim.settle()  # the agents register the nodes that the first instant's controls name
    sim.schedule(inputs.timeline)
    sim.run(until_ms)
    return sim


def measured_replay(inputs: Inputs, until_ms: int | None = None):
    """`replay`, with its log's metrics integrated while the replay folds it
    (`replay.metrics.Integrals`), so that measuring it takes no second fold. Returns (the
    Simulator, the integrals: `replay.metrics.measured(integrals, groups)` at the end)."""
    from gpuledger.replay.metrics import Integrals

    ledger = Ledger()
    meter = Integrals(ledger)
    sim = replay(inputs, until_ms, on_event=lambda _seq, _subject, e: meter.seen(e), ledger=ledger)
    return sim, meter
