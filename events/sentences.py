"""Events as sentences for people: the one renderer behind the CLI's timelines (`simulate`,
`demo`), the dashboard's job page and reports.

`describe(event)` gives every event a `Sentence` (a table maps each event type to one small
function; any other type gets a generic sentence from its name, reason and message). A sentence
is a verb and the words after it; a job named in the words is a `JobRef`, so each reader renders
it its own way: the timeline writes the id (`line`), the job page links it or says "this job".
`notable` sentences are the ones a log timeline shows; the rest (a member starting, a heartbeat)
belong on a job's own page only.

It sits beside the event catalog (standard library only) so that projections and replay, which
never import each other, both use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from gpuledger.events import catalog as c
from gpuledger.events.envelope import Event
from gpuledger.events.reasons import EndReason
from gpuledger.events.specs import MemberPlacement
from gpuledger.events.timefmt import instant

VERB_WIDTH = 11
"""The timeline's verb column (`consolidate`, the longest verb, fills it)."""


class JobRef(NamedTuple):
    """A job named in a sentence (a link on the dashboard)."""

    job_id: str


Part = str | JobRef


class Sentence(NamedTuple):
    """What happened, in words. `kind` is one word for styling (`placed`, `evicted`, ...);
    `verb` is the timeline's first column; `parts` follow it (the first usually the job the
    event is about)."""

    kind: str
    verb: str
    parts: tuple[Part, ...]
    notable: bool = True

    def words(self) -> str:
        """The parts as plain text (job ids as they are)."""
        return "".join(p.job_id if isinstance(p, JobRef) else p for p in self.parts)

    def line(self) -> str:
        """The timeline's line: the verb in its column, then the words."""
        return f"{self.verb:<{VERB_WIDTH}} {self.words()}"

    def about(self, job_id: str) -> tuple[Part, ...]:
        """The words as seen from `job_id`'s own page: the verb first, a leading mention of the
        job dropped (`evicted (Priority by b)`), a later one kept as a JobRef for the page to
        word (`preempt a for this job`)."""
        if self.parts and self.parts[0] == JobRef(job_id):
            return (self.verb, *self.parts[1:])
        return (self.verb, " ", *self.parts) if self.parts else (self.verb,)


def _lost(gpu_ms: int) -> str:
    return f"lost {gpu_ms / 1000:.0f} GPU-s"


def _saved(checkpointed: bool) -> str:
    return "checkpointed" if checkpointed else "NOT checkpointed"


def _gpus(members: tuple[MemberPlacement, ...]) -> str:
    parts = []
    for m in members:
        if m.mig_profile:
            parts.append(f"{m.node}[gpu{m.gpus[0]} {m.mig_profile}]")
        elif m.gpu_milli:
            parts.append(f"{m.node}[gpu{m.gpus[0]} {m.gpu_milli}m]")
        else:
            parts.append(f"{m.node}[{','.join(map(str, m.gpus))}]")
    return " ".join(parts)


def _by(by: str | None) -> tuple[Part, ...]:
    return (" by ", JobRef(by)) if by else ()


# ---------------------------------------------------------------- one function per event type


def _tenant_configured(e: c.TenantConfigured) -> Sentence | None:
    if not e.correlation_id.startswith("schedule:"):
        return None
    limit = "" if e.limit_gpu_milli is None else f" limit={e.limit_gpu_milli / 1000:g}"
    return Sentence(
        "config",
        "config",
        (
            f"{e.correlation_id}: tenant {e.tenant} guaranteed={e.guaranteed_gpu_milli / 1000:g}"
            f"{limit} weight={e.over_quota_weight}",
        ),
    )


def _class_configured(e: c.PriorityClassConfigured) -> Sentence | None:
    if not e.correlation_id.startswith("schedule:"):
        return None
    return Sentence(
        "config",
        "config",
        (
            f"{e.correlation_id}: class {e.name} value={e.value} "
            f"preemptible={str(e.preemptible).lower()}",
        ),
    )


