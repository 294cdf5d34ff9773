"""Subject grammar: every subject names its producer role so NATS permissions can confine it.

    gl.submit.<tenant>.<job>        JobSubmitted            (clients / CI)
    gl.cancel.<tenant>.<job>        JobCancelled            (clients / CI)
    gl.admin.<event>                configuration           (operators)
    gl.admission.<job>.<event>      admission decisions
    gl.quota.<event>                fair shares
    gl.sched.<job|node>.<event>     scheduler decisions
    gl.preempt.<job>.<event>        preemption decisions
    gl.node.<node>.<event>          node agents
    gl.dead.<seq>                   dead letters

A tenant path's `/` separators stay inside one token (`gl.submit.org/a.job-1`).
"""

from __future__ import annotations

from events import catalog as c
from events.envelope import Event
from events.ids import validate_tenant, validate_token

STREAM = "GPULEDGER"
ALL = "gl.>"


def subject_for(event: Event) -> str:
    """The subject an event is published on (ids validated)."""
    name = type(event).__name__
    match event:
        case c.JobSubmitted(job=job):
            return f"gl.submit.{validate_tenant(job.tenant)}.{validate_token('job id', job.job_id)}"
        case c.JobCancelled(job_id=job_id, tenant=tenant):
            return f"gl.cancel.{validate_tenant(tenant)}.{validate_token('job id', job_id)}"
        case c.TenantConfigured() | c.PriorityClassConfigured() | c.PolicyConfigured():
            return f"gl.admin.{name}"
        case c.JobAdmitted(job_id=j) | c.JobRejected(job_id=j):
            return f"gl.admission.{validate_token('job id', j)}.{name}"
        case c.FairShareUpdated():
            return f"gl.quota.{name}"
        case c.PreemptionRequested(job_id=j) | c.PreemptionDeclined(job_id=j):
            return f"gl.preempt.{validate_token('job id', j)}.{name}"
        case c.NodeLost(node=n):
            return f"gl.sched.{validate_token('node', n)}.{name}"
        case c.NodeRegistered(node=info):
            return f"gl.node.{validate_token('node', info.name)}.{name}"
        case (
            c.NodeHeartbeat(node=n)
            | c.MemberStarted(node=n)
            | c.MemberCheckpointed(node=n)
            | c.MemberExited(node=n)
            | c.GpuMetricsReported(node=n)
        ):
            return f"gl.node.{validate_token('node', n)}.{name}"
        case c.DeadLettered(stream_seq=seq):
            return f"gl.dead.{seq}"
        case _:
            job_id = getattr(event, "job_id", None)
            if job_id is None:
                raise ValueError(f"no subject rule for {name}")
            return f"gl.sched.{validate_token('job id', job_id)}.{name}"

