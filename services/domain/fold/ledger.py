"""The ledger: the one fold of the event log that every decider reads.

`Ledger.apply(seq, event)` is `evolve`: it updates the state in place and never raises on an
event that refers to something unknown (such events are ignored, so a replayed or partial log
cannot wedge a service). Indexes (`submitted`, `pending`, `active`) are kept incrementally so
deciders never rescan every job.

Invariants: an allocation is either active (its capacity booked in `fleet`) or ended; a job
has at most one active allocation; `tenant_gpu_milli` equals the sum of the tenant's active
allocations.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from gpuledger import events as ev
from gpuledger.events import JobSpec, MemberPlacement
from gpuledger.events.ids import (
    ARRAY_SEPARATOR,
    REPLICA_SEPARATOR,
    TENANT_KEY_SEPARATOR,
    job_name,
    tenant_job_key,
)
from gpuledger.events.reasons import (
    TERMINAL_STATES,
    EndReason,
    EvictReason,
    FoldRefusal,
    JobState,
    RequestReason,
)
from gpuledger.events.subjects import producer_problem, role_of, scheduled_by_quota
from gpuledger.services.domain.fold.config import ConfigState
from gpuledger.services.domain.fold.refusals import Refusal, Refused
from gpuledger.services.domain.fold.timeindex import TimeIndex
from gpuledger.services.domain.inputs.mig_layouts import LayoutError, layout_text, parse_layout
from gpuledger.services.domain.policy import dependencies
from gpuledger.services.domain.policy.schedules import (
    SCHEDULE_PREFIX,
    changed_class,
    changed_tenant,
    last_fire_ms,
)
from gpuledger.services.domain.policy.usage import advance, step_ms
from gpuledger.services.domain.tooling.placement_adapter import (
    gang_request,
    node_spec,
    to_placement,
)
from gpuledger.services.placement import Fleet, GangRequest, PlacementConflict

TERMINAL = TERMINAL_STATES
_UP = frozenset({JobState.running, JobState.preempting})
"""States of a placed job (it holds an allocation)."""


@dataclass(frozen=True)
class RequestRefusal:
    """A client request the log holds but no fold applies, waiting for admission's answer
    (`RequestRefused`, or `JobRejected` for the unreadable first submission of a job id)."""

    request_seq: int
    """Stream sequence of the refused message."""
    request: str
    """`JobSubmitted`, `JobCancelled` or `ServiceScaled`."""
    job_id: str
    tenant: str
    reason: str
    """`JobIdConflict`, `InvalidSpec` or `UnknownJob`."""
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    cause: str = ""
    """Event id of the refused message (or of its dead letter)."""


def replica_id(service_id: str, index: int) -> str:
    """The job id of a service's replica: `<service>~<index>`."""
    return f"{service_id}{REPLICA_SEPARATOR}{index}"


def replica_spec(spec: JobSpec, index: int) -> JobSpec:
    """The spec of one replica of a service: a one-member job with the service's resources."""
    fields = {f: getattr(spec, f) for f in JobSpec.__struct_fields__}  # also of a read-only view
    fields.update(
        job_id=replica_id(spec.job_id, index),
        replicas=1,
        min_members=None,
        min_available=0,
        kind=msgspec.UNSET,
    )
    return JobSpec(**fields)


def task_id(array_id: str, index: int) -> str:
    """The job id of an array job's task: `<array>@<index>`."""
    return f"{array_id}{ARRAY_SEPARATOR}{index}"


def task_spec(spec: JobSpec, index: int) -> JobSpec:
    """The spec of one task of an array job: the array's shape under the task's id."""
    fields = {f: getattr(spec, f) for f in JobSpec.__struct_fields__}  # also of a read-only view
    fields.update(job_id=task_id(spec.job_id, index), array=msgspec.UNSET)
    arr = spec.array
    if (
        arr
        and arr.durations_s is not msgspec.UNSET
        and 0 <= index - arr.first < len(arr.durations_s)
    ):
        fields.update(duration_s=arr.durations_s[index - arr.first])  # its own (imported)
    return JobSpec(**fields)


def spec_differences(old: JobSpec, new: JobSpec, limit: int = 5) -> list[str]:
    """Human lines `path: stored X, new Y` for the fields where two job specs differ (in
    field order, at most `limit`)."""
    out: list[str] = []
    _differences(ev.to_builtins(old), ev.to_builtins(new), "", out, limit)
    return out


def _differences(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    """`spec_differences` below `path` (a module function, not a recursive closure: that
    would be a reference cycle, and folds run with the cyclic collector paused)."""
    if len(out) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            _differences(a.get(k), b.get(k), f"{path}.{k}" if path else str(k), out, limit)
        return
    out.append(f"{path}: stored {a!r}, new {b!r}")


@dataclass
class PreemptionRecord:
    """One preemption a job suffered (for reports and why)."""

    at_ms: int
    by: str | None
    reason: str
    allocation_id: str
    checkpointed: bool = False
    lost_gpu_ms: int = 0


@dataclass
class JobRecord:
    """A job's folded state."""

    spec: JobSpec
    submitted_ms: int
    submit_event_id: str
    state: JobState = JobState.submitted
    priority: int = 0
    preemptible: bool = True
    slo_class: str = ""
    reason: str | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    pending_changes: int = 0
    pending_since_ms: int = 0
    waited_ms: int = 0
    """Queue time banked by earlier placements (placed time minus `pending_since_ms`, summed
    over attempts): aging by wait counts it while the job runs and after it is requeued, so
    a promotion earned by waiting is kept once the job runs."""
    admitted_ms: int | None = None
    allocation_id: str | None = None
    attempts: int = 0
    progress_ms: int = 0
    resume_step: int | None = None
    cancel_requested: bool = False
    finished_ms: int | None = None
    placements: list[tuple[int, tuple[MemberPlacement, ...]]] = field(default_factory=list)
    preemptions: list[PreemptionRecord] = field(default_factory=list)
    declined: str | None = None
    submit_seq: int = 0
    """Stream sequence of the submission that created the job (the first one of its id)."""
    unreadable: bool = False
    """The job's only submission could not be decoded: it exists as a rejection (`spec`
    holds its id and tenant only)."""
    service: str | None = None
    """For a replica of a service: the service's job id (the replica is `<service>~<index>`)."""
    replica: int = 0
    """For a replica: its index."""
    desired_replicas: int = 0
    """For a service: the replicas wanted now (its spec's `replicas`, then `ServiceScaled`)."""
    replicas_created: int = 0
    """For a service: replica records created so far (indexes 0 .. this - 1)."""
    replicas_up: int = 0
    """For a service: its replicas placed now (running or being preempted). The service is
    `running` while this is at least 1, else `pending` (`Ledger._service_state`)."""
    array_parent: str | None = None
    """For a task of an array job: the array's job id (the task is `<array>@<index>`)."""
    tasks_up: int = 0
    """For an array job: its tasks placed now (running or being preempted)."""
    tasks_ended: dict[str, int] = field(default_factory=dict)
    """For an array job: its ended tasks by final state."""
    tasks_started: bool = False
    """For an array job: whether any of its tasks was ever placed."""
    time_limit_s: int | None = None
    """Its resolved time limit (`JobAdmitted.time_limit_s`): each run is stopped when it has
    lasted this long; None = none."""
    name: str | None = None
    """The id its tenant submitted, when the fold keeps the job under another key
    (`events.ids.tenant_job_key`: the id already named another tenant's job); None when the
    key is the id itself (`spec.job_id` is always the key)."""

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def client_spec(self) -> JobSpec:
        """The spec as its tenant submitted it (under the id it submitted, not the key)."""
        if self.name is None:
            return self.spec
        fields = {f: getattr(self.spec, f) for f in JobSpec.__struct_fields__}  # (or a view's)
        fields.update(job_id=self.name)
        return JobSpec(**fields)

    @property
    def tenant(self) -> str:
        return self.spec.tenant

    def gpu_milli(self) -> int:
        """GPU capacity of the whole gang (min_members... replicas: counted at replicas)."""
        return self.spec.resources.gpu_milli_total() * self.spec.replicas


def child_record(parent: JobRecord, spec: JobSpec, at_ms: int, **own: Any) -> JobRecord:
    """A job its parent creates when admitted or scaled (an array task, a service replica):
    pending from `at_ms`, with the parent's submission, priority, preemptibility and SLO
    class, plus the child's `own` fields."""
    return JobRecord(
        spec=spec,
        submitted_ms=at_ms,
        submit_event_id=parent.submit_event_id,
        state=JobState.pending,
        priority=parent.priority,
        preemptible=parent.preemptible,
        slo_class=parent.slo_class,
        admitted_ms=at_ms,
        pending_since_ms=at_ms,
        submit_seq=parent.submit_seq,
        **own,
    )


@dataclass
class AllocationRecord:
    """One placement of a gang and what its members did."""

    allocation_id: str
    job_id: str
    tenant: str
    members: tuple[MemberPlacement, ...]
    node_names: tuple[str, ...]
    """The members' nodes, each once, sorted (`nodes()`; kept: members never change)."""
    placed_ms: int
    gpu_milli: int
    borrowing: bool
    start_progress_ms: int
    started: dict[int, int] = field(default_factory=dict)
    exited: dict[int, tuple[str, int]] = field(default_factory=dict)
    checkpoints: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    preemption: ev.PreemptionRequested | None = None
    time_limit: ev.TimeLimitReached | None = None
    """Set when the run reached its job's time limit: its members are being stopped."""
    backfill_for: str | None = None
    """The reserving job whose reserved capacity this allocation borrows as preemptible
    backfill (evicted when that job lands)."""
    ended: bool = False
    ended_ms: int | None = None
    resized_ms: int | None = None
    """When the allocation last shrank (`GangResized`): a nomination of the capacity it gave
    up lapses from then, as from `ended_ms` for an evicted one."""

    def nodes(self) -> tuple[str, ...]:
        return self.node_names

    def all_exited(self) -> bool:
        return len(self.exited) == len(self.members)

    def member_key(self, rank: int) -> str:
        """The id key of a member's events (`MemberStarted`, ...): `alloc/rank`, and once the
        gang was resized `alloc/rank~<resize time>`, so a rank that left and came back with a
        grow reports afresh (its first events' ids are taken)."""
        key = f"{self.allocation_id}/{rank}"
        return key if self.resized_ms is None else f"{key}~{self.resized_ms}"

    def leaving(self) -> tuple[int, ...] | None:
        """The ranks a partial preemption (an elastic gang shrinking) asks to leave, or None
        (no preemption, or one of the whole gang)."""
        p = self.preemption
        if p is None or not isinstance(p.ranks, tuple):
            return None
        return p.ranks

    def stops(self, rank: int) -> bool:
        """Whether member `rank` is asked to checkpoint and exit: the run reached its time
        limit, the whole gang is being preempted, or a partial preemption names it."""
        return self.time_limit is not None or self.preempts(rank)

    def preempts(self, rank: int) -> bool:
        """Whether a preemption asks member `rank` to leave (the whole gang's, or a partial
        one naming it)."""
        if self.preemption is None:
            return False
        ranks = self.leaving()
        return ranks is None or rank in ranks


@dataclass
class NodeRecord:
    info: ev.NodeInfo
    simulated: bool
    registered_ms: int
    last_heartbeat_ms: int | None = None
    lost: bool = False


@dataclass
class SchedulerIndexes:
    """Indexes of the running work that only the scheduler reads (non-preemptible use for
    guarantees, spread groups, consolidations under way, allocations to settle or grow, nodes
    that can be declared lost). Folded by the `Ledger`; a decider never writes them."""

    tenant_fixed_gpu_milli: dict[str, int] = field(default_factory=dict)
    """Per tenant, the part of `tenant_gpu_milli` held by non-preemptible work."""
    tenant_fixed_by_model: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, GPU model), non-preemptible GPU capacity in use (for per-model
    guarantees); a member counts under the model of its first GPU."""
    spread_nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per spread group (`JobSpec.spread`), members of its active allocations per node (no
    zero entries): the scheduler's spread limit reads it instead of scanning allocations."""
    consolidations: dict[str, ev.ConsolidationPlanned] = field(default_factory=dict)
    """Per blocked job, the consolidation under way for it (until it is placed, cancelled, or
    its moved allocations have all ended and the nomination lapsed)."""
    settle_ready: set[str] = field(default_factory=set)
    """Active allocations the scheduler must settle: every member exited, a member failed,
    or a node of theirs was lost."""
    growable: set[str] = field(default_factory=set)
    """Active allocations of elastic gangs (`min_members < replicas`, not services) holding
    fewer members than `replicas`: the scheduler's grow pass reads only these."""
    heartbeating: set[str] = field(default_factory=set)
    """Nodes that promised heartbeats (and can be declared lost for silence)."""


