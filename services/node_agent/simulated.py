"""The simulated node agent's decider: members "run" for their job's duration hint.

Per member on one of its nodes: start when placed; exit `completed` when the remaining work
(duration minus the progress the allocation resumed from) is done, or `failed` (exit code 1)
when the job recorded that its run failed after that work (`JobSpec.ends`, an imported
history's outcome; `recorded_end`). When and why a member
stops is the rule shared with the real agent (services/domain/policy/member_stop.py): on a
preemption request or at its time limit (`TimeLimitReached`) it saves a checkpoint taking the
job's `save_s` and exits `preempted` — or, when saving would overrun the deadline, exits at
the deadline with no checkpoint (work lost); a cancelled member has nothing to save and exits
`cancelled` at once; a member asked to stop before it started exits without starting.
Registers its nodes, and heartbeats when asked to (live mode). The agent never stops a
member on its own for any other reason.
"""

from __future__ import annotations

import msgspec

from gpuledger.events import (
    Event,
    MemberCheckpointed,
    MemberExited,
    MemberStarted,
    MigReconfigured,
    NodeHeartbeat,
    NodeInfo,
    NodeRegistered,
)
from gpuledger.events import catalog as ev
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy.member_stop import TIME_LIMIT, Stop, member_stop
from gpuledger.services.domain.tooling import reads
from gpuledger.services.domain.tooling.deciding import LedgerService
from gpuledger.services.domain.tooling.reads import AGGREGATES, NODE_SET, Step, of

_BEFORE_PLACEMENT: tuple[type[Event], ...] = (
    ev.JobSubmitted,
    ev.JobAdmitted,
    ev.JobRejected,
    ev.PendingReasonChanged,
    ev.PreemptionDeclined,
)
"""What happens to a job before it is placed: nothing an agent acts on."""

STEPS: tuple[Step, ...] = (
    Step(
        "register",
        "its nodes not registered yet, and their heartbeats when due (a wake-up)",
        of("nodes"),
    ),
    Step("reconfigure", "MIG re-geometry requested on its nodes", of("mig", NODE_SET)),
    Step(
        "members",
        "the members on its nodes of the allocations that need attention: placed, due, asked "
        "to stop (preemption, time limit, cancel), resized; the due instants are wake-ups",
        of(
            "allocations",
            AGGREGATES["jobs"] - set(_BEFORE_PLACEMENT),
        ),
    ),
    Step(
        "classes",
        "the priority classes and policy its members' stops follow",
        of(AGGREGATES["tenants"] - {ev.FairShareUpdated}),
    ),
)
"""What the simulated agent's decide reads, step by step: its quiet set is derived from it."""


