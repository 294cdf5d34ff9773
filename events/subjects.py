"""Subject grammar: every subject names its producer role so NATS permissions can confine it.

    gl.submit.<tenant>.<job>        JobSubmitted            (clients / CI)
    gl.cancel.<tenant>.<job>        JobCancelled            (clients / CI)
    gl.scale.<tenant>.<job>         ServiceScaled           (clients / CI: a service's replicas)
    gl.ctl.<tenant>.<job>.<event>   JobHeld, JobReleased, JobRequeued (clients / CI: own jobs)
    gl.admin.ctl.<tenant>.<job>.<event>  the same, by the operator (events/control.py)
    gl.admin.node.<node>.<event>    NodeCordoned, NodeUncordoned (the operator only)
    gl.admin.maint.<window>.<event> MaintenanceScheduled, MaintenanceCancelled (the operator)
    gl.admin.<event>                configuration           (operators)
    gl.admission.<job>.<event>      admission decisions
    gl.quota.<event>                fair shares, and schedules' changes (config, scaling)
    gl.sched.<job|node>.<event>     scheduler decisions
    gl.preempt.<job>.<event>        preemption decisions
    gl.node.<node>.<event>          node agents
    gl.dead.<seq>                   dead letters

Each decision and node fact has exactly one producing role, the one its subject prefix names
(`role_of`): admission, quota, scheduler, preemption, node-agent. Its `producer` must be that
role (`<role>` or `<role>/<instance>`; only the role is checked), whatever it claims
(`producer_problem`). Client and configuration events (and dead letters) have no role: their
producer is free, their subject is what confines them. Two operator inputs replay as the facts
they stand for (`OPERATOR_INPUTS`): a scenario's `node_down` (`NodeLost` from `scenario`) and an
importer's inventory (`NodeRegistered` from `import/...`); no leader decided them, so they
carry no leader epoch.

A tenant path's `/` separators stay inside one token (`gl.submit.org/a.job-1`).
A `JobRejected` for a job id that is not a valid token (a raw submission with a job id such
as `a.b*c >d`) goes to `gl.admission._invalid.JobRejected`: the refusal of an unroutable id
must itself be publishable, or the submitter would never hear of it.
"""

from __future__ import annotations

from gpuledger.events import catalog as c
from gpuledger.events.envelope import Event
from gpuledger.events.ids import InvalidId, validate_tenant, validate_token

STREAM = "GPULEDGER"
ALL = "gl.>"
INVALID_ID_TOKEN = "_invalid"
"""Subject token standing for a job id that cannot be one (only on `JobRejected`)."""


# Which subject rule applies depends on the event's type only: resolved once per type.
_RULES: tuple[tuple[tuple[type, ...], str], ...] = (
    ((c.JobSubmitted,), "submit"),
    ((c.JobCancelled,), "cancel"),
    ((c.ServiceScaled,), "scale"),
    ((c.JobHeld, c.JobReleased, c.JobRequeued, c.JobPriorityChanged, c.JobMovedToTop), "control"),
    ((c.NodeCordoned, c.NodeUncordoned), "node-control"),
    ((c.MaintenanceScheduled, c.MaintenanceCancelled), "maintenance"),
    (
        (c.TenantConfigured, c.PriorityClassConfigured, c.PolicyConfigured, c.ScheduleConfigured),
        "admin",
    ),
    ((c.JobAdmitted, c.JobRejected, c.RequestRefused), "admission"),
    ((c.FairShareUpdated,), "quota"),
    (
        (
            c.PreemptionRequested,
            c.PreemptionDeclined,
            c.ConsolidationPlanned,
            c.MigReconfigurationRequested,
        ),
        "preempt",
    ),
    ((c.NodeLost,), "sched-node"),
    ((c.NodeRegistered,), "registered"),
    (
        (
            c.NodeHeartbeat,
            c.MemberStarted,
            c.MemberCheckpointed,
            c.MemberExited,
            c.GpuMetricsReported,
            c.MigReconfigured,
        ),
        "node",
    ),
    ((c.DeadLettered,), "dead"),
)
_RULE_OF: dict[type, str] = {}


def _rule_of(cls: type) -> str:
    rule = _RULE_OF.get(cls)
    if rule is None:
        rule = next((r for types, r in _RULES if issubclass(cls, types)), "job")
        _RULE_OF[cls] = rule
    return rule