@dataclass
class MigLedger:
    """MIG re-geometry under way and its rate limit's history: written by the preemption
    service's requests and the node agents' reports, read by the preemption and scheduler
    deciders (`services.domain.policy.regeometry`) and the simulated agent."""

    mig_requests: dict[str, ev.MigReconfigurationRequested] = field(default_factory=dict)
    """Per node, the MIG re-geometry requested and not yet reported done (one at a time); the
    node is nominated to the request's job meanwhile."""
    mig_history: dict[str, list[int]] = field(default_factory=dict)
    """Per node, times of its latest MIG re-geometry requests (the rate limit's window; at
    most `MIG_HISTORY` kept)."""


@dataclass
class AgentIndexes:
    """What the node agents read to act on their own node: the active allocations per node and
    the ones whose job was cancelled."""

    node_allocations: dict[str, set[str]] = field(default_factory=dict)
    """Active allocations per node."""
    cancelling: set[str] = field(default_factory=set)
    """Active allocations of cancelled jobs."""


@dataclass
class QuotaLedger:
    """What only the quota service reads: the capacity pending jobs wait for and the decayed
    past usage behind `Ledger.usage_at` (the queue's usage tie-break)."""

    pending_gpu_milli: dict[str, int] = field(default_factory=dict)
    """Per tenant, GPU capacity its pending jobs wait for."""
    decayed_usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per tenant (own work), time-decayed past usage in milli-GPU·ms and the event time it
    was folded up to (`services.domain.policy.usage`); kept only while `policy.usage_half_life_s`
    is set."""


@dataclass
class Intake:
    """The acceptance bookkeeping: leader epochs seen, decisions ignored as stale, events
    dead-lettered, and client requests waiting for admission's answer (`RequestRefused`,
    `JobRejected`). Written by `Ledger.fold`'s acceptance step and the request handlers; read
    by admission, the hosts' metrics and the projection's `why`."""

    leader_epochs: dict[str, int] = field(default_factory=dict)
    """Highest leader epoch seen per service role (the role of the event type, never the
    producer's claim)."""
    stale_decisions: int = 0
    """Decisions ignored because a newer leader of their service had already decided."""
    dead_letters: int = 0
    """Events dead-lettered (`DeadLettered` folded)."""
    refusals: dict[int, RequestRefusal] = field(default_factory=dict)
    """Client requests to refuse, by stream sequence, until admission's `RequestRefused`
    for them is folded: a second submission of a job id with other content, an unreadable
    submission of an existing job, a cancel of a job its tenant does not have."""
    invalid_submissions: dict[str, RequestRefusal] = field(default_factory=dict)
    """Per job id never submitted before, its first submission that could not be decoded or
    applied (dead-lettered): admission answers it with `JobRejected` (`InvalidSpec`)."""


@dataclass
class Ledger:
    """Folded state of the whole log: what every decider reads, plus named sub-records for
    what one service (or the acceptance step) reads alone (each documents its readers)."""

    config: ConfigState = field(default_factory=ConfigState)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    allocations: dict[str, AllocationRecord] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    fleet: Fleet = field(default_factory=Fleet)
    submitted: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    active: set[str] = field(default_factory=set)
    tenant_gpu_milli: dict[str, int] = field(default_factory=dict)
    tenant_by_model: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (tenant, GPU model), GPU capacity in use by all its work (for per-model lending
    and borrowing limits; read by the scheduler, preemption and quota); a member counts
    under the model of its first GPU."""
    pending_dependent: set[str] = field(default_factory=set)
    """The pending jobs that name dependencies (`JobSpec.depends_on`), met or not (read by
    the scheduler and quota: a job waiting on a dependency is not demand)."""
    fair_shares: dict[str, ev.TenantShare] = field(default_factory=dict)
    """Per tenant, its latest fair share (`FairShareUpdated`)."""
    nominations: dict[str, set[str]] = field(default_factory=dict)
    """Per beneficiary job, the nodes nominated to it by a preemption or re-geometry."""
    backfills: dict[str, set[str]] = field(default_factory=dict)
    """Per reserving job, active allocations placed as preemptible backfill on its
    reservation."""
    awaiting_start: set[str] = field(default_factory=set)
    """Active allocations with members not yet started."""
    expected: TimeIndex = field(default_factory=TimeIndex)
    """Per active allocation: expected end (duration hint), checkpoint completion and
    deadline of a requested preemption."""
    time_limits: TimeIndex = field(default_factory=TimeIndex)
    """Per running allocation of a job with a time limit: when the limit is reached (kind
    `limit`); cleared when `TimeLimitReached` is folded or the allocation ends."""
    nodes_version: int = 0
    """Bumped whenever a node registers, is lost or comes back."""
    last_seq: int = 0
    folding_seq: int = 0
    """Sequence of the event being folded (set by `apply`, for handlers)."""
    sched: SchedulerIndexes = field(default_factory=SchedulerIndexes)
    """Read by the scheduler only."""
    mig: MigLedger = field(default_factory=MigLedger)
    """MIG re-geometry under way (preemption, scheduler, simulated agents)."""
    agents: AgentIndexes = field(default_factory=AgentIndexes)
    """Read by the node agents only."""
    quota: QuotaLedger = field(default_factory=QuotaLedger)
    """Read by the quota service only (and `usage_at`)."""
    intake: Intake = field(default_factory=Intake)
    """The acceptance step's bookkeeping (admission answers the refused requests)."""

    # ------------------------------------------------------------------ evolve

    def apply(self, seq: int, event: ev.Event) -> Ledger:
        """Fold one event (stream sequence `seq`); `fold` says what it did. Raises `Refused`
        (changing nothing) for an event that contradicts the folded state."""
        self.fold(seq, event)
        return self

    def fold(self, seq: int, event: ev.Event) -> Refusal | None:
        """Fold one event under the acceptance rules (services/domain/fold/acceptance.py): None if
        it was accepted, else why it changed nothing. A decision or node fact whose producer is
        not of the role that produces its type (`events.subjects.role_of`) raises
        `Refused` (`WrongProducer`). A decision carrying a leader epoch older than one already
        seen for the role of its type is ignored: it comes from a deposed leader. Raises
        `Refused` before any change for an event that contradicts the state."""
        if seq > self.last_seq:
            self.last_seq = seq
        self.folding_seq = seq
        wrong = producer_problem(event)
        if wrong is not None:  # a forgery or a bug: raised, so the host dead-letters it
            raise Refused(FoldRefusal.WrongProducer, wrong)
        if getattr(event, "leader_epoch", 0) and isinstance(event, ev.Decision):
            role = role_of(type(event)) or event.producer.partition("/")[0]
            seen = self.intake.leader_epochs.get(role, 0)
            if event.leader_epoch < seen:
                self.intake.stale_decisions += 1
                return Refusal(
                    FoldRefusal.StaleLeaderEpoch,
                    f"{role} decision of epoch {event.leader_epoch}; epoch {seen} already decided",
                )
            self.intake.leader_epochs[role] = event.leader_epoch
        if scheduled_by_quota(event):
            refusal = self._not_scheduled(
                cast("ev.TenantConfigured | ev.PriorityClassConfigured | ev.ServiceScaled", event)
            )
            if refusal is not None:
                return refusal
        handler = _HANDLERS.get(type(event))
        if handler is None:
            return None
        job_id = getattr(event, "job_id", None)
        if isinstance(event, (ev.JobCancelled, ev.ServiceScaled)):  # named by its tenant
            job_id = self.job_key(event.tenant, event.job_id)
        job = self.jobs.get(job_id) if job_id is not None else None
        was_up = job is not None and job.state in _UP
        was_over = job is not None and job.state in TERMINAL
        refusal = cast("Refusal | None", handler(self, event))
        if job is not None and job.array_parent is not None:
            self._task_changed(job, was_up, was_over, event.occurred_at_ms)
        if job is not None and job.service is not None and (job.state in _UP) != was_up:
            svc = self.jobs.get(job.service)
            if svc is not None:
                svc.replicas_up += 1 if not was_up else -1
                self._service_state(svc)
        return refusal

    def _task_changed(self, task: JobRecord, was_up: bool, was_over: bool, at_ms: int) -> None:
        """An array's counts and state after an event about one of its tasks."""
        parent = self.jobs.get(task.array_parent or "")
        if parent is None:
            return
        up = task.state in _UP
        if up != was_up:
            parent.tasks_up += 1 if up else -1
            parent.tasks_started = True
        if task.state in TERMINAL and not was_over:
            state = str(task.state)
            parent.tasks_ended[state] = parent.tasks_ended.get(state, 0) + 1
        self._array_state(parent, at_ms)

    def _array_state(self, parent: JobRecord, at_ms: int) -> None:
        """An array job is `pending` until a task is placed, `running` while one is, and ends
        when every task has: `completed` if all completed, `failed` if one failed or timed
        out, else `cancelled`. Its message counts its tasks by state."""
        if parent.state in TERMINAL or parent.state == JobState.submitted:
            return
        assert isinstance(parent.spec.array, ev.ArraySpec)  # called for array parents only
        count = parent.spec.array.count
        ended = parent.tasks_ended
        done = sum(ended.values())
        waiting = count - done - parent.tasks_up
        parts = [f"{parent.tasks_up} running", f"{waiting} pending"] + [
            f"{n} {s}" for s, n in sorted(ended.items())
        ]
        parent.message = f"{count} tasks: " + ", ".join(parts)
        if done >= count:
            if ended.get(JobState.completed, 0) == count:
                parent.state = JobState.completed
            elif ended.get(JobState.failed, 0) or ended.get(JobState.timeout, 0):
                parent.state = JobState.failed
            else:
                parent.state = JobState.cancelled
            parent.finished_ms = at_ms
        else:
            parent.state = JobState.running if parent.tasks_up else JobState.pending

    def tasks_of(self, array_id: str) -> list[JobRecord]:
        """The task records of an array job, by index."""
        parent = self.jobs.get(array_id)
        if parent is None or not parent.spec.array:
            return []
        first, count = parent.spec.array.first, parent.spec.array.count
        ids = (task_id(array_id, first + i) for i in range(count))
        return [r for r in map(self.jobs.get, ids) if r is not None and r.array_parent == array_id]

    def _service_state(self, svc: JobRecord) -> None:
        """A service is `running` while at least one replica is placed, else `pending`
        (admitted, every replica waiting); submitted and terminal states are its own."""
        if svc.state not in TERMINAL and svc.state != JobState.submitted:
            svc.state = JobState.running if svc.replicas_up > 0 else JobState.pending

    def _not_scheduled(
        self, e: ev.TenantConfigured | ev.PriorityClassConfigured | ev.ServiceScaled
    ) -> Refusal | None:
        """None if the quota role's change `e` is what a schedule in force produces at its
        time (services/quota/decider.py `_scheduled`), else why not (`NotScheduled`): it names
        a schedule in force (`correlation_id` `schedule:<name>`), the schedule's latest fire
        time at the event's time (`causation_id` `<name>@<fire ms>`), and carries exactly that
        schedule's change applied to what is in force (a tenant's or class's other fields
        unchanged; a service's replicas as scheduled)."""
        what = f"{type(e).__name__} from {e.producer[:100]!r}"

        def refused(why: str) -> Refusal:
            return Refusal(FoldRefusal.NotScheduled, f"{what}: {why}")

        corr = e.correlation_id
        if not corr.startswith(SCHEDULE_PREFIX):
            return refused(f"correlation id {corr[:100]!r} names no schedule")
        name = corr[len(SCHEDULE_PREFIX) :]
        s = self.config.schedules.get(name)
        if s is None or s.removed:
            return refused(f"no schedule {name[:100]!r} in force")
        cause, _, fire = e.causation_id.rpartition("@")
        if cause != name or not fire.removeprefix("-").isdigit() or len(fire) > 20:
            return refused(f"causation id {e.causation_id[:100]!r} is not '{name}@<fire ms>'")
        latest = last_fire_ms(s.cron, s.timezone, e.occurred_at_ms)
        if latest is None or int(fire) != latest:
            return refused(
                f"schedule {name!r} last fired at {latest} ms by {e.occurred_at_ms}, not {fire}"
            )
        if isinstance(e, ev.ServiceScaled):
            change = next((c for c in s.services if c.job_id == e.job_id), None)
            key = self.job_key(e.tenant, e.job_id)
            job = self.jobs.get(key) if key is not None else None
            if change is None or job is None:
                return refused(f"schedule {name!r} scales no service {e.job_id!r} of {e.tenant!r}")
            if e.replicas != change.replicas:
                return refused(
                    f"schedule {name!r} sets {e.job_id} to {change.replicas} replicas, "
                    f"not {e.replicas}"
                )
            return None
        if isinstance(e, ev.TenantConfigured):
            t_change = next((c for c in s.tenants if c.tenant == e.tenant), None)
            if t_change is None:
                return refused(f"schedule {name!r} does not change tenant {e.tenant!r}")
            want: Any = changed_tenant(self.config.tenants.get(e.tenant), t_change)
        else:
            c_change = next((c for c in s.priority_classes if c.name == e.name), None)
            if c_change is None:
                return refused(f"schedule {name!r} does not change class {e.name!r}")
            want = changed_class(self.config.classes.get(e.name), c_change)
        differ = [
            f"{f}={getattr(e, f)!r} (scheduled {getattr(want, f)!r})"
            for f in type(e).__struct_fields__
            if f not in _ENVELOPE and getattr(e, f) != getattr(want, f)
        ]
        if differ:
            return refused(f"not what schedule {name!r} sets: {'; '.join(differ)[:300]}")
        return None

    # ------------------------------------------------------------------ queries

    def job_key(self, tenant: str, name: str) -> str | None:
        """The key of `tenant`'s job named `name` (the id it submitted, or a task
        `<array>@<i>` or replica `<service>~<i>` of one), None when the tenant has no such
        job: another tenant's job of that id is no answer, so nothing a tenant asks reveals
        another tenant's ids. A key (`~~`) is no name."""
        if TENANT_KEY_SEPARATOR in name:
            return None
        base, suffix = name, ""
        for sep in (ARRAY_SEPARATOR, REPLICA_SEPARATOR):
            head, found, index = name.rpartition(sep)
            if found and head and index.isdigit():
                base, suffix = head, sep + index
                break
        for key in (base, tenant_job_key(tenant, base)):
            rec = self.jobs.get(key)
            if rec is not None and rec.tenant == tenant and rec.name in (None, base):
                if rec.service is not None or rec.array_parent is not None:
                    return None  # a task or replica is named through its job
                full = key + suffix
                got = self.jobs.get(full)
                return full if got is not None and got.tenant == tenant else None
        return None

    def _new_key(self, tenant: str, name: str) -> str:
        """The key of a new job of `tenant` named `name`: the id itself, unless another
        tenant's job (or unreadable first submission) holds it."""
        if name not in self.jobs and name not in self.intake.invalid_submissions:
            return name
        return tenant_job_key(tenant, name)

    def _invalid_key(self, tenant: str, name: str) -> str | None:
        """The key of `tenant`'s unreadable first submission of `name`, if it has one."""
        for key in (name, tenant_job_key(tenant, name)):
            bad = self.intake.invalid_submissions.get(key)
            if bad is not None and bad.tenant == tenant:
                return key
        return None

    def gang_request(self, job: JobRecord) -> GangRequest:
        """The placement request of a job (time-slicing allowed by its class)."""
        cls = self.config.classes.get(job.spec.priority_class)
        return gang_request(job, allow_timeslice=cls is not None and cls.allow_timeslice)

    def nominated_nodes(
        self, except_jobs: Container[str] = frozenset(), now_ms: int | None = None
    ) -> frozenset[str]:
        """Nodes whose freed capacity is promised to a beneficiary not in `except_jobs`.

        With `now_ms`, a nomination expires `policy.nomination_ttl_s` after its last victim
        allocation ended (the beneficiary could not use it, e.g. another gang landed first)."""
        out: set[str] = set()
        for beneficiary in sorted(self.nominations):
            if beneficiary in except_jobs:
                continue
            if (
                now_ms is not None
                and self.nomination_expires_ms(beneficiary) is not None
                and (
                    now_ms >= self.nomination_expires_ms(beneficiary)  # type: ignore[operator]  # not None: checked just above
                )
            ):
                continue
            for a in sorted(self.nominations[beneficiary]):
                rec = self.allocations.get(a)
                if rec is not None:
                    out.update(rec.nodes())
        for node in sorted(self.mig.mig_requests):
            if self.mig.mig_requests[node].job_id not in except_jobs:
                out.add(node)
        return frozenset(out)

    def nomination_expires_ms(self, beneficiary: str) -> int | None:
        """When the beneficiary's nomination lapses: the TTL after its last victim ended
        (None while a victim is still being released)."""
        ends = []
        for a in self.nominations.get(beneficiary, ()):
            rec = self.allocations.get(a)
            if rec is None:
                continue
            end = rec.ended_ms if rec.ended_ms is not None else rec.resized_ms
            if end is None or (rec.ended_ms is None and rec.preemption is not None):
                return None
            ends.append(end)
        if not ends:
            return None
        return max(ends) + self.config.policy.nomination_ttl_s * 1000

    def replicas_of(self, service_id: str) -> list[JobRecord]:
        """The replica records of a service, by index (every one ever created)."""
        svc = self.jobs.get(service_id)
        if svc is None:
            return []
        ids = (replica_id(service_id, i) for i in range(svc.replicas_created))
        return [r for r in map(self.jobs.get, ids) if r is not None and r.service == service_id]

    def member_models(
        self, members: Iterable[MemberPlacement], per_member_milli: int
    ) -> dict[str, int]:
        """GPU capacity of `members` per GPU model (a member counts under the model of its
        first GPU; unknown nodes are skipped)."""
        out: dict[str, int] = {}
        for m in members:
            node = self.nodes.get(m.node)
            if node is None or not m.gpus:
                continue
            model = next((g.model for g in node.info.gpus if g.index == m.gpus[0]), None)
            if model is not None:
                out[model] = out.get(model, 0) + per_member_milli
        return out

    def _count_models(self, tenant: str, by_model: dict[str, int], sign: int) -> None:
        """Add (`sign` 1) or take away (-1) capacity per GPU model from `tenant_by_model`;
        an entry that reaches 0 is dropped."""
        for model in sorted(by_model):
            key = (tenant, model)
            left = self.tenant_by_model.get(key, 0) + sign * by_model[model]
            if left:
                self.tenant_by_model[key] = left
            else:
                self.tenant_by_model.pop(key, None)

    def usage_at(self, tenant: str, now_ms: int) -> int:
        """The tenant's time-decayed past usage (milli-GPU·ms) at `now_ms`; 0 when
        `policy.usage_half_life_s` is off."""
        half_life = self.config.policy.usage_half_life_s
        if half_life <= 0:
            return 0
        value, since = self.quota.decayed_usage.get(tenant, (0, now_ms))
        rate = self.tenant_gpu_milli.get(tenant, 0)
        return advance(value, since, rate, max(now_ms, since), step_ms(half_life))

    def _accrue(self, tenant: str, at_ms: int) -> None:
        """Fold the tenant's usage up to `at_ms` at its current rate (call before the rate
        changes). Event times never run backwards here: an earlier time is clamped."""
        half_life = self.config.policy.usage_half_life_s
        if half_life <= 0:
            return
        value, since = self.quota.decayed_usage.get(tenant, (0, at_ms))
        at = max(at_ms, since)
        rate = self.tenant_gpu_milli.get(tenant, 0)
        self.quota.decayed_usage[tenant] = (advance(value, since, rate, at, step_ms(half_life)), at)

    # ------------------------------------------------------------------ handlers

    def _refuse(
        self,
        request: str,
        job_id: str,
        tenant: str,
        reason: str,
        message: str,
        cause: str = "",
        **details: Any,
    ) -> None:
        """Record a client request to refuse; one whose ids cannot name a subject is only
        dead-lettered (an answer could not be published)."""
        try:
            ev.validate_token("job id", job_id)
            ev.validate_tenant(tenant)
        except ev.InvalidId:
            return
        seq = self.folding_seq
        self.intake.refusals[seq] = RequestRefusal(
            seq, request, job_id, tenant, reason, message, details, cause
        )

    def _submitted(self, e: ev.JobSubmitted) -> Refusal | None:
        job_id = e.job.job_id
        if REPLICA_SEPARATOR in job_id or ARRAY_SEPARATOR in job_id:
            # `~` names replicas, `@` array tasks: no record, the id stays theirs
            try:
                ev.validate_job_id(job_id)
            except ev.InvalidId as exc:  # (an unroutable id is admission's to reject)
                if exc.reason.startswith((repr(REPLICA_SEPARATOR), repr(ARRAY_SEPARATOR))):
                    message = str(exc)
                    self._refuse(
                        "JobSubmitted",
                        job_id,
                        e.job.tenant,
                        RequestReason.InvalidSpec,
                        message,
                        e.event_id,
                    )
                    return Refusal(FoldRefusal.InvalidSpec, message)
        tenant = e.job.tenant
        key = self.job_key(tenant, job_id)  # ids are per tenant: only its own job is a match
        first = self.jobs.get(key) if key is not None else None
        if first is not None:
            if e.job != first.client_spec:  # same content = a retry: first one wins, silently
                self._refuse_conflict(e, first)
            return Refusal(FoldRefusal.DuplicateJob, f"job {job_id!r} was already submitted")
        invalid = self._invalid_key(tenant, job_id)
        unreadable = self.intake.invalid_submissions.get(invalid) if invalid is not None else None
        if unreadable is not None:  # the id's first submission could not be read
            self._refuse(
                "JobSubmitted",
                job_id,
                e.job.tenant,
                RequestReason.JobIdConflict,
                f"job id {job_id!r} is already taken by an unreadable submission at seq "
                f"{unreadable.request_seq} (rejected, InvalidSpec); this submission was "
                "ignored: submit under a new job id",
                e.event_id,
                existing_seq=unreadable.request_seq,
            )
            return Refusal(
                FoldRefusal.DuplicateJob, f"job id {job_id!r} is taken by an unreadable submission"
            )
        key = self._new_key(tenant, job_id)
        self.jobs[key] = JobRecord(
            spec=e.job if key == job_id else msgspec.structs.replace(e.job, job_id=key),
            submitted_ms=e.occurred_at_ms,
            submit_event_id=e.event_id,
            submit_seq=self.folding_seq,
            desired_replicas=e.job.replicas if e.job.is_service else 0,
            name=None if key == job_id else job_id,
        )
        self.submitted.add(key)
        return None

    def _refuse_conflict(self, e: ev.JobSubmitted, first: JobRecord) -> None:
        job_id = e.job.job_id
        if first.unreadable:
            what = f"by a submission that was rejected ({first.reason})"
            diffs: list[str] = []
        else:
            diffs = spec_differences(first.client_spec, e.job)
            what = "by a submission with other content (" + "; ".join(diffs) + ")"
        self._refuse(
            "JobSubmitted",
            job_id,
            e.job.tenant,
            RequestReason.JobIdConflict,
            f"job id {job_id!r} is already taken {what} at seq {first.submit_seq}; this "
            "submission was ignored: submit under a new job id",
            e.event_id,
            existing_seq=first.submit_seq,
            differences=diffs,
        )

    def _admitted(self, e: ev.JobAdmitted) -> Refusal | None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state != JobState.submitted:
            return _not_in_state(e.job_id, job, "submitted")
        job.state, job.priority, job.preemptible, job.slo_class = (
            JobState.pending,
            e.priority,
            e.preemptible,
            e.slo_class,
        )
        job.admitted_ms = job.pending_since_ms = e.occurred_at_ms
        if e.time_limit_s is not msgspec.UNSET:
            job.time_limit_s = e.time_limit_s
        self.submitted.discard(e.job_id)
        if job.spec.is_service:  # the service runs as its replicas: they are queued
            self._reconcile(job, e.occurred_at_ms)  # pending until a replica is placed
            return None
        if job.spec.array:  # an array runs as its tasks: they are queued
            self._create_tasks(job, e.occurred_at_ms)
            return None
        self._enqueue(e.job_id)
        return None

    def _create_tasks(self, parent: JobRecord, at_ms: int) -> None:
        arr = parent.spec.array
        assert isinstance(arr, ev.ArraySpec)  # called for array parents only
        for i in range(arr.first, arr.first + arr.count):
            tid = task_id(parent.job_id, i)
            if tid in self.jobs:  # cannot happen: `@` is refused in submitted ids
                continue
            self.jobs[tid] = child_record(
                parent,
                task_spec(parent.spec, i),
                at_ms,
                array_parent=parent.job_id,
                time_limit_s=parent.time_limit_s,
            )
            self._enqueue(tid)
        self._array_state(parent, at_ms)

    def _rejected(self, e: ev.JobRejected) -> Refusal | None:
        invalid = self.intake.invalid_submissions.pop(e.job_id, None)
        job = self.jobs.get(e.job_id)
        if job is None and invalid is not None:  # its only submission could not be read
            job = self.jobs[e.job_id] = JobRecord(
                spec=JobSpec(job_id=e.job_id, tenant=e.tenant),
                submitted_ms=e.occurred_at_ms,
                submit_event_id=invalid.cause,
                submit_seq=invalid.request_seq,
                unreadable=True,
                name=None if invalid.job_id == e.job_id else invalid.job_id,
            )
        if job is None or job.state != JobState.submitted:
            return _not_in_state(e.job_id, job, "submitted")
        job.state, job.reason, job.message, job.details = (
            JobState.rejected,
            e.reason,
            e.message,
            e.details,
        )
        job.finished_ms = e.occurred_at_ms
        self.submitted.discard(e.job_id)
        return None

    def _cancelled(self, e: ev.JobCancelled) -> Refusal | None:
        key = self.job_key(e.tenant, e.job_id)  # the tenant's own job of that id, or none
        job = self.jobs.get(key) if key is not None else None
        if job is None:
            message = f"no job {e.job_id!r} in tenant {e.tenant!r}: nothing to cancel"
            self._refuse(
                "JobCancelled", e.job_id, e.tenant, RequestReason.UnknownJob, message, e.event_id
            )
            return Refusal(FoldRefusal.UnknownJob, message)
        if job.state in TERMINAL:
            return _not_in_state(e.job_id, job, "not finished")
        if job.service is not None:
            message = (
                f"{e.job_id!r} is replica {job.replica} of service {job_name(job.service)!r}: "
                "scale the service (or cancel it) instead"
            )
            self._refuse(
                "JobCancelled", e.job_id, e.tenant, RequestReason.InvalidSpec, message, e.event_id
            )
            return Refusal(FoldRefusal.InvalidSpec, message)
        job.cancel_requested = True
        job.reason = e.reason
        if job.spec.array and job.state != JobState.submitted:  # its tasks stop; it ends after
            for task in self.tasks_of(job.job_id):
                if task.state in TERMINAL or task.cancel_requested:
                    continue
                task.cancel_requested, task.reason = True, e.reason
                if task.allocation_id is not None:
                    self.agents.cancelling.add(task.allocation_id)
                else:
                    task.state, task.finished_ms = JobState.cancelled, e.occurred_at_ms
                    self._dequeue(task.job_id)
                    self._end_nomination(task.job_id)
                    job.tasks_ended["cancelled"] = job.tasks_ended.get("cancelled", 0) + 1
            self._array_state(job, e.occurred_at_ms)
            return None
        if job.spec.is_service:  # every replica stops; the service ends now
            job.state, job.finished_ms, job.desired_replicas = (
                JobState.cancelled,
                e.occurred_at_ms,
                0,
            )
            self.submitted.discard(job.job_id)
            self._reconcile(job, e.occurred_at_ms)
            return None
        if job.allocation_id is not None:
            self.agents.cancelling.add(job.allocation_id)
        else:
            job.state, job.finished_ms = JobState.cancelled, e.occurred_at_ms
            self.submitted.discard(job.job_id)
            self._dequeue(job.job_id)
            self._end_nomination(job.job_id)
        return None

    def _scaled(self, e: ev.ServiceScaled) -> Refusal | None:
        self.config.note_fired(e)  # a time-of-day policy's replica change
        key = self.job_key(e.tenant, e.job_id)
        svc = self.jobs.get(key) if key is not None else None
        if svc is None:
            message = f"no job {e.job_id!r} in tenant {e.tenant!r}: nothing to scale"
            self._refuse(
                "ServiceScaled", e.job_id, e.tenant, RequestReason.UnknownJob, message, e.event_id
            )
            return Refusal(FoldRefusal.UnknownJob, message)
        problem = (
            "is not a service (submit it with kind: service)"
            if not svc.spec.is_service
            else f"is {svc.state}"
            if svc.state in TERMINAL
            else None
        )
        if problem is not None:
            message = f"job {e.job_id!r} {problem}: nothing to scale"
            self._refuse(
                "ServiceScaled", e.job_id, e.tenant, RequestReason.InvalidSpec, message, e.event_id
            )
            return Refusal(FoldRefusal.InvalidSpec, message)
        svc.desired_replicas = e.replicas
        if svc.state != JobState.submitted:  # before admission: admission creates them
            self._reconcile(svc, e.occurred_at_ms)
        return None

    def _reconcile(self, svc: JobRecord, at_ms: int) -> None:
        """Make the service's replicas what it wants: replicas below `desired_replicas` exist
        and are queued (created, or a finished one queued again); those at and above it stop
        (a pending one at once, a placed one like a cancel, without requeue)."""
        for i in range(svc.desired_replicas):
            rid = replica_id(svc.job_id, i)
            rec = self.jobs.get(rid)
            if i >= svc.replicas_created:
                if rec is not None:  # the id is another job's: the replica cannot exist
                    continue
                self.jobs[rid] = child_record(
                    svc, replica_spec(svc.spec, i), at_ms, service=svc.job_id, replica=i
                )
                svc.replicas_created = i + 1
                self._enqueue(rid)
            elif rec is not None and rec.service == svc.job_id and rec.state in TERMINAL:
                rec.state, rec.cancel_requested, rec.finished_ms = JobState.pending, False, None
                rec.reason, rec.message, rec.details = None, "", {}
                rec.pending_since_ms = at_ms
                self._enqueue(rid)
        for i in range(svc.replicas_created - 1, svc.desired_replicas - 1, -1):  # highest first
            rec = self.jobs.get(replica_id(svc.job_id, i))
            if (
                rec is None
                or rec.service != svc.job_id
                or rec.state in TERMINAL
                or rec.cancel_requested
            ):
                continue
            rec.cancel_requested, rec.reason = True, EvictReason.ScaledDown
            if rec.allocation_id is not None:
                self.agents.cancelling.add(rec.allocation_id)
            else:
                rec.state, rec.finished_ms = JobState.cancelled, at_ms
                self._dequeue(rec.job_id)
                self._end_nomination(rec.job_id)

    def _pending_reason(self, e: ev.PendingReasonChanged) -> Refusal | None:
        job = self.jobs.get(e.job_id)
        if job is None:
            return _not_in_state(e.job_id, job, "known")
        job.reason, job.message, job.details = e.reason, e.message, e.details
        job.pending_changes += 1
        return None

    def _placed(self, e: ev.GangPlaced) -> Refusal | None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state != JobState.pending:
            return _not_in_state(e.job_id, job, "pending")
        if e.allocation_id in self.allocations:
            return Refusal(
                FoldRefusal.DuplicateAllocation, f"allocation {e.allocation_id!r} exists"
            )
        try:  # first, and atomic: a conflict changes nothing
            self.fleet.allocate(
                e.allocation_id, job.tenant, to_placement(e.members), self.gang_request(job)
            )
        except (PlacementConflict, ValueError) as err:
            raise Refused(FoldRefusal.PlacementConflict, f"{e.allocation_id}: {err}") from err
        per_member = job.spec.resources.gpu_milli_total()
        rec = AllocationRecord(
            allocation_id=e.allocation_id,
            job_id=e.job_id,
            tenant=e.tenant,
            members=e.members,
            node_names=tuple(sorted({m.node for m in e.members})),
            placed_ms=e.occurred_at_ms,
            gpu_milli=per_member * len(e.members),
            borrowing=e.borrowing,
            start_progress_ms=job.progress_ms,
            backfill_for=e.backfill_for,
        )
        if e.backfill_for is not None:
            self.backfills.setdefault(e.backfill_for, set()).add(e.allocation_id)
        self.allocations[e.allocation_id] = rec
        self.active.add(e.allocation_id)
        self.awaiting_start.add(e.allocation_id)
        if _elastic(job) and len(e.members) < job.spec.replicas:
            self.sched.growable.add(e.allocation_id)
        for node in rec.nodes():
            self.agents.node_allocations.setdefault(node, set()).add(e.allocation_id)
        if job.spec.spread:
            per_node = self.sched.spread_nodes.setdefault(job.spec.spread.group, {})
            for m in e.members:
                per_node[m.node] = per_node.get(m.node, 0) + 1
        self._accrue(job.tenant, e.occurred_at_ms)
        self.tenant_gpu_milli[job.tenant] = self.tenant_gpu_milli.get(job.tenant, 0) + rec.gpu_milli
        by_model = self.member_models(e.members, per_member)
        self._count_models(job.tenant, by_model, 1)
        if not job.preemptible:
            fixed = self.sched.tenant_fixed_gpu_milli
            fixed[job.tenant] = fixed.get(job.tenant, 0) + rec.gpu_milli
            for model, milli in by_model.items():
                key = (job.tenant, model)
                self.sched.tenant_fixed_by_model[key] = (
                    self.sched.tenant_fixed_by_model.get(key, 0) + milli
                )
        job.state, job.allocation_id, job.reason, job.message, job.details = (
            JobState.running,
            e.allocation_id,
            None,
            "",
            {},
        )
        since = job.pending_since_ms
        if job.spec.depends_on:  # the wait counts from when its dependencies were met
            since = dependencies.queued_since_ms(self, job) or since
        job.waited_ms += max(0, e.occurred_at_ms - since)
        job.attempts += 1
        job.declined = None
        job.placements.append((e.occurred_at_ms, e.members))
        self._dequeue(e.job_id)
        self._end_nomination(e.job_id)
        return None

    def _member_refusal(
        self, e: ev.MemberStarted | ev.MemberCheckpointed | ev.MemberExited
    ) -> tuple[AllocationRecord | None, Refusal | None]:
        """The allocation a node's member fact is about, or why the fact is refused: a node
        reports only on members placed on it (`WrongNode`: another node's member, or a rank
        the allocation does not have), under the allocation's own job (`WrongJob`). A fact
        about an allocation the log does not hold changes nothing (a late or replayed fact)."""
        rec = self.allocations.get(e.allocation_id)
        if rec is None:
            return None, None
        member = next((m for m in rec.members if m.rank == e.rank), None)
        if member is None or member.node != e.node:
            where = "no such rank" if member is None else f"it runs on {member.node!r}"
            return None, Refusal(
                FoldRefusal.WrongNode,
                f"{type(e).__name__} from node {e.node!r} for member {e.rank} of allocation "
                f"{e.allocation_id!r}: {where}",
            )
        if e.job_id != rec.job_id:
            return None, Refusal(
                FoldRefusal.WrongJob,
                f"{type(e).__name__} names job {e.job_id!r}; allocation {e.allocation_id!r} "
                f"is job {rec.job_id!r}",
            )
        return rec, None

    def _member_started(self, e: ev.MemberStarted) -> Refusal | None:
        rec, refusal = self._member_refusal(e)
        if refusal is not None:
            return refusal
        if rec is not None and not rec.ended:
            rec.started.setdefault(e.rank, e.occurred_at_ms)
            if len(rec.started) == len(rec.members):
                self.awaiting_start.discard(e.allocation_id)
                job = self.jobs.get(rec.job_id)
                if job is not None and job.spec.duration_s is not None:
                    remaining = max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)
                    # members added by a grow end with those started first (simulated agents)
                    began = min if rec.resized_ms is not None else max
                    self.expected.set(
                        e.allocation_id, "end", began(rec.started.values()) + remaining
                    )
                if job is not None and job.time_limit_s is not None:
                    self.time_limits.set(
                        e.allocation_id,
                        "limit",
                        max(rec.started.values()) + job.time_limit_s * 1000,
                    )
        return None

    def _member_checkpointed(self, e: ev.MemberCheckpointed) -> Refusal | None:
        rec, refusal = self._member_refusal(e)
        if rec is not None:
            rec.checkpoints[e.rank] = (e.step, e.progress_ms, e.occurred_at_ms)
        return refusal

    def _member_exited(self, e: ev.MemberExited) -> Refusal | None:
        rec, refusal = self._member_refusal(e)
        if rec is not None:
            rec.exited.setdefault(e.rank, (e.outcome, e.occurred_at_ms))
            if not rec.ended and (e.outcome == "failed" or rec.all_exited()):
                self.sched.settle_ready.add(e.allocation_id)
            leaving = rec.leaving()
            if not rec.ended and leaving is not None and all(r in rec.exited for r in leaving):
                self.sched.settle_ready.add(e.allocation_id)  # a shrink to settle (`GangResized`)
        return refusal

    def _preemption_requested(self, e: ev.PreemptionRequested) -> Refusal | None:
        rec = self.allocations.get(e.allocation_id)
        job = self.jobs.get(e.job_id)
        busy = None if rec is None or rec.preemption is None else "already being preempted"
        refusal = _not_running(e.allocation_id, rec, job, busy)
        if refusal is not None:
            return refusal
        assert rec is not None and job is not None
        if isinstance(e.ranks, tuple):
            self._check_shrink(e, rec, job)
        rec.preemption = e
        if not isinstance(e.ranks, tuple):  # a shrinking gang keeps running
            job.state = JobState.preempting
        self._expect_stop(e.allocation_id, job, e.occurred_at_ms, e.deadline_ms)
        self.nominations.setdefault(e.beneficiary, set()).add(e.allocation_id)
        return None

    def _expect_stop(self, alloc_id: str, job: JobRecord, asked_ms: int, deadline_ms: int) -> None:
        """When the members asked at `asked_ms` to checkpoint and exit should have saved, and
        when they must be gone (a preemption's or a time limit's deadline)."""
        self.expected.set(alloc_id, "checkpoint", asked_ms + job.spec.checkpoint.save_s * 1000)
        self.expected.set(alloc_id, "deadline", deadline_ms)

    def _withdrawn(self, e: ev.JobWithdrawn) -> Refusal | None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state != JobState.pending or job.service is not None:
            return _not_in_state(e.job_id, job, "pending")
        job.state, job.finished_ms = JobState.cancelled, e.occurred_at_ms
        job.reason, job.message, job.details = e.reason, e.message, e.details
        self._dequeue(e.job_id)
        self._end_nomination(e.job_id)
        return None

    def _time_limit_reached(self, e: ev.TimeLimitReached) -> Refusal | None:
        rec = self.allocations.get(e.allocation_id)
        job = self.jobs.get(e.job_id)
        busy = (
            None if rec is None or rec.time_limit is None else "already stopping at its time limit"
        )
        refusal = _not_running(e.allocation_id, rec, job, busy)
        if refusal is not None:
            return refusal
        assert rec is not None and job is not None
        rec.time_limit = e
        self.time_limits.clear(e.allocation_id)
        if rec.preemption is None:  # else the preemption's instants stand (they come first)
            self._expect_stop(e.allocation_id, job, e.occurred_at_ms, e.deadline_ms)
        return None

    @staticmethod
    def _check_shrink(e: ev.PreemptionRequested, rec: AllocationRecord, job: JobRecord) -> None:
        """A partial preemption names distinct members of the allocation, not all of them,
        and leaves at least `min_members`; else `InvalidResize`."""
        ranks = {m.rank for m in rec.members}
        named = e.ranks if isinstance(e.ranks, tuple) else ()
        left = len(rec.members) - len(set(named))
        if not named or len(set(named)) != len(named) or not set(named) <= ranks:
            raise Refused(
                FoldRefusal.InvalidResize,
                f"ranks {list(named)} are not distinct members of {e.allocation_id}",
            )
        if left < job.spec.members_min() or job.service is not None:
            raise Refused(
                FoldRefusal.InvalidResize,
                f"{e.job_id} would keep {left} members, below its minimum {job.spec.members_min()}",
            )

    def _resized(self, e: ev.GangResized) -> Refusal | None:
        """An elastic gang shrank: the members that left give their capacity back; the
        allocation keeps running with the others (checked first, changed atomically)."""
        rec = self.allocations.get(e.allocation_id)
        job = self.jobs.get(e.job_id)
        if rec is None or rec.ended or job is None or rec.job_id != e.job_id:
            return Refusal(FoldRefusal.NotRunning, f"allocation {e.allocation_id!r} is not running")
        if e.to_members > e.from_members:
            return self._grown(e, rec, job)
        leaving = rec.leaving()
        if leaving is None or not all(r in rec.exited for r in leaving):
            return Refusal(
                FoldRefusal.NotShrinking, f"allocation {e.allocation_id!r} has no members that left"
            )
        kept = tuple(m for m in rec.members if m.rank not in leaving)
        if e.members != kept or (e.from_members, e.to_members) != (len(rec.members), len(kept)):
            raise Refused(
                FoldRefusal.InvalidResize,
                f"{e.allocation_id}: members after the resize must be those that stay",
            )
        old = self.fleet.allocation(e.allocation_id)
        self.fleet.release(e.allocation_id)
        try:
            self.fleet.allocate(e.allocation_id, rec.tenant, to_placement(kept), old.request)
        except (PlacementConflict, ValueError) as err:
            self.fleet.allocate(e.allocation_id, rec.tenant, old.placement, old.request)
            raise Refused(FoldRefusal.PlacementConflict, f"{e.allocation_id}: {err}") from err
        gone = tuple(m for m in rec.members if m.rank in leaving)
        per_member = rec.gpu_milli // len(rec.members)
        freed = per_member * len(gone)
        self._accrue(rec.tenant, e.occurred_at_ms)
        self.tenant_gpu_milli[rec.tenant] = self.tenant_gpu_milli.get(rec.tenant, 0) - freed
        self._count_models(rec.tenant, self.member_models(gone, per_member), -1)
        if not job.preemptible:
            fixed = self.sched.tenant_fixed_gpu_milli
            fixed[rec.tenant] = fixed.get(rec.tenant, 0) - freed
            for model, milli in self.member_models(gone, per_member).items():
                key = (rec.tenant, model)
                self.sched.tenant_fixed_by_model[key] = (
                    self.sched.tenant_fixed_by_model.get(key, 0) - milli
                )
        if job.spec.spread:
            per_node = self.sched.spread_nodes.get(job.spec.spread.group, {})
            for m in gone:
                left = per_node.get(m.node, 0) - 1
                if left > 0:
                    per_node[m.node] = left
                else:
                    per_node.pop(m.node, None)
        for node in rec.nodes():
            self.agents.node_allocations.get(node, set()).discard(e.allocation_id)
        rec.members = kept
        rec.node_names = tuple(sorted({m.node for m in kept}))
        for node in rec.nodes():
            self.agents.node_allocations.setdefault(node, set()).add(e.allocation_id)
        rec.gpu_milli = per_member * len(kept)
        for r in leaving:
            rec.started.pop(r, None)
            rec.exited.pop(r, None)
            rec.checkpoints.pop(r, None)
        rec.preemption = None
        rec.resized_ms = e.occurred_at_ms
        if _elastic(job):
            self.sched.growable.add(e.allocation_id)
        self.sched.settle_ready.discard(e.allocation_id)
        self.expected.clear(e.allocation_id)
        if len(rec.started) == len(rec.members):
            self.awaiting_start.discard(e.allocation_id)
            if job.spec.duration_s is not None:
                remaining = max(0, job.spec.duration_s * 1000 - rec.start_progress_ms)
                self.expected.set(e.allocation_id, "end", min(rec.started.values()) + remaining)
        if rec.all_exited() or any(o == "failed" for o, _ in rec.exited.values()):
            self.sched.settle_ready.add(e.allocation_id)
        job.preemptions.append(
            PreemptionRecord(
                at_ms=e.occurred_at_ms,
                by=e.preempted_by,
                reason=e.reason,
                allocation_id=e.allocation_id,
                checkpointed=e.checkpointed,
                lost_gpu_ms=e.lost_gpu_ms,
            )
        )
        return None

    def _grown(self, e: ev.GangResized, rec: AllocationRecord, job: JobRecord) -> Refusal | None:
        """An elastic gang grew: the new members (the next ranks) are bound on top of the
        running ones, atomically; they start like a placement's members."""
        n = len(rec.members)
        if rec.preemption is not None:
            return Refusal(
                FoldRefusal.NotRunning, f"allocation {e.allocation_id!r} is being preempted"
            )
        added = e.members[n:]
        if (
            (e.from_members, e.to_members) != (n, len(e.members))
            or e.members[:n] != rec.members
            or [m.rank for m in added] != list(range(n, len(e.members)))
            or len(e.members) > job.spec.replicas
            or not _elastic(job)
        ):
            raise Refused(
                FoldRefusal.InvalidResize,
                f"{e.allocation_id}: a grow keeps the {n} members and adds the next ranks, up "
                f"to {job.spec.replicas}",
            )
        old = self.fleet.allocation(e.allocation_id)
        self.fleet.release(e.allocation_id)
        try:
            self.fleet.allocate(e.allocation_id, rec.tenant, to_placement(e.members), old.request)
        except (PlacementConflict, ValueError) as err:
            self.fleet.allocate(e.allocation_id, rec.tenant, old.placement, old.request)
            raise Refused(FoldRefusal.PlacementConflict, f"{e.allocation_id}: {err}") from err
        per_member = rec.gpu_milli // n
        more = per_member * len(added)
        self._accrue(rec.tenant, e.occurred_at_ms)
        self.tenant_gpu_milli[rec.tenant] = self.tenant_gpu_milli.get(rec.tenant, 0) + more
        self._count_models(rec.tenant, self.member_models(added, per_member), 1)
        if not job.preemptible:
            fixed = self.sched.tenant_fixed_gpu_milli
            fixed[rec.tenant] = fixed.get(rec.tenant, 0) + more
            for model, milli in self.member_models(added, per_member).items():
                key = (rec.tenant, model)
                self.sched.tenant_fixed_by_model[key] = (
                    self.sched.tenant_fixed_by_model.get(key, 0) + milli
                )
        if job.spec.spread:
            per_node = self.sched.spread_nodes.setdefault(job.spec.spread.group, {})
            for m in added:
                per_node[m.node] = per_node.get(m.node, 0) + 1
        rec.members = e.members
        rec.node_names = tuple(sorted({m.node for m in e.members}))
        for node in rec.nodes():
            self.agents.node_allocations.setdefault(node, set()).add(e.allocation_id)
        rec.gpu_milli = per_member * len(e.members)
        rec.resized_ms = e.occurred_at_ms
        self.awaiting_start.add(e.allocation_id)
        self.expected.clear(e.allocation_id)  # the end is set again once the new ones start
        if len(e.members) >= job.spec.replicas:
            self.sched.growable.discard(e.allocation_id)
        return None

    def _consolidation_planned(self, e: ev.ConsolidationPlanned) -> Refusal | None:
        job = self.jobs.get(e.job_id)
        if job is None or job.state != JobState.pending:
            return _not_in_state(e.job_id, job, "pending")
        self.sched.consolidations[e.job_id] = e
        return None

    def _mig_requested(self, e: ev.MigReconfigurationRequested) -> Refusal | None:
        node = self.nodes.get(e.node)
        if node is None:
            return Refusal(FoldRefusal.UnknownNode, f"no node {e.node!r}")
        if e.node in self.mig.mig_requests:
            return Refusal(
                FoldRefusal.MigReconfigurationPending,
                f"node {e.node} already has a MIG re-geometry under way",
            )
        history = self.mig.mig_history.setdefault(e.node, [])
        history.append(e.occurred_at_ms)
        del history[:-MIG_HISTORY]
        self.mig.mig_requests[e.node] = e
        return None

    def _mig_reconfigured(self, e: ev.MigReconfigured) -> None:
        node = self.nodes.get(e.node)
        if node is None:
            raise Refused(FoldRefusal.UnknownNode, f"no node {e.node!r}")
        gpus = {g.index: g for g in node.info.gpus}
        gpu = gpus.get(e.gpu_index)
        if gpu is None or gpu.sharing != "mig":
            raise Refused(FoldRefusal.NotMigGpu, f"node {e.node} has no MIG GPU {e.gpu_index}")
        for a in sorted(self.agents.node_allocations.get(e.node, ())):
            if any(m.node == e.node and e.gpu_index in m.gpus for m in self.allocations[a].members):
                raise Refused(
                    FoldRefusal.MigInstanceInUse,
                    f"GPU {e.gpu_index} of {e.node} holds an instance of {a}",
                )
        try:
            layout = layout_text(parse_layout(gpu.model, e.layout))
        except LayoutError as err:
            raise Refused(FoldRefusal.InvalidMigLayout, str(err)) from err
        info = msgspec.structs.replace(
            node.info,
            gpus=tuple(
                msgspec.structs.replace(g, mig_layout=layout) if g.index == e.gpu_index else g
                for g in node.info.gpus
            ),
        )
        try:
            self.fleet.add_node(node_spec(info))  # atomic: a conflict keeps the old spec
        except PlacementConflict as err:
            raise Refused(FoldRefusal.PlacementConflict, f"{e.node}: {err}") from err
        node.info = info
        self.nodes_version += 1
        pending = self.mig.mig_requests.get(e.node)
        if pending is not None and pending.gpu_index == e.gpu_index:
            del self.mig.mig_requests[e.node]

    def _preemption_declined(self, e: ev.PreemptionDeclined) -> None:
        job = self.jobs.get(e.job_id)
        if job is not None:
            job.declined = e.reason

    def _release(self, allocation_id: str, now_ms: int) -> AllocationRecord | None:
        rec = self.allocations.get(allocation_id)
        if rec is None or rec.ended:
            return None
        rec.ended = True
        rec.ended_ms = now_ms
        self.active.discard(allocation_id)
        self.awaiting_start.discard(allocation_id)
        self.sched.settle_ready.discard(allocation_id)
        self.sched.growable.discard(allocation_id)
        self.agents.cancelling.discard(allocation_id)
        self.expected.clear(allocation_id)
        self.time_limits.clear(allocation_id)
        if rec.backfill_for is not None:
            backfilled = self.backfills.get(rec.backfill_for)
            if backfilled is not None:
                backfilled.discard(allocation_id)
                if not backfilled:
                    del self.backfills[rec.backfill_for]
        for node in rec.nodes():
            self.agents.node_allocations.get(node, set()).discard(allocation_id)
        self.fleet.release(allocation_id)
        self._accrue(rec.tenant, now_ms)
        self.tenant_gpu_milli[rec.tenant] = self.tenant_gpu_milli.get(rec.tenant, 0) - rec.gpu_milli
        job = self.jobs.get(rec.job_id)
        if job is not None and job.spec.spread:
            group = job.spec.spread.group
            per_node = self.sched.spread_nodes.get(group, {})
            for m in rec.members:
                left = per_node.get(m.node, 0) - 1
                if left > 0:
                    per_node[m.node] = left
                else:
                    per_node.pop(m.node, None)
            if not per_node:
                self.sched.spread_nodes.pop(group, None)
        job = self.jobs.get(rec.job_id)
        if rec.members:
            per = rec.gpu_milli // len(rec.members)
            self._count_models(rec.tenant, self.member_models(rec.members, per), -1)
        if job is not None and not job.preemptible:
            fixed = self.sched.tenant_fixed_gpu_milli
            fixed[rec.tenant] = fixed.get(rec.tenant, 0) - rec.gpu_milli
            per_member = rec.gpu_milli // len(rec.members) if rec.members else 0
            for model, milli in self.member_models(rec.members, per_member).items():
                key = (rec.tenant, model)
                self.sched.tenant_fixed_by_model[key] = (
                    self.sched.tenant_fixed_by_model.get(key, 0) - milli
                )
        job = self.jobs.get(rec.job_id)
        if job is not None and job.allocation_id == allocation_id:
            job.allocation_id = None
        return rec

    def _evicted(self, e: ev.GangEvicted) -> None:
        rec = self._release(e.allocation_id, e.occurred_at_ms)
        job = self.jobs.get(e.job_id)
        if rec is None or job is None:
            return
        job.progress_ms = e.progress_ms
        if e.reason == EvictReason.Cancelled or job.cancel_requested:
            job.state, job.finished_ms = JobState.cancelled, e.occurred_at_ms
            svc = self.jobs.get(job.service) if job.service is not None else None
            if svc is not None and svc.state not in TERMINAL:  # scaled up again meanwhile
                self._reconcile(svc, e.occurred_at_ms)
        else:  # requeued at once, so the order of GangEvicted/GangRequeued never matters
            job.state, job.pending_since_ms = JobState.pending, e.occurred_at_ms
            self._enqueue(e.job_id)
            job.preemptions.append(
                PreemptionRecord(
                    at_ms=rec.preemption.occurred_at_ms if rec.preemption else e.occurred_at_ms,
                    by=e.preempted_by,
                    reason=e.reason,
                    allocation_id=e.allocation_id,
                    checkpointed=e.checkpointed,
                    lost_gpu_ms=e.lost_gpu_ms,
                )
            )

    def _requeued(self, e: ev.GangRequeued) -> None:
        job = self.jobs.get(e.job_id)
        if job is not None and job.state not in TERMINAL:
            job.resume_step = e.resume_step

    def _completed(self, e: ev.GangCompleted) -> None:
        self._release(e.allocation_id, e.occurred_at_ms)
        job = self.jobs.get(e.job_id)
        if job is not None and job.state not in TERMINAL:
            job.state, job.finished_ms = run_end_state(e), e.occurred_at_ms

    def _failed(self, e: ev.GangFailed) -> None:
        self._release(e.allocation_id, e.occurred_at_ms)
        job = self.jobs.get(e.job_id)
        if job is not None and job.state not in TERMINAL:
            job.state, job.finished_ms, job.reason, job.message = (
                run_end_state(e),
                e.occurred_at_ms,
                e.reason,
                e.message,
            )

    def _node_registered(self, e: ev.NodeRegistered) -> None:
        self.nodes[e.node.name] = NodeRecord(
            info=e.node,
            simulated=e.simulated,
            registered_ms=e.occurred_at_ms,
            last_heartbeat_ms=e.occurred_at_ms if e.heartbeat_s > 0 else None,
        )
        if e.heartbeat_s > 0:
            self.sched.heartbeating.add(e.node.name)
        else:
            self.sched.heartbeating.discard(e.node.name)
        self.fleet.add_node(node_spec(e.node))
        self.nodes_version += 1

    def _heartbeat(self, e: ev.NodeHeartbeat) -> None:
        node = self.nodes.get(e.node)
        if node is not None:
            node.last_heartbeat_ms = e.occurred_at_ms
            if node.lost:
                node.lost = False
                self.fleet.set_schedulable(e.node, True)
                self.nodes_version += 1

    def _node_lost(self, e: ev.NodeLost) -> None:
        node = self.nodes.get(e.node)
        if node is not None and not node.lost:
            node.lost = True
            self.fleet.set_schedulable(e.node, False)
            self.nodes_version += 1
            self.sched.settle_ready.update(self.agents.node_allocations.get(e.node, ()))

    def _fair_share(self, e: ev.FairShareUpdated) -> None:
        self.fair_shares = {s.tenant: s for s in e.shares}

    def _config(self, e: Any) -> None:
        if isinstance(e, ev.PolicyConfigured):
            self._usage_policy(e.policy.usage_half_life_s, e.occurred_at_ms)
        before = (
            self.config.classes.get(e.name) if isinstance(e, ev.PriorityClassConfigured) else None
        )
        self.config.apply(e)
        if before is not None:
            self._class_preemptibility(e.name, before.preemptible)

    def _class_preemptibility(self, name: str, was: bool) -> None:
        """A class whose preemptibility changed (a schedule, or an operator): work of it
        that has not started (pending jobs and replicas, services' later replicas) takes the
        new value; what runs keeps the one it was placed with."""
        now = self.config.classes[name].preemptible
        if now == was:
            return
        for job_id in sorted(self.pending):
            job = self.jobs[job_id]
            if job.spec.priority_class == name:
                job.preemptible = now
        for job in self.jobs.values():
            if job.spec.is_service and job.state not in TERMINAL_STATES:
                if job.spec.priority_class == name:
                    job.preemptible = now

    def _usage_policy(self, half_life_s: int, at_ms: int) -> None:
        """Before a new half-life takes effect: fold usage so far under the old one; start
        every tenant at 0 when it is switched on; forget it when switched off."""
        old = self.config.policy.usage_half_life_s
        if old == half_life_s:
            return
        for tenant in sorted(self.quota.decayed_usage):
            self._accrue(tenant, at_ms)
        if half_life_s <= 0:
            self.quota.decayed_usage.clear()
        elif old <= 0:
            self.quota.decayed_usage = {t: (0, at_ms) for t in sorted(self.tenant_gpu_milli)}

    def _dead(self, e: ev.DeadLettered) -> None:
        """A dead-lettered client message whose subject names a valid tenant and job id is
        answered: the unreadable first submission of a job id is rejected (`InvalidSpec`),
        anything else for that id is refused."""
        self.intake.dead_letters += 1
        target = ev.subjects.client_target(e.subject)
        if target is None:
            return
        kind, tenant, job_id = target
        request = {"submit": "JobSubmitted", "cancel": "JobCancelled"}.get(kind, "ServiceScaled")
        problem = f"could not be decoded or applied: {e.reason}"
        refusal = RequestRefusal(
            e.stream_seq,
            request,
            job_id,
            tenant,
            RequestReason.InvalidSpec,
            f"the {kind} message at seq {e.stream_seq} {problem}",
            {"stream_seq": e.stream_seq, "payload_head": e.payload_head},
            e.event_id,
        )
        if (
            kind == "submit"
            and self.job_key(tenant, job_id) is None
            and self._invalid_key(tenant, job_id) is None
        ):  # the tenant's first submission of the id
            self.intake.invalid_submissions[self._new_key(tenant, job_id)] = refusal
        elif e.stream_seq not in self.intake.refusals:
            self.intake.refusals[e.stream_seq] = refusal

    def _request_refused(self, e: ev.RequestRefused) -> None:
        self.intake.refusals.pop(e.request_seq, None)
        undone = self.refused_creation(e)
        if undone is not None:
            del self.jobs[undone]
            self.submitted.discard(undone)

    def refused_creation(self, e: ev.RequestRefused) -> str | None:
        """The key of the job that `e` says was never created, else None. A log written while
        job ids were global holds, for a submission of another tenant's id, admission's
        `RequestRefused` (`JobIdConflict`): that submission created no job then, so the job
        its fold creates now (under its tenant key, still unanswered) is undone, and such a
        log folds as it did. Admission never refuses a tenant's first submission of an id
        now, so nothing else matches."""
        if e.request != "JobSubmitted" or e.reason != RequestReason.JobIdConflict:
            return None
        key = tenant_job_key(e.tenant, e.job_id)
        job = self.jobs.get(key)
        if (
            job is None
            or job.tenant != e.tenant
            or job.submit_seq != e.request_seq
            or job.state != JobState.submitted
        ):
            return None
        return key

    def _enqueue(self, job_id: str) -> None:
        if job_id not in self.pending:
            self.pending.add(job_id)
            job = self.jobs[job_id]
            if job.spec.depends_on:
                self.pending_dependent.add(job_id)
            self.quota.pending_gpu_milli[job.tenant] = (
                self.quota.pending_gpu_milli.get(job.tenant, 0) + job.gpu_milli()
            )

    def _dequeue(self, job_id: str) -> None:
        if job_id in self.pending:
            self.pending.discard(job_id)
            self.pending_dependent.discard(job_id)
            job = self.jobs[job_id]
            self.quota.pending_gpu_milli[job.tenant] -= job.gpu_milli()

    def _end_nomination(self, job_id: str) -> None:
        self.nominations.pop(job_id, None)
        self.sched.consolidations.pop(job_id, None)