class SimulatedAgent(LedgerService):
    """Agent for `nodes` (one agent may simulate many nodes)."""

    name = "node-agent"
    unaffected_by = reads.unaffected_by(STEPS)
    quiet_until_wakeup = reads.quiet_until_wakeup(STEPS)

    def __init__(
        self, nodes: tuple[NodeInfo, ...], instance: str = "sim", heartbeat_s: int = 0
    ) -> None:
        super().__init__(instance)
        self.nodes = {n.name: n for n in nodes}
        self._names = sorted(self.nodes)
        self.heartbeat_s = heartbeat_s
        period = heartbeat_s * 1000
        # heartbeats spread over the period: node i's first one comes (i+1)/N of a period after
        # its registration, then one every period, so N nodes never beat in one burst
        self._phase_ms = (
            {
                name: max(1, (i + 1) * period // len(self._names))
                for i, name in enumerate(self._names)
            }
            if period
            else {}
        )
        self._registered_at = -1  # memo: nodes_version at which every node was registered

    def cache_defaults(self) -> dict:
        return {"_registered_at": -1}

    # ------------------------------------------------------------------ decide

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        out = self._register(state, now_ms)
        out += self._reconfigure(state, now_ms)
        for alloc_id in sorted(self._attention(state, now_ms)):
            rec = state.allocations[alloc_id]
            job = state.jobs[rec.job_id]
            for m in rec.members:
                if m.node in self.nodes and m.rank not in rec.exited:
                    out += self._member(state, now_ms, rec, job, m.rank, m.node)
        return out

    def next_wakeup_ms(self, state: Ledger, now_ms: int) -> int | None:
        times: list[int] = []
        if self.heartbeat_s:
            nodes = state.nodes
            due = [
                self._heartbeat_due(node)
                for name in self._names
                if (node := nodes.get(name)) is not None and node.last_heartbeat_ms is not None
            ]
            if due:
                times.append(min(due))
        if self._narrow(state):
            nxt = min(
                (
                    t
                    for a in self._allocations_here(state)
                    for t in state.expected.times(a)
                    if t > now_ms
                ),
                default=None,
            )
        else:
            nxt = state.expected.next_after(now_ms)
        if nxt is not None:
            times.append(nxt)
        return min(times, default=None)

    def _heartbeat_due(self, node) -> int:
        """When the node's next heartbeat is due: a period after the last one, or its phase
        after its registration (the registration counts as its first heartbeat)."""
        last = node.last_heartbeat_ms
        if last == node.registered_ms:
            return last + self._phase_ms[node.info.name]
        return last + self.heartbeat_s * 1000

    def _narrow(self, state: Ledger) -> bool:
        """Whether this agent simulates fewer nodes than the ledger knows (one per node in
        `gpuledger up`): it then reads only the allocations on its own nodes."""
        return len(self.nodes) < len(state.nodes)

    def _allocations_here(self, state: Ledger) -> set[str]:
        """Active allocations with a member on one of this agent's nodes."""
        out: set[str] = set()
        for name in self.nodes:
            out.update(state.agents.node_allocations.get(name, ()))
        return out

    def _attention(self, state: Ledger, now_ms: int) -> set[str]:
        """Allocations where a member may have something to do now: not yet started, being
        cancelled, or with an expected instant (end, checkpoint, deadline) that has come.
        An agent of some nodes looks at their allocations only (the same answer, restricted
        to what it can act on), not at every due instant of the cluster."""
        if self._narrow(state):
            return {
                a
                for a in self._allocations_here(state)
                if a in state.awaiting_start
                or a in state.agents.cancelling
                or any(t <= now_ms for t in state.expected.times(a))
            }
        due = {key for _, key, _ in state.expected.due(now_ms)}
        return (state.awaiting_start | state.agents.cancelling | due) & state.active

    # ------------------------------------------------------------------ parts

    def _register(self, state: Ledger, now_ms: int) -> list[Event]:
        out: list[Event] = []
        nodes = state.nodes
        if self._registered_at != state.nodes_version:  # else every node was seen registered
            for name in self._names:
                known = nodes.get(name)
                mine = (
                    self.nodes[name]
                    if known is None
                    else with_layouts(self.nodes[name], known.info)
                )
                if known is None or known.info != mine:
                    out.append(
                        self.emit(
                            state,
                            now_ms,
                            NodeRegistered,
                            key=f"{name}@{now_ms}",
                            correlation_id=name,
                            node=mine,
                            simulated=True,
                            heartbeat_s=self.heartbeat_s,
                        )
                    )
            if not out:
                self._registered_at = state.nodes_version
        if self.heartbeat_s:
            registering = {e.node.name for e in out}
            for name in self._names:
                known = nodes.get(name)
                if (
                    known is not None
                    and name not in registering
                    and known.last_heartbeat_ms is not None
                    and now_ms >= self._heartbeat_due(known)
                ):
                    out.append(
                        self.emit(
                            state,
                            now_ms,
                            NodeHeartbeat,
                            key=f"{name}@{now_ms}",
                            correlation_id=name,
                            node=name,
                        )
                    )
        return out

    def _reconfigure(self, state: Ledger, now_ms: int) -> list[Event]:
        """Apply the MIG re-geometries requested for this agent's nodes at once (a simulated
        GPU has nothing to drain: the request is only made for an idle GPU) and report them."""
        out: list[Event] = []
        if not state.mig.mig_requests:
            return out
        for name in sorted(state.mig.mig_requests):
            if name not in self.nodes:
                continue
            r = state.mig.mig_requests[name]
            out.append(
                self.emit(
                    state,
                    now_ms,
                    MigReconfigured,
                    key=r.event_id,
                    correlation_id=name,
                    causation_id=r.event_id,
                    node=name,
                    gpu_index=r.gpu_index,
                    layout=tuple(r.layout),
                    job_id=r.job_id,
                )
            )
        return out

    def _member(
        self,
        state: Ledger,
        now_ms: int,
        rec: AllocationRecord,
        job: JobRecord,
        rank: int,
        node: str,
    ) -> list[Event]:
        key = rec.member_key(rank)
        common = dict(
            correlation_id=job.job_id,
            job_id=job.job_id,
            allocation_id=rec.allocation_id,
            rank=rank,
            node=node,
        )
        started = rec.started.get(rank)
        stop = member_stop(state, rec, job, rank)
        if stop is not None and (started is None or stop.asked_ms is None):
            # asked before it started, or asked now (a cancel: nothing to save): exits now
            return [self.emit(state, now_ms, MemberExited, key=key, outcome=stop.outcome, **common)]
        if started is None:
            return [self.emit(state, now_ms, MemberStarted, key=key, **common)]
        due = _due(rec, job, started, stop)
        if due is None or due[0] > now_ms:
            return []
        _, what = due
        if what == "checkpoint":
            assert stop is not None and stop.asked_ms is not None
            progress = rec.start_progress_ms + (stop.asked_ms - started)
            return [
                self.emit(
                    state,
                    now_ms,
                    MemberCheckpointed,
                    key=key,
                    step=progress // 1000,
                    progress_ms=progress,
                    **common,
                ),
                self.emit(
                    state,
                    now_ms,
                    MemberExited,
                    key=key,
                    outcome="preempted",
                    exit_code=75,
                    **common,
                ),
            ]
        outcome = recorded_end(state, job) if what == "end" else "preempted"
        return [
            self.emit(
                state,
                now_ms,
                MemberExited,
                key=key,
                outcome=outcome,
                exit_code=EXIT_CODES.get(outcome),
                **common,
            )
        ]


EXIT_CODES = {"completed": 0, "failed": 1}
"""A simulated member's exit code by outcome (None: stopped by a signal)."""


def recorded_end(state: Ledger, job: JobRecord) -> str:
    """How the job's run ends when its work is done: `completed`, or the end its spec
    recorded (`JobSpec.ends`; a task of an array: its own entry in the array's
    `ArraySpec.ends`, else the array's), e.g. `failed` for an imported run that failed."""
    end = job.spec.ends
    if job.array_parent is not None:
        parent = state.jobs.get(job.array_parent)
        arr = None if parent is None else parent.spec.array
        if arr and arr.ends is not msgspec.UNSET:
            i = int(job.spec.job_id.rpartition(ARRAY_SEPARATOR)[2]) - arr.first
            if 0 <= i < len(arr.ends):
                end = arr.ends[i]
    return end or "completed"


def with_layouts(info: NodeInfo, known: NodeInfo) -> NodeInfo:
    """The agent's declared node with the MIG layouts the log has given its GPUs since
    (`MigReconfigured`): a simulated GPU keeps the layout it was last told to take."""
    layouts = {g.index: g.mig_layout for g in known.gpus if g.sharing == "mig"}
    if not layouts:
        return info
    return msgspec.structs.replace(
        info,
        gpus=tuple(
            msgspec.structs.replace(g, mig_layout=layouts[g.index])
            if g.sharing == "mig" and g.index in layouts
            else g
            for g in info.gpus
        ),
    )


def _due(
    rec: AllocationRecord, job: JobRecord, started_ms: int, stop: Stop | None
) -> tuple[int, str] | None:
    """The next thing running member `rank` does on its own, and when: `end`, `checkpoint`
    (checkpoint then exit) or `killed` (deadline reached before the checkpoint). `stop`: the
    shared stop rule's answer for the member (services/domain/policy/member_stop.py)."""
    end = None
    if job.spec.duration_s is not None:
        # the gang's work ends together: a member added when an elastic gang grew ends with
        # the members started first (all members of a placement start at the same instant)
        first = min(rec.started.values(), default=started_ms)
        end = min(started_ms, first) + max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)
    if stop is None or stop.asked_ms is None or stop.deadline_ms is None:
        if end is not None and job.time_limit_s is not None and rec.started:
            limit_at = max(rec.started.values()) + job.time_limit_s * 1000
            if end >= limit_at:  # its work outlasts its limit: the scheduler stops it then
                return None
        return None if end is None else (end, "end")
    saved_at = stop.asked_ms + stop.save_ms
    done = (
        (saved_at, "checkpoint") if saved_at <= stop.deadline_ms else (stop.deadline_ms, "killed")
    )
    if stop.kind == TIME_LIMIT:  # a run at its limit is stopped, whatever work it had left
        return done
    if end is not None and end <= done[0]:
        return (end, "end")
    return done
