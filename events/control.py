"""Job control by a tenant or the operator (issue 42): hold, release, requeue and priority
changes; and the
operator's node control: cordon and uncordon, and maintenance windows.

Each is a client event with an actor and a reason. Who may publish it is confined by its
subject (events/subjects.py): a tenant's own job control travels on
`gl.ctl.<tenant>.<job>.<Type>` (a tenant's CI identity may publish there for its tenant only),
the operator's on `gl.admin.ctl.<tenant>.<job>.<Type>` (only the operator may publish under
`gl.admin.>`), and the acceptance step refuses a payload whose `actor` or ids do not match
its subject (`WrongSubject`). So an `actor` of `operator` is always the operator.

A request about a job its tenant does not have is refused (`RequestRefused`, `UnknownJob`,
the same answer whether another tenant has the id or nobody has) and changes nothing.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from gpuledger.events.envelope import Event

Actor = Literal["tenant", "operator"]
"""Who acted: the job's own tenant (its CI credential, the gateway) or the operator."""

Note = Annotated[str, msgspec.Meta(max_length=500)]
"""A person's words on why (at most 500 characters)."""


class JobHeld(Event, frozen=True, kw_only=True, tag="JobHeld.v1"):
    """A pending (or not yet admitted) job is held: it stays pending with reason `Held`, is
    not placed, and is no demand for fair share, reclaim or reservations until released.
    A hold of a job that is placed or finished, or already held, is refused (`InvalidSpec`)."""

    job_id: str
    """The job (the id its tenant submitted)."""
    tenant: str
    """Its tenant (part of the subject)."""
    actor: Actor = "tenant"
    """Who holds it: a hold by the operator is released only by the operator."""
    reason: Note = ""
    """Why, in the actor's words (`gpuledger hold JOB --reason ...`)."""


class JobReleased(Event, frozen=True, kw_only=True, tag="JobReleased.v1"):
    """A held job is released: it waits in the queue again as before the hold (its submit
    time and priority are unchanged). A release of a job that is not held, or a tenant's
    release of the operator's hold, is refused (`InvalidSpec`)."""

    job_id: str
    """The job (the id its tenant submitted)."""
    tenant: str
    """Its tenant (part of the subject)."""
    actor: Actor = "tenant"
    """Who releases it."""
    reason: Note = ""
    """Why, in the actor's words."""


class JobRequeued(Event, frozen=True, kw_only=True, tag="JobRequeued.v1"):
    """A running job is asked to checkpoint and leave its GPUs, then wait in the queue again
    (Slurm `scontrol requeue`): the preemption path with reason `Requeue` (its grace, its
    checkpoint, `GangEvicted` then `GangRequeued`), counted as a requeue and not against the
    eviction budget or aging. A requeue of a job that is not running, or already leaving,
    is refused (`InvalidSpec`)."""

    job_id: str
    """The job (the id its tenant submitted)."""
    tenant: str
    """Its tenant (part of the subject)."""
    actor: Actor = "tenant"
    """Who requeues it."""
    reason: Note = ""
    """Why, in the actor's words (a bad node, say)."""


PRIORITY_MAX = 1_000_000
"""The highest priority a job may be given (and the largest nice)."""


class JobPriorityChanged(Event, frozen=True, kw_only=True, tag="JobPriorityChanged.v1"):
    """A job's priority changed (Slurm `scontrol update Priority=|Nice=`; Kueue's mutable
    workload priority): exactly one of `priority` (the new value), `nice` (the class's
    value minus `nice`) and `priority_class` (a pending job's new class). Queue order and preemption use it from now on (a running job keeps
    its GPUs, and may become a victim of a higher one). A tenant may lower its job's priority
    and raise it back up to its class's value; above that needs the operator. A change of a
    job not admitted or finished, of an array or service (change its tasks), with neither or
    both fields, or to a value out of range is refused (`InvalidSpec`)."""

    job_id: str
    """The job (the id its tenant submitted)."""
    tenant: str
    """Its tenant (part of the subject)."""
    actor: Actor = "tenant"
    """Who changes it."""
    priority: Annotated[int, msgspec.Meta(ge=0, le=PRIORITY_MAX)] | None = None
    """The new priority."""
    nice: Annotated[int, msgspec.Meta(ge=-PRIORITY_MAX, le=PRIORITY_MAX)] | None = None
    """Or: the class's value minus this (positive is nicer: lower)."""
    priority_class: str | None = None
    """Or: a new priority class for a pending job (Slurm `update QOS=`; `gpuledger update
    --class`): it takes the class's value, preemptibility and SLO class, as if submitted with
    it. Refused for a job that is placed (its placement was decided under its class), for an
    unknown class, and for a tenant moving to a class above its current class's value."""
    reason: Note = ""
    """Why, in the actor's words."""