def _elastic(job: JobRecord) -> bool:
    """Whether the job's gang may run with fewer members than `replicas` and grow back."""
    spec = job.spec
    return job.service is None and spec.min_members is not None and spec.min_members < spec.replicas


MIG_HISTORY = 16
_ENVELOPE = frozenset(ev.Event.__struct_fields__)
"""Fields every event has (ids, time, producer): not part of what a schedule sets."""
"""Re-geometry request times kept per node (the rate limit allows at most 16 per window)."""


def _not_running(
    alloc_id: str, rec: AllocationRecord | None, job: JobRecord | None, busy: str | None
) -> Refusal | None:
    """`NotRunning` unless allocation `rec` of `job` runs and is not `busy` with an earlier
    stop request (`busy` says which), else None."""
    if rec is None:
        what = "unknown"
    elif rec.ended:
        what = "ended"
    elif busy is not None:
        what = busy
    elif job is None:
        what = "of no job"
    else:
        return None
    return Refusal(FoldRefusal.NotRunning, f"allocation {alloc_id!r} is {what}")


def _not_in_state(job_id: str, job: JobRecord | None, wanted: str) -> Refusal:
    if job is None:
        return Refusal(FoldRefusal.UnknownJob, f"no job {job_id!r}")
    return Refusal(FoldRefusal.WrongState, f"job {job_id!r} is {job.state}, not {wanted}")