# The one role that produces each decision and node fact (the subject prefix it publishes on).
_ROLE_OF: dict[type, str] = {
    **dict.fromkeys((c.JobAdmitted, c.JobRejected, c.RequestRefused), "admission"),
    c.FairShareUpdated: "quota",
    **dict.fromkeys(
        (
            c.GangPlaced,
            c.PendingReasonChanged,
            c.GangEvicted,
            c.GangRequeued,
            c.GangResized,
            c.GangCompleted,
            c.GangFailed,
            c.NodeLost,
            c.TimeLimitReached,
            c.JobWithdrawn,
        ),
        "scheduler",
    ),
    **dict.fromkeys(
        (
            c.PreemptionRequested,
            c.PreemptionDeclined,
            c.ConsolidationPlanned,
            c.MigReconfigurationRequested,
        ),
        "preemption",
    ),
    **dict.fromkeys(
        (
            c.NodeRegistered,
            c.NodeHeartbeat,
            c.MemberStarted,
            c.MemberCheckpointed,
            c.MemberExited,
            c.GpuMetricsReported,
            c.MigReconfigured,
        ),
        "node-agent",
    ),
}

OPERATOR_INPUTS: dict[type, frozenset[str]] = {
    c.NodeLost: frozenset({"scenario"}),  # a scenario's `node_down` (simulator, `demo`)
    c.NodeRegistered: frozenset({"import"}),  # `gpuledger import`'s node inventory
}
"""Non-service roles whose recorded inputs of these types replay as facts (no leader epoch)."""


def role_of(cls: type) -> str | None:
    """The role that produces events of type `cls`, or None where any producer may (client
    and configuration events, dead letters)."""
    return _ROLE_OF.get(cls)


def producer_problem(event: Event) -> str | None:
    """None if `event`'s producer is of the role that produces its type, else what is wrong."""
    cls = type(event)
    role = _ROLE_OF.get(cls)
    if role is None:
        return None
    claimed = event.producer.partition("/")[0]
    if claimed == role:
        return None
    name, producer = cls.__name__, event.producer[:100]
    if claimed in OPERATOR_INPUTS.get(cls, ()):
        epoch = getattr(event, "leader_epoch", 0)
        if not epoch:
            return None
        return f"{name} from {producer!r} carries leader epoch {epoch}; only {role} leaders have epochs"
    return f"{name} is produced by {role}, not by {producer!r}"


SCHEDULED_TYPES = (c.TenantConfigured, c.PriorityClassConfigured, c.ServiceScaled)
"""What quota publishes for time-of-day policies (schedules), on its own subjects
(`gl.quota.<type>`): the fold accepts them only as what a schedule in force produces
(`NotScheduled` otherwise, services/domain/fold/ledger.py)."""


def scheduled_by_quota(event: Event) -> bool:
    """Whether `event` is a schedule's change published by the quota role (its producer's
    role is `quota`)."""
    return isinstance(event, SCHEDULED_TYPES) and event.producer.partition("/")[0] == "quota"


def legacy_subject(event: Event) -> str | None:
    """The subject a schedule's change was published on before quota had its own (`gl.admin.
    <type>`, `gl.scale.<tenant>.<job>`), which only the operator may publish on now: older logs
    replay with it. None for any other event."""
    return _subject_by_rule(event) if scheduled_by_quota(event) else None


def subject_for(event: Event) -> str:
    """The subject an event is published on (ids validated)."""
    if scheduled_by_quota(event):
        return f"gl.quota.{type(event).__name__}"
    return _subject_by_rule(event)