def _submitted(e: c.JobSubmitted) -> Sentence:
    j, r = e.job, e.job.resources
    if r.gpus:
        what = f"{r.gpus} GPU"
    elif r.gpu_milli:
        what = f"{r.gpu_milli}m GPU"
    else:
        what = r.mig_profile or "CPU"
    return Sentence(
        "submitted",
        "submitted",
        (JobRef(j.job_id), f" ({j.tenant}, {j.priority_class}, {j.replicas}x {what})"),
    )


def _rejected(e: c.JobRejected) -> Sentence:
    return Sentence("rejected", "rejected", (JobRef(e.job_id), f": {e.reason} - {e.message}"))


def _refused(e: c.RequestRefused) -> Sentence:
    return Sentence(
        "refused",
        "refused",
        (
            f"{e.request} of ",
            JobRef(e.job_id),
            f" (seq {e.request_seq}): {e.reason} - {e.message}",
        ),
    )


def _admitted(e: c.JobAdmitted) -> Sentence:
    pre = ", preemptible" if e.preemptible else ""
    return Sentence(
        "admitted",
        "admitted",
        (JobRef(e.job_id), f" ({e.priority_class}, priority {e.priority}{pre})"),
    )


def _placed(e: c.GangPlaced) -> Sentence:
    extra = (" borrowing" if e.borrowing else "") + (
        f", resumes at step {e.resume_step}" if e.resume_step is not None else ""
    )
    return Sentence("placed", "placed", (JobRef(e.job_id), f" on {_gpus(e.members)}{extra}"))


def _pending(e: c.PendingReasonChanged) -> Sentence:
    return Sentence("pending", "pending", (JobRef(e.job_id), f": {e.reason} - {e.message}"))


def _preempt(e: c.PreemptionRequested) -> Sentence:
    ranks = e.ranks if isinstance(e.ranks, tuple) else None
    members = f" members {', '.join(map(str, ranks))}" if ranks else ""
    within = (e.deadline_ms - e.occurred_at_ms) / 1000
    if not e.beneficiary:  # a drain: for nobody in particular
        return Sentence(
            "preempted",
            "preempt",
            (
                JobRef(e.job_id),
                f"{members} ({e.reason}: {e.message}), checkpoint within {within:.0f}s",
            ),
        )
    return Sentence(
        "preempted",
        "preempt",
        (
            JobRef(e.job_id),
            f"{members} for ",
            JobRef(e.beneficiary),
            f" ({e.reason}), checkpoint within {within:.0f}s",
        ),
    )


def _consolidate(e: c.ConsolidationPlanned) -> Sentence:
    moved: list[Part] = []
    for i, m in enumerate(e.moves):
        moved += [", " if i else "", JobRef(m.job_id)]
        moved.append(f" {'+'.join(m.from_nodes)}->{'+'.join(m.to_nodes)}")
    return Sentence(
        "consolidate",
        "consolidate",
        (JobRef(e.job_id), ": moving ", *moved, f"; room on {', '.join(e.target_nodes)}"),
    )


def _mig_request(e: c.MigReconfigurationRequested) -> Sentence:
    return Sentence(
        "mig",
        "mig-request",
        (
            f"{e.node} GPU {e.gpu_index} for ",
            JobRef(e.job_id),
            f": [{', '.join(e.previous_layout)}] -> [{', '.join(e.layout)}]",
        ),
    )


def _mig_layout(e: c.MigReconfigured) -> Sentence:
    return Sentence(
        "mig", "mig-layout", (f"{e.node} GPU {e.gpu_index} now [{', '.join(e.layout)}]",)
    )


def _declined(e: c.PreemptionDeclined) -> Sentence:
    return Sentence("declined", "no-preempt", (JobRef(e.job_id), f": {e.reason} - {e.message}"))


def _checkpoint(e: c.MemberCheckpointed) -> Sentence:
    return Sentence(
        "checkpoint", "checkpoint", (JobRef(e.job_id), f" rank {e.rank} saved step {e.step}")
    )


def _evicted(e: c.GangEvicted) -> Sentence:
    return Sentence(
        "evicted",
        "evicted",
        (
            JobRef(e.job_id),
            f" ({e.reason}",
            *_by(e.preempted_by),
            f"), {_saved(e.checkpointed)}, {_lost(e.lost_gpu_ms)}",
        ),
    )