def run_end_state(e: ev.GangCompleted | ev.GangFailed) -> JobState:
    """The state a run's end folds its job to (`completed`, `timeout` at its time limit,
    else `failed`), unless the job ended already; also the outcome of the run's allocation
    rows in the projection."""
    if isinstance(e, ev.GangCompleted):
        return JobState.completed
    return JobState.timeout if e.reason == EndReason.TimeLimit else JobState.failed


_HANDLERS: dict[type, Any] = {
    ev.JobSubmitted: Ledger._submitted,
    ev.JobAdmitted: Ledger._admitted,
    ev.JobRejected: Ledger._rejected,
    ev.JobCancelled: Ledger._cancelled,
    ev.ServiceScaled: Ledger._scaled,
    ev.PendingReasonChanged: Ledger._pending_reason,
    ev.GangPlaced: Ledger._placed,
    ev.MemberStarted: Ledger._member_started,
    ev.MemberCheckpointed: Ledger._member_checkpointed,
    ev.MemberExited: Ledger._member_exited,
    ev.PreemptionRequested: Ledger._preemption_requested,
    ev.PreemptionDeclined: Ledger._preemption_declined,
    ev.ConsolidationPlanned: Ledger._consolidation_planned,
    ev.MigReconfigurationRequested: Ledger._mig_requested,
    ev.MigReconfigured: Ledger._mig_reconfigured,
    ev.GangEvicted: Ledger._evicted,
    ev.GangRequeued: Ledger._requeued,
    ev.GangResized: Ledger._resized,
    ev.GangCompleted: Ledger._completed,
    ev.GangFailed: Ledger._failed,
    ev.TimeLimitReached: Ledger._time_limit_reached,
    ev.JobWithdrawn: Ledger._withdrawn,
    ev.NodeRegistered: Ledger._node_registered,
    ev.NodeHeartbeat: Ledger._heartbeat,
    ev.NodeLost: Ledger._node_lost,
    ev.FairShareUpdated: Ledger._fair_share,
    ev.TenantConfigured: Ledger._config,
    ev.PriorityClassConfigured: Ledger._config,
    ev.PolicyConfigured: Ledger._config,
    ev.ScheduleConfigured: Ledger._config,
    ev.DeadLettered: Ledger._dead,
    ev.RequestRefused: Ledger._request_refused,
}
