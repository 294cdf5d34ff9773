"""A human-readable line per notable event, for `demo` and `simulate` timelines."""

from __future__ import annotations

from gpuledger import events as ev


def _gpus(members) -> str:
    parts = []
    for m in members:
        if m.mig_profile:
            parts.append(f"{m.node}[gpu{m.gpus[0]} {m.mig_profile}]")
        elif m.gpu_milli:
            parts.append(f"{m.node}[gpu{m.gpus[0]} {m.gpu_milli}m]")
        else:
            parts.append(f"{m.node}[{','.join(map(str, m.gpus))}]")
    return " ".join(parts)


def describe(event: ev.Event) -> str | None:
    """One line for events a person follows; None for the rest (heartbeats, metrics...)."""
    match event:
        case ev.TenantConfigured() if event.correlation_id.startswith("schedule:"):
            limit = (
                "" if event.limit_gpu_milli is None else f" limit={event.limit_gpu_milli / 1000:g}"
            )
            return (
                f"config      {event.correlation_id}: tenant {event.tenant} "
                f"guaranteed={event.guaranteed_gpu_milli / 1000:g}{limit} weight={event.over_quota_weight}"
            )
        case ev.PriorityClassConfigured() if event.correlation_id.startswith("schedule:"):
            return (
                f"config      {event.correlation_id}: class {event.name} value={event.value} "
                f"preemptible={str(event.preemptible).lower()}"
            )
        case ev.JobSubmitted(job=j):
            r = j.resources
            what = (
                f"{r.gpus} GPU"
                if r.gpus
                else f"{r.gpu_milli}m GPU"
                if r.gpu_milli
                else r.mig_profile or "CPU"
            )
            return f"submitted   {j.job_id} ({j.tenant}, {j.priority_class}, {j.replicas}x {what})"
        case ev.JobRejected(job_id=j, reason=r, message=m):
            return f"rejected    {j}: {r} - {m}"
        case ev.RequestRefused(job_id=j, request=q, request_seq=s, reason=r, message=m):
            return f"refused     {q} of {j} (seq {s}): {r} - {m}"
        case ev.JobAdmitted(job_id=j, priority=p, preemptible=pre):
            return f"admitted    {j} (priority {p}{', preemptible' if pre else ''})"
        case ev.GangPlaced(job_id=j, members=ms, borrowing=b, resume_step=s):
            extra = (" borrowing" if b else "") + (
                f", resumes at step {s}" if s is not None else ""
            )
            return f"placed      {j} on {_gpus(ms)}{extra}"
        case ev.PendingReasonChanged(job_id=j, reason=r, message=m):
            return f"pending     {j}: {r} - {m}"
        case ev.PreemptionRequested(
            job_id=j, beneficiary=b, reason=r, deadline_ms=d, occurred_at_ms=t, ranks=ranks
        ):
            part = f" members {', '.join(map(str, ranks))}" if isinstance(ranks, tuple) else ""
            return f"preempt     {j}{part} for {b} ({r}), checkpoint within {(d - t) / 1000:.0f}s"
        case ev.ConsolidationPlanned(job_id=j, moves=ms, target_nodes=t):
            moved = ", ".join(
                f"{m.job_id} {'+'.join(m.from_nodes)}->{'+'.join(m.to_nodes)}" for m in ms
            )
            return f"consolidate {j}: moving {moved}; room on {', '.join(t)}"
        case ev.MigReconfigurationRequested(
            job_id=j, node=n, gpu_index=g, layout=lay, previous_layout=old
        ):
            return f"mig-request {n} GPU {g} for {j}: [{', '.join(old)}] -> [{', '.join(lay)}]"
        case ev.MigReconfigured(node=n, gpu_index=g, layout=lay):
            return f"mig-layout  {n} GPU {g} now [{', '.join(lay)}]"
        case ev.PreemptionDeclined(job_id=j, reason=r, message=m):
            return f"no-preempt  {j}: {r} - {m}"
        case ev.MemberCheckpointed(job_id=j, rank=r, step=s):
            return f"checkpoint  {j} rank {r} saved step {s}"
        case ev.GangEvicted(job_id=j, reason=r, checkpointed=c, lost_gpu_ms=lost, preempted_by=by):
            who = f" by {by}" if by else ""
            return f"evicted     {j} ({r}{who}), {'checkpointed' if c else 'NOT checkpointed'}, lost {lost / 1000:.0f} GPU-s"
        case ev.GangResized(
            job_id=j,
            from_members=a,
            to_members=b,
            reason=r,
            preempted_by=by,
            checkpointed=c,
            lost_gpu_ms=lost,
        ):
            if b > a:
                return f"resized     {j} grew from {a} to {b} members"
            who = f" by {by}" if by else ""
            return (
                f"resized     {j} shrunk from {a} to {b} members ({r}{who}), "
                f"{'checkpointed' if c else 'NOT checkpointed'}, lost {lost / 1000:.0f} GPU-s"
            )
        case ev.GangRequeued(job_id=j):
            return f"requeued    {j}"
        case ev.GangCompleted(job_id=j):
            return f"completed   {j}"
        case ev.GangFailed(job_id=j, reason="TimeLimit", message=m):
            return f"timeout     {j}: TimeLimit {m}"
        case ev.GangFailed(job_id=j, reason=r, message=m):
            return f"failed      {j}: {r} {m}"
        case ev.JobWithdrawn(job_id=j, reason=r, message=m):
            return f"withdrawn   {j}: {r} - {m}"
        case ev.TimeLimitReached(job_id=j, time_limit_s=lim, deadline_ms=d, occurred_at_ms=t):
            return f"time limit  {j} reached {lim}s, checkpoint within {(d - t) / 1000:.0f}s"
        case ev.JobCancelled(job_id=j):
            return f"cancelled   {j}"
        case ev.ServiceScaled(job_id=j, replicas=n):
            return f"scaled      {j} to {n} replicas"
        case ev.NodeLost(node=n, message=m):
            return f"node lost   {n}: {m}"
        case ev.NodeRegistered(node=n):
            return f"node up     {n.name} ({len(n.gpus)} GPUs)"
        case ev.DeadLettered(stream_seq=s, reason=r):
            return f"dead letter seq {s}: {r}"
    return None


def format_line(event: ev.Event, origin_ms: int = 0) -> str | None:
    text = describe(event)
    if text is None:
        return None
    return f"{(event.occurred_at_ms - origin_ms) / 1000:9.1f}s  {text}"