def _resized(e: c.GangResized) -> Sentence:
    a, b = e.from_members, e.to_members
    if b > a:
        return Sentence("resized", "resized", (JobRef(e.job_id), f" grew from {a} to {b} members"))
    return Sentence(
        "resized",
        "resized",
        (
            JobRef(e.job_id),
            f" shrunk from {a} to {b} members ({e.reason}",
            *_by(e.preempted_by),
            f"), {_saved(e.checkpointed)}, {_lost(e.lost_gpu_ms)}",
        ),
    )


def _requeued(e: c.GangRequeued) -> Sentence:
    step = f", resumes from step {e.resume_step}" if e.resume_step is not None else ""
    return Sentence("requeued", "requeued", (JobRef(e.job_id), step))


def _completed(e: c.GangCompleted) -> Sentence:
    return Sentence("finished", "completed", (JobRef(e.job_id),))


def _failed(e: c.GangFailed) -> Sentence:
    if e.reason == EndReason.TimeLimit:
        return Sentence("finished", "timeout", (JobRef(e.job_id), f": TimeLimit {e.message}"))
    return Sentence("finished", "failed", (JobRef(e.job_id), f": {e.reason} {e.message}"))


def _withdrawn(e: c.JobWithdrawn) -> Sentence:
    return Sentence("finished", "withdrawn", (JobRef(e.job_id), f": {e.reason} - {e.message}"))


def _time_limit(e: c.TimeLimitReached) -> Sentence:
    within = (e.deadline_ms - e.occurred_at_ms) / 1000
    return Sentence(
        "time-limit",
        "time limit",
        (JobRef(e.job_id), f" reached {e.time_limit_s}s, checkpoint within {within:.0f}s"),
    )


def _cancelled(e: c.JobCancelled) -> Sentence:
    return Sentence("finished", "cancelled", (JobRef(e.job_id),))


def _held(e: c.JobHeld) -> Sentence:
    why = f": {e.reason}" if e.reason else ""
    return Sentence("held", "held", (JobRef(e.job_id), f" by {e.actor}{why}"))


def _released(e: c.JobReleased) -> Sentence:
    why = f": {e.reason}" if e.reason else ""
    return Sentence("held", "released", (JobRef(e.job_id), f" by {e.actor}{why}"))


def _requeue_asked(e: c.JobRequeued) -> Sentence:
    why = f": {e.reason}" if e.reason else ""
    return Sentence("requeued", "requeue asked", (JobRef(e.job_id), f" by {e.actor}{why}"))


def _priority_changed(e: c.JobPriorityChanged) -> Sentence:
    what = f"priority {e.priority}" if e.priority is not None else f"nice {e.nice}"
    if e.priority_class is not None:
        what = f"class {e.priority_class}"
    why = f": {e.reason}" if e.reason else ""
    return Sentence(
        "priority", "reprioritized", (JobRef(e.job_id), f" to {what} by {e.actor}{why}")
    )


def _topped(e: c.JobMovedToTop) -> Sentence:
    why = f": {e.reason}" if e.reason else ""
    return Sentence(
        "priority", "to top", (JobRef(e.job_id), f" of its tenant's queue by {e.actor}{why}")
    )


def _cordoned(e: c.NodeCordoned) -> Sentence:
    verb = "draining" if e.drain else "cordoned"
    how = " (force)" if e.force else ""
    if e.deadline_s is not None:
        how += f" (deadline t+{e.deadline_s}s)"
    return Sentence("node", verb, (e.node + how + (f": {e.reason}" if e.reason else ""),))


def _uncordoned(e: c.NodeUncordoned) -> Sentence:
    return Sentence("node", "uncordoned", (e.node + (f": {e.reason}" if e.reason else ""),))


def _maintenance(e: c.MaintenanceScheduled) -> Sentence:
    span = f" on {', '.join(e.nodes)} from {instant(e.start_ms)} to {instant(e.end_ms)}"
    if e.tenant:
        span += f", held for tenant {e.tenant}"
    return Sentence(
        "node", "maintenance", (e.window_id + span + (f": {e.reason}" if e.reason else ""),)
    )


