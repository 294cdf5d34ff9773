"""The real node agent's decider: desired state from the ledger, observed state from the
executor, and the events and effects that reconcile them. Pure (no clock, no I/O).

Shape (level-triggered, one node per agent):

- `AgentState` is the folded ledger plus *local facts* the shell folds in before deciding:
  the node's inventory (NVML discovery or the declared GPUs, health updated by telemetry),
  the latest telemetry samples, and per member (allocation id, rank) what the executor
  observed (started, running, acknowledged checkpoint step, outcome) and which signals were
  already sent. Local facts are never published as such: `decide` turns them into events.
- `plan(state, now_ms)` returns the side effects wanted now (`Start`, `Checkpoint`, `Kill`,
  `Forget`). The shell performs them idempotently (the executor keys everything by
  allocation id + rank, so a start is never repeated, even across agent restarts) and
  records them as local facts.
- `decide(state, now_ms)` returns the events to publish: `NodeRegistered` (again when the
  inventory or a GPU's health changes), `NodeHeartbeat` every `heartbeat_s`,
  `GpuMetricsReported` when new samples exist, and per member `MemberStarted`,
  `MemberCheckpointed(step)` per newly acknowledged step, `MemberExited(outcome)`.

Rules (when and why a member stops is the rule shared with the simulated agent,
services/domain/policy/member_stop.py):
- start a member of an active allocation placed here, unless it is asked to stop (then it
  exits with the stop's outcome, `preempted` / `cancelled`, without ever starting);
- a running member asked to stop (its allocation ended, its job cancelled, a preemption naming
  it, its time limit) gets the checkpoint signal (SIGTERM) at once and SIGKILL at the stop's
  deadline: a gang is never left partially running;
- nothing is ever stopped for any other reason: a silent control plane (no new events)
  changes nothing, and a member whose allocation the ledger does not know is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger.events import (
    Event,
    GangCompleted,
    GangEvicted,
    GangFailed,
    GpuMetricsReported,
    GpuSample,
    JobCancelled,
    MemberCheckpointed,
    MemberExited,
    MemberStarted,
    NodeHeartbeat,
    NodeInfo,
    NodeRegistered,
)
from gpuledger.services.domain.fold.ledger import AllocationRecord, JobRecord, Ledger
from gpuledger.services.domain.policy.member_stop import member_stop
from gpuledger.services.domain.tooling.deciding import LedgerService

MemberKey = tuple[str, int]


@dataclass
class Observed:
    """What the executor told the shell about one member (local facts)."""

    started: bool = False
    running: bool = False
    ack_step: int | None = None
    outcome: str | None = None
    """`completed`, `failed` or `preempted` (the executor's classification)."""
    exit_code: int | None = None
    checkpoint_requested: bool = False
    killed: bool = False
    job_id: str = ""
    world_size: int | None = None
    """The world size the member was last told (at start, then by `Resize`); None when
    unknown (adopted after a restart without its record)."""
    incarnation: int | None = None
    """The allocation's `resized_ms` when this member was started: a rank an elastic gang
    gave up and grew back is a new member (the old observation is forgotten unreported)."""


@dataclass
class AgentState:
    ledger: Ledger = field(default_factory=Ledger)
    node: NodeInfo | None = None
    """The inventory to register (None: not known yet)."""
    members: dict[MemberKey, Observed] = field(default_factory=dict)
    ended_ms: dict[str, int] = field(default_factory=dict)
    """Allocation -> when the log ended it (allocations with members on this node)."""
    cancelled_ms: dict[str, int] = field(default_factory=dict)
    """Job -> when it was cancelled."""
    samples: tuple[GpuSample, ...] = ()
    samples_at_ms: int | None = None
    last_metrics_ms: int | None = None
    """When this node's last GpuMetricsReported was folded."""
    telemetry: bool = False
    """Whether the shell samples telemetry (NVML available)."""

    @property
    def last_seq(self) -> int:
        return self.ledger.last_seq


@dataclass
class AgentFold:
    """The folded part of `AgentState` (what a snapshot keeps)."""

    ledger: Ledger
    ended_ms: dict[str, int]
    cancelled_ms: dict[str, int]
    last_metrics_ms: int | None

    @property
    def last_seq(self) -> int:
        return self.ledger.last_seq


# ---------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Start:
    allocation_id: str
    job_id: str
    rank: int
    world_size: int
    command: tuple[str, ...]
    gpus: tuple[int, ...]
    mig_start: int | None
    resume: bool
    incarnation: int | None = None
    """The allocation's `resized_ms` at the start (see `Observed.incarnation`)."""


@dataclass(frozen=True)
class _OnMember:
    """An effect on one member of an allocation (each kind compares equal only to its own)."""

    allocation_id: str
    rank: int


@dataclass(frozen=True)
class Checkpoint(_OnMember):
    """Ask a running member to save a checkpoint and exit."""


@dataclass(frozen=True)
class Kill(_OnMember):
    """Kill a running member (its stop deadline has come)."""


@dataclass(frozen=True)
class Forget(_OnMember):
    """Stop observing a member that is done (its exit folded, or given up by its gang)."""


@dataclass(frozen=True)
class Resize:
    """Tell a running member of an elastic gang its new world size (the gang shrank)."""

    allocation_id: str
    job_id: str
    rank: int
    world_size: int


Effect = Start | Checkpoint | Kill | Forget | Resize


class AgentDecider(LedgerService):
    """The pure core of the real agent for node `node_name`."""

    name = "node-agent"

    def __init__(
        self, node_name: str, *, heartbeat_s: int = 5, metrics_s: int = 10, poll_ms: int = 200
    ) -> None:
        super().__init__(node_name)
        self.node_name = node_name
        self.heartbeat_s = heartbeat_s
        self.metrics_s = metrics_s
        self.poll_ms = poll_ms

    # ------------------------------------------------------------------ fold

    def initial_state(self) -> AgentState:  # type: ignore[override]  # a narrower state type than Service's
        return AgentState()

    def evolve(self, state: AgentState, seq: int, event: Event) -> AgentState:  # type: ignore[override]  # a narrower state type than Service's
        state.ledger.apply(seq, event)
        if isinstance(event, (GangEvicted, GangCompleted, GangFailed)):
            rec = state.ledger.allocations.get(event.allocation_id)
            if rec is not None and any(m.node == self.node_name for m in rec.members):
                state.ended_ms.setdefault(event.allocation_id, event.occurred_at_ms)
        elif isinstance(event, JobCancelled):
            job = state.ledger.jobs.get(event.job_id)
            if job is not None and job.cancel_requested:  # a cancel the ledger accepted
                state.cancelled_ms.setdefault(event.job_id, event.occurred_at_ms)
        elif isinstance(event, GpuMetricsReported) and event.node == self.node_name:
            state.last_metrics_ms = max(state.last_metrics_ms or 0, event.occurred_at_ms)
        return state

    def fold_of(self, state: AgentState) -> AgentFold:  # type: ignore[override]  # a narrower state type than Service's
        """What the agent folded from the log (the rest of `AgentState` is local: the
        inventory, what the executor reported, telemetry samples)."""
        return AgentFold(state.ledger, state.ended_ms, state.cancelled_ms, state.last_metrics_ms)

    def from_fold(self, fold: AgentFold, state: AgentState) -> AgentState:  # type: ignore[override]  # a narrower state type than Service's
        if not isinstance(fold, AgentFold) or not isinstance(fold.ledger, Ledger):
            raise TypeError(f"a {type(fold).__name__}, not an AgentFold")  # before any change
        state.ledger, state.ended_ms, state.cancelled_ms = (
            fold.ledger,
            fold.ended_ms,
            fold.cancelled_ms,
        )
        state.last_metrics_ms = fold.last_metrics_ms
        return state

    # ------------------------------------------------------------------ helpers

    def _mine(self, state: AgentState):
        """(allocation record, job, member placement) of every active allocation here (read
        from the per-node index: the agent never walks the cluster's allocations)."""
        ledger = state.ledger
        for alloc_id in sorted(ledger.agents.node_allocations.get(self.node_name, ())):
            rec = ledger.allocations[alloc_id]
            job = ledger.jobs.get(rec.job_id)
            if job is None:
                continue
            for m in rec.members:
                if m.node == self.node_name:
                    yield rec, job, m

    def _stop_deadline(
        self, state: AgentState, rec: AllocationRecord, job: JobRecord | None, rank: int
    ) -> int | None:
        """When running member `rank` of `rec` must be dead, or None if it may run on (the
        shared rule, services/domain/policy/member_stop.py; a partial preemption of an elastic gang
        stops only the members it names)."""
        stop = member_stop(
            state.ledger,
            rec,
            job,
            rank,
            ended_ms=state.ended_ms.get(rec.allocation_id),
            cancelled_ms=None if job is None else state.cancelled_ms.get(job.job_id),
        )
        return None if stop is None else stop.deadline_ms

    # ------------------------------------------------------------------ effects

    def plan(self, state: AgentState, now_ms: int) -> list[Effect]:
        out = self._starts(state)
        for key in sorted(state.members):
            out += self._effects_on(state, key, now_ms)
        return out

    def _starts(self, state: AgentState) -> list[Effect]:
        """A `Start` for each member placed here that is not observed yet, has a command,
        and is not asked to stop."""
        out: list[Effect] = []
        for rec, job, m in self._mine(state):
            key = (rec.allocation_id, m.rank)
            if m.rank in rec.exited or key in state.members:
                continue
            stopping = member_stop(state.ledger, rec, job, m.rank) is not None
            if not stopping and job.spec.command:
                out.append(
                    Start(
                        allocation_id=rec.allocation_id,
                        job_id=job.job_id,
                        rank=m.rank,
                        world_size=len(rec.members),
                        command=job.spec.command,
                        gpus=m.gpus,
                        mig_start=m.mig_start,
                        resume=job.resume_step is not None,
                        incarnation=rec.resized_ms,
                    )
                )
        return out

    def _effects_on(self, state: AgentState, key: tuple[str, int], now_ms: int) -> list[Effect]:
        """What to do with an observed member: forget it once done (or given up by an
        elastic gang); tell a running one its gang's new size; ask it to checkpoint when it
        must stop, and kill it at its deadline. Nothing for one the log does not know (yet)."""
        obs = state.members[key]
        alloc_id, rank = key
        rec = state.ledger.allocations.get(alloc_id)
        if rec is None:
            return []
        if _left(rec, rank) or _stale(obs, rec, rank):  # gave up by an elastic gang
            return [Forget(alloc_id, rank)] if obs.outcome is not None else []
        if obs.outcome is not None:
            return [Forget(alloc_id, rank)] if rank in rec.exited else []
        if not obs.running:
            return []
        job = state.ledger.jobs.get(rec.job_id)
        deadline = self._stop_deadline(state, rec, job, rank)
        if deadline is None:
            if _told_another_size(obs, rec):
                return [Resize(alloc_id, rec.job_id, rank, len(rec.members))]
            return []
        out: list[Effect] = []
        if not obs.checkpoint_requested:
            out.append(Checkpoint(alloc_id, rank))
        if now_ms >= deadline and not obs.killed:
            out.append(Kill(alloc_id, rank))
        return out

    # ------------------------------------------------------------------ events

    def decide(self, state: AgentState, now_ms: int) -> list[Event]:  # type: ignore[override]  # a narrower state type than Service's
        out = self._node_events(state, now_ms)
        out += self._never_started(state, now_ms)
        for key in sorted(state.members):
            out += self._observed(state, key, now_ms)
        return out

    def _never_started(self, state: AgentState, now_ms: int) -> list[Event]:
        """The exits of members placed here that never start: asked to stop before they
        started (the stop's outcome), or without a command (failed)."""
        out: list[Event] = []
        for rec, job, m in self._mine(state):
            if m.rank in rec.exited or (rec.allocation_id, m.rank) in state.members:
                continue
            stop = member_stop(state.ledger, rec, job, m.rank)
            if stop is not None:
                out.append(self._exited(state, now_ms, rec, m.rank, stop.outcome, None))
            elif not job.spec.command:
                out.append(self._exited(state, now_ms, rec, m.rank, "failed", None))
        return out

    def _observed(self, state: AgentState, key: tuple[str, int], now_ms: int) -> list[Event]:
        """What the log does not know yet of an observed member of a live run: that it
        started, its last acknowledged checkpoint, its exit (cancelled when its job was
        cancelled and it did not complete)."""
        obs = state.members[key]
        alloc_id, rank = key
        rec = state.ledger.allocations.get(alloc_id)
        if rec is None or _left(rec, rank) or _stale(obs, rec, rank):
            return []
        out: list[Event] = []
        if obs.started and not rec.ended and rank not in rec.started:
            out.append(self._member_event(state, now_ms, MemberStarted, rec, rank))
        known = rec.checkpoints.get(rank)
        if obs.ack_step is not None and (known is None or known[0] != obs.ack_step):
            out.append(
                self._member_event(
                    state,
                    now_ms,
                    MemberCheckpointed,
                    rec,
                    rank,
                    suffix=f"/{obs.ack_step}",
                    step=obs.ack_step,
                    progress_ms=0,
                )
            )
        if obs.outcome is not None and rank not in rec.exited:
            job = state.ledger.jobs.get(rec.job_id)
            outcome = obs.outcome
            if job is not None and job.cancel_requested and outcome != "completed":
                outcome = "cancelled"
            out.append(self._exited(state, now_ms, rec, rank, outcome, obs.exit_code))
        return out

    def _exited(
        self,
        state: AgentState,
        now_ms: int,
        rec: AllocationRecord,
        rank: int,
        outcome: str,
        exit_code: int | None,
    ) -> Event:
        return self._member_event(
            state, now_ms, MemberExited, rec, rank, outcome=outcome, exit_code=exit_code
        )

    def _member_event(
        self,
        state: AgentState,
        now_ms: int,
        cls: type[Event],
        rec: AllocationRecord,
        rank: int,
        suffix: str = "",
        **fields: Any,
    ) -> Event:
        """An event about member `rank` of `rec` on this node, keyed by the member (and
        `suffix`, for one of several of a kind)."""
        return self.emit(
            state.ledger,
            now_ms,
            cls,
            key=rec.member_key(rank) + suffix,
            correlation_id=rec.job_id,
            job_id=rec.job_id,
            allocation_id=rec.allocation_id,
            rank=rank,
            node=self.node_name,
            **fields,
        )

    def _node_events(self, state: AgentState, now_ms: int) -> list[Event]:
        node = state.node
        if node is None:
            return []
        out: list[Event] = []
        known = state.ledger.nodes.get(node.name)
        if known is None or known.info != node:
            out.append(
                self.emit(
                    state.ledger,
                    now_ms,
                    NodeRegistered,
                    key=f"{node.name}@{now_ms}",
                    correlation_id=node.name,
                    node=node,
                    simulated=False,
                    heartbeat_s=self.heartbeat_s,
                )
            )
        elif (
            self.heartbeat_s
            and known.last_heartbeat_ms is not None
            and now_ms - known.last_heartbeat_ms >= self.heartbeat_s * 1000
        ):
            running = tuple(f"{a}/{r}" for (a, r), o in sorted(state.members.items()) if o.running)
            out.append(
                self.emit(
                    state.ledger,
                    now_ms,
                    NodeHeartbeat,
                    key=f"{node.name}@{now_ms}",
                    correlation_id=node.name,
                    node=node.name,
                    running=running,
                )
            )
        if (
            state.samples
            and state.samples_at_ms is not None
            and (state.last_metrics_ms is None or state.samples_at_ms > state.last_metrics_ms)
        ):
            out.append(
                self.emit(
                    state.ledger,
                    now_ms,
                    GpuMetricsReported,
                    key=f"{node.name}@{state.samples_at_ms}",
                    correlation_id=node.name,
                    node=node.name,
                    samples=state.samples,
                )
            )
        return out

    # ------------------------------------------------------------------ wakeups

    def next_wakeup_ms(self, state: AgentState, now_ms: int) -> int | None:  # type: ignore[override]  # a narrower state type than Service's
        times: list[int] = []
        node = state.node
        known = state.ledger.nodes.get(node.name) if node is not None else None
        if self.heartbeat_s and known is not None and known.last_heartbeat_ms is not None:
            times.append(known.last_heartbeat_ms + self.heartbeat_s * 1000)
        if state.telemetry:
            times.append((state.samples_at_ms or now_ms) + self.metrics_s * 1000)
        busy = any(o.outcome is None or o.running for o in state.members.values())
        if busy or any(True for _ in self._mine(state)):
            times.append(now_ms + self.poll_ms)
        return min(times, default=None)


def _left(rec: AllocationRecord, rank: int) -> bool:
    """Whether member `rank` left the allocation when its elastic gang shrank (`GangResized`
    keeps only the members that stay)."""
    return rec.resized_ms is not None and all(m.rank != rank for m in rec.members)


def _stale(obs: Observed, rec: AllocationRecord, rank: int) -> bool:
    """Whether the observation is of an earlier member of this rank: the elastic gang gave
    it up and grew the rank back since (reported already; the new member starts afresh)."""
    return (
        obs.outcome is not None
        and obs.incarnation != rec.resized_ms
        and rank not in rec.started
        and rank not in rec.exited
    )


def _told_another_size(obs: Observed, rec: AllocationRecord) -> bool:
    """Whether a running member of a live allocation was told a world size other than its
    gang's (or, adopted after a restart, none while the gang has resized)."""
    told = obs.world_size
    if rec.ended:
        return False
    if told is None:
        return rec.resized_ms is not None
    return told != len(rec.members)