class JobMovedToTop(Event, frozen=True, kw_only=True, tag="JobMovedToTop.v1"):
    """A pending job goes first among its tenant's pending jobs of the same priority (Slurm
    `scontrol top`): its queue time becomes just before the earliest of theirs. Its priority
    is unchanged (to pass a higher one, change the priority). A job that is not pending is
    refused (`InvalidSpec`)."""

    job_id: str
    """The job (the id its tenant submitted)."""
    tenant: str
    """Its tenant (part of the subject)."""
    actor: Actor = "tenant"
    """Who moves it."""
    reason: Note = ""
    """Why, in the actor's words."""


CONTROL_EVENTS: tuple[type[Event], ...] = (
    JobHeld,
    JobReleased,
    JobRequeued,
    JobPriorityChanged,
    JobMovedToTop,
)
"""Job control events, in the order they were added."""


# ---------------------------------------------------------------- nodes (the operator only)


class NodeCordoned(Event, frozen=True, kw_only=True, tag="NodeCordoned.v1"):
    """The operator cordoned a node (kubectl `cordon`; Slurm `DRAIN`): it takes no new
    placements from now on; what runs there runs on (unless `drain`), and its agent keeps
    reporting.
    Published on `gl.admin.node.<node>.NodeCordoned` (only the operator may). A cordon of a
    node the log does not hold is refused (`UnknownNode`) and changes nothing; a second
    cordon changes nothing but its reason."""

    node: str
    """The node."""
    reason: Note = ""
    """Why, in the operator's words (`gpuledger node cordon NODES --reason ...`)."""
    drain: bool = False
    """Also move what runs there off (`gpuledger node drain`): each run is asked to
    checkpoint and leave (preemption with reason `Drain`, then requeued and placed elsewhere)
    once it may: after its minimum runtime, within its job's disruption budget
    (`min_available`), and never non-preemptible work, unless `force` or `deadline_s` has
    passed. The node is `draining` while runs are left, then `drained`."""
    force: bool = False
    """Drain every run at once, minimum runtime and non-preemptible work included."""
    deadline_s: Annotated[int, msgspec.Meta(ge=0, le=1 << 40)] | None = None
    """Seconds after the cordon when what is left is drained as with `force` (None: never)."""


class NodeUncordoned(Event, frozen=True, kw_only=True, tag="NodeUncordoned.v1"):
    """The operator uncordoned a node: it takes placements again. Published on
    `gl.admin.node.<node>.NodeUncordoned`; an uncordon of a node that is not cordoned
    changes nothing."""

    node: str
    """The node."""
    reason: Note = ""
    """Why, in the operator's words."""


# ---------------------------------------------------------------- maintenance windows


class MaintenanceScheduled(Event, frozen=True, kw_only=True, tag="MaintenanceScheduled.v1"):
    """The operator planned a maintenance window on some nodes (Slurm `scontrol create
    reservation flags=maint`): from `start_ms` to `end_ms` they are planned down. Before it,
    the scheduler starts on them only jobs whose time limit ends before `start_ms` (a job
    without a limit: none); during it, nothing; after it they return. Published on
    `gl.admin.maint.<window>.MaintenanceScheduled` (only the operator may). A window of an
    unknown node, one that ends before it starts, or a second window of the same id is refused
    and changes nothing."""

    window_id: str
    """The window's name (a subject token), unique in the log."""
    nodes: tuple[str, ...]
    """The nodes it takes down."""
    start_ms: Annotated[int, msgspec.Meta(ge=0)]
    """When it starts, epoch ms."""
    end_ms: Annotated[int, msgspec.Meta(ge=0)]
    """When it ends (the nodes return), epoch ms; after `start_ms`."""
    reason: Note = ""
    """Why, in the operator's words."""
    origin: Literal["config"] | msgspec.UnsetType = msgspec.UNSET
    """`config`: declared in the configuration's `reservations:` (published with it, its
    event id derived from its content), so it may name nodes whose agents have not registered
    yet, and declaring it again unchanged changes nothing. Unset (left out of the JSON): the
    operator's `gpuledger node maintenance`. Added after v1 without a new tag: unset encodes
    as before."""
    tenant: str | msgspec.UnsetType = msgspec.UNSET
    """A window that holds its nodes for one tenant (`--tenant`; a Slurm reservation for an
    account): that tenant's jobs may start on them before and during it, the others' only
    as on a maintenance window's nodes, and what others run there is drained at its start;
    its nodes are not planned down. Unset (left out of the JSON): a maintenance window.
    Added after v1 without a new tag: unset encodes as before."""


class MaintenanceCancelled(Event, frozen=True, kw_only=True, tag="MaintenanceCancelled.v1"):
    """The operator cancelled a maintenance window: its nodes are no longer planned down
    (from now on). Published on `gl.admin.maint.<window>.MaintenanceCancelled`; the cancel of
    a window the log does not hold is refused (`UnknownWindow`)."""

    window_id: str
    """The window."""
    reason: Note = ""
    """Why, in the operator's words."""


NODE_CONTROL_EVENTS: tuple[type[Event], ...] = (
    NodeCordoned,
    NodeUncordoned,
    MaintenanceScheduled,
    MaintenanceCancelled,
)
"""The operator's node control events."""