def _maintenance_cancelled(e: c.MaintenanceCancelled) -> Sentence:
    return Sentence("node", "maint cancel", (e.window_id + (f": {e.reason}" if e.reason else ""),))


def _scaled(e: c.ServiceScaled) -> Sentence:
    return Sentence("scaled", "scaled", (JobRef(e.job_id), f" to {e.replicas} replicas"))


def _node_lost(e: c.NodeLost) -> Sentence:
    return Sentence("node", "node lost", (f"{e.node}: {e.message}",))


def _node_up(e: c.NodeRegistered) -> Sentence:
    return Sentence("node", "node up", (f"{e.node.name} ({len(e.node.gpus)} GPUs)",))


def _dead_letter(e: c.DeadLettered) -> Sentence:
    return Sentence("dead-letter", "dead letter", (f"seq {e.stream_seq}: {e.reason}",))


def _started(e: c.MemberStarted) -> Sentence:
    return Sentence(
        "started", "started", (JobRef(e.job_id), f" rank {e.rank} on {e.node}"), notable=False
    )


def _exited(e: c.MemberExited) -> Sentence:
    return Sentence(
        "exited", "exited", (JobRef(e.job_id), f" rank {e.rank} ({e.outcome})"), notable=False
    )


SENTENCES: dict[type[Event], Callable[[Any], Sentence | None]] = {
    c.TenantConfigured: _tenant_configured,
    c.PriorityClassConfigured: _class_configured,
    c.JobSubmitted: _submitted,
    c.JobRejected: _rejected,
    c.RequestRefused: _refused,
    c.JobAdmitted: _admitted,
    c.GangPlaced: _placed,
    c.PendingReasonChanged: _pending,
    c.PreemptionRequested: _preempt,
    c.ConsolidationPlanned: _consolidate,
    c.MigReconfigurationRequested: _mig_request,
    c.MigReconfigured: _mig_layout,
    c.PreemptionDeclined: _declined,
    c.MemberCheckpointed: _checkpoint,
    c.GangEvicted: _evicted,
    c.GangResized: _resized,
    c.GangRequeued: _requeued,
    c.GangCompleted: _completed,
    c.GangFailed: _failed,
    c.JobWithdrawn: _withdrawn,
    c.TimeLimitReached: _time_limit,
    c.JobCancelled: _cancelled,
    c.ServiceScaled: _scaled,
    c.JobHeld: _held,
    c.JobReleased: _released,
    c.JobRequeued: _requeue_asked,
    c.JobPriorityChanged: _priority_changed,
    c.JobMovedToTop: _topped,
    c.NodeCordoned: _cordoned,
    c.NodeUncordoned: _uncordoned,
    c.MaintenanceScheduled: _maintenance,
    c.MaintenanceCancelled: _maintenance_cancelled,
    c.NodeLost: _node_lost,
    c.NodeRegistered: _node_up,
    c.DeadLettered: _dead_letter,
    c.MemberStarted: _started,
    c.MemberExited: _exited,
}
"""The sentence of each event type a person follows; `describe` words the others."""


def generic(type_name: str, reason: str | None = None, message: str | None = None) -> Sentence:
    """The sentence of an event without its own: its type, reason and message (not notable)."""
    words = (f": {reason}" if reason else "") + (f": {message}" if message else "")
    return Sentence("other", type_name.partition(".")[0], (words,) if words else (), notable=False)


def describe(event: Event) -> Sentence:
    """Every event as a sentence (a total function: a type without its own sentence, or a
    configuration event outside a schedule, gets the generic one)."""
    fn = SENTENCES.get(type(event))
    sentence = fn(event) if fn is not None else None
    if sentence is not None:
        return sentence
    return generic(
        type(event).__name__, getattr(event, "reason", None), getattr(event, "message", None)
    )


def timeline_line(event: Event, origin_ms: int = 0) -> str | None:
    """The timeline's line for a notable event (time since `origin_ms`, verb, words); None for
    the rest (heartbeats, metrics, member starts...)."""
    s = describe(event)
    if not s.notable:
        return None
    return f"{(event.occurred_at_ms - origin_ms) / 1000:9.1f}s  {s.line()}"