def _subject_by_rule(event: Event) -> str:
    cls = type(event)
    rule = _RULE_OF.get(cls) or _rule_of(cls)
    name = cls.__name__
    if rule == "job":
        job_id: str | None = getattr(event, "job_id", None)
        if job_id is None:
            raise ValueError(f"no subject rule for {name}")
        return f"gl.sched.{validate_token('job id', job_id)}.{name}"
    if rule == "node":
        node: str = event.node  # type: ignore[attr-defined]  # only node facts carry it
        return f"gl.node.{validate_token('node', node)}.{name}"
    if rule == "submit":
        job = event.job  # type: ignore[attr-defined]  # only submissions carry a JobSpec
        return f"gl.submit.{validate_tenant(job.tenant)}.{validate_token('job id', job.job_id)}"
    if rule in ("scale", "cancel"):
        # the types under these rules (ServiceScaled, JobCancelled) carry tenant and job_id
        tenant: str = event.tenant  # type: ignore[attr-defined]  # not on every Event
        job_id = event.job_id  # type: ignore[attr-defined]  # not on every Event
        return f"gl.{rule}.{validate_tenant(tenant)}.{validate_token('job id', job_id)}"
    if rule == "admin":
        return f"gl.admin.{name}"
    if rule == "control":
        return control_subject(event)
    if rule == "node-control":
        return f"gl.admin.node.{validate_token('node', event.node)}.{name}"  # type: ignore[attr-defined]  # node control names its node
    if rule == "maintenance":
        return f"gl.admin.maint.{validate_token('window', event.window_id)}.{name}"  # type: ignore[attr-defined]  # both name their window
    if rule == "admission":
        try:
            token = validate_token("job id", event.job_id)  # type: ignore[attr-defined]  # admission's events all name a job
        except InvalidId:
            if not isinstance(event, c.JobRejected):
                raise
            token = INVALID_ID_TOKEN
        return f"gl.admission.{token}.{name}"
    if rule == "quota":
        return f"gl.quota.{name}"
    if rule == "preempt":
        return f"gl.preempt.{validate_token('job id', event.job_id)}.{name}"  # type: ignore[attr-defined]  # preemption's events all name a job
    if rule == "sched-node":
        return f"gl.sched.{validate_token('node', event.node)}.{name}"  # type: ignore[attr-defined]  # this rule's events name a node
    if rule == "registered":
        return f"gl.node.{validate_token('node', event.node.name)}.{name}"  # type: ignore[attr-defined]  # NodeRegistered carries its NodeInfo
    return f"gl.dead.{event.stream_seq}"  # type: ignore[attr-defined]  # the last rule is DeadLettered's


def control_subject(event: Event) -> str:
    """A job control event's subject (events/control.py): the tenant's own
    `gl.ctl.<tenant>.<job>.<Type>`, or the operator's `gl.admin.ctl.<tenant>.<job>.<Type>`."""
    tenant = validate_tenant(event.tenant)  # type: ignore[attr-defined]  # control events name both
    job = validate_token("job id", event.job_id)  # type: ignore[attr-defined]
    prefix = "gl.admin.ctl" if getattr(event, "actor", "tenant") == "operator" else "gl.ctl"
    return f"{prefix}.{tenant}.{job}.{type(event).__name__}"


def create_filter(event: Event) -> str:
    """The subjects that must hold no message for `event` to be a creation (checked by the
    server with `Nats-Expected-Last-Subject-Sequence: 0` over this filter). Job ids are per
    tenant: a submission is a creation if its own tenant has not submitted that id (its own
    subject holds nothing); another tenant's job of the id is neither a conflict nor a hint."""
    return subject_for(event)


def submit_filter(job_id: str) -> str:
    """Every tenant's submit subject of `job_id` (an operator's look-up of who submitted an
    id; several tenants may have)."""
    return f"gl.submit.*.{validate_token('job id', job_id)}"


def client_target(subject: str) -> tuple[str, str, str] | None:
    """`(kind, tenant, job_id)` for a client subject `gl.submit|cancel|scale.<tenant>.<job>`
    whose tokens are valid ids, else None (`kind` is `submit`, `cancel` or `scale`)."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != "gl" or parts[1] not in ("submit", "cancel", "scale"):
        return None
    try:
        return parts[1], validate_tenant(parts[2]), validate_token("job id", parts[3])
    except ValueError:
        return None


def subject_tenant(subject: str) -> str | None:
    """The tenant a client's subject names, whoever's job its payload names:
    `gl.submit|cancel|scale|ctl.<tenant>.…` and the operator's `gl.admin.ctl.<tenant>.…`;
    None for any other subject or a token that is no tenant."""
    parts = subject.split(".")
    if len(parts) >= 4 and parts[0] == "gl" and parts[1] in ("submit", "cancel", "scale", "ctl"):
        token = parts[2]
    elif len(parts) >= 5 and parts[:3] == ["gl", "admin", "ctl"]:
        token = parts[3]
    else:
        return None
    try:
        return validate_tenant(token)
    except ValueError:
        return None
