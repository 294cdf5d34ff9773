"""The whole-file shapes (a configuration, or with a `timeline` a scenario) and the JSON
Schema of the files users write."""

from typing import Any, Literal

import msgspec

from gpuledger.services.domain.inputs.schema.config import (
    ClassDoc,
    ClusterDoc,
    PolicyDoc,
    ReservationDoc,
    ScheduleDoc,
    TenantDoc,
)
from gpuledger.services.domain.inputs.schema.job import JobDoc
from gpuledger.services.domain.inputs.schema.units import (
    Duration,
    NonNegInt,
    Strict,
)

# ------------------------------------------------------------------ scenarios


class MaintenanceDoc(Strict, kw_only=True, frozen=True):
    """A maintenance window (`MaintenanceScheduled`): its nodes are planned down from `start`
    to `end` (times on the scenario's clock, like `at`)."""

    id: str
    """The window's name."""
    nodes: list[str]
    """The nodes it takes down."""
    start: Duration
    end: Duration
    tenant: str | None = None
    """Hold the nodes for this tenant instead (its jobs may start there; not planned down)."""


class EntryDoc(Strict, kw_only=True, frozen=True):
    """One timeline entry: exactly one action (`ENTRY_ACTIONS`: submit, cancel, scale,
    node_down, and the operator's verbs), at time `at`."""

    at: Duration = 0
    submit: JobDoc | None = None
    cancel: str | None = None
    scale: str | None = None
    """A service (submitted earlier with `kind: service`) whose replica count changes."""
    replicas: NonNegInt | None = None
    """The scaled service's replica count from now on."""
    node_down: str | None = None
    hold: str | None = None
    """A job (submitted earlier) held from now on (`JobHeld`, events/control.py)."""
    release: str | None = None
    """A held job released (`JobReleased`)."""
    requeue: str | None = None
    """A running job requeued (`JobRequeued`)."""
    top: str | None = None
    """A pending job moved to the top of its tenant's queue (`JobMovedToTop`)."""
    update: str | None = None
    """A job whose priority changes (`JobPriorityChanged`): with `priority`, `nice` or
    `class`."""
    priority: int | None = None
    """`update` entries: the new priority."""
    nice: int | None = None
    """`update` entries: the class's priority minus this."""
    klass: str | None = msgspec.field(default=None, name="class")
    """`update` entries: a pending job's new priority class (`update --class`)."""
    cordon: str | None = None
    """A node the operator cordons (`NodeCordoned`): no new placements on it."""
    uncordon: str | None = None
    """A cordoned node uncordoned (`NodeUncordoned`)."""
    drain: str | None = None
    """A node the operator drains (`NodeCordoned` with `drain`): cordoned, and what runs
    there is moved off with checkpoint-then-evict."""
    force: bool = False
    """`drain` entries: at once, minimum runtime and non-preemptible work included."""
    deadline: Duration | None = None
    """`drain` entries: after this long, what is left is drained as with `force`."""
    maintenance: MaintenanceDoc | None = None
    """A maintenance window the operator plans (`MaintenanceScheduled`)."""
    maintenance_cancel: str | None = None
    """A maintenance window (by id) cancelled (`MaintenanceCancelled`)."""
    by: Literal["tenant", "operator"] = "tenant"
    """Who holds, releases or requeues (`hold` / `release` / `requeue` entries)."""
    reason: str = ""
    """Why, in their words (`hold` / `release` / `requeue` entries)."""
    tenant: str | None = None
    """The cancelled job's tenant."""
    expect: Literal["rejected"] | None = None
    """`rejected`: the submitted job is meant to be refused by admission (a scenario showing
    a rejection), so its tenant / class / model / MIG references are not checked here."""


class FileDoc(Strict, kw_only=True, frozen=True):
    """A cluster configuration; with a `timeline` it is a scenario."""

    name: str | None = None
    description: str | None = None
    cluster: ClusterDoc = ClusterDoc()
    tenants: list[TenantDoc] = []
    priority_classes: list[ClassDoc] = []
    policy: PolicyDoc | None = None  # type: ignore[valid-type]  # built by defstruct from Policy
    schedules: list[ScheduleDoc] = []
    """Time-of-day policies (cron + zone) that change tenants and priority classes."""
    reservations: list[ReservationDoc] = []
    """Maintenance windows (`gpuledger node maintenance`), published with the configuration."""
    timeline: list[EntryDoc] | None = None
    until: Duration | None = None
    """Scenarios: stop the simulation at this virtual time (a scenario with schedules would
    otherwise wake at every fire time)."""


def file_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of configuration/scenario files and of job files, for
    editors (yaml-language-server: `# yaml-language-server: $schema=...`)."""
    (file_s, job_s), defs = msgspec.json.schema_components(
        [FileDoc, JobDoc], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpuledger input files",
        "description": "A cluster configuration / scenario file, or a job file.",
        "anyOf": [file_s, job_s],
        "$defs": defs,
    }
