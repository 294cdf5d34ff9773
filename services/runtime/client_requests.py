"""What a client (the CLI's `submit` / `cancel`, the HTTP gateway) does on the bus to submit or
cancel a job, and what came of it, as an `Outcome` each front end renders its own way.

The CLI prints `Outcome.text` and exits with `Outcome.code`; the gateway maps `Outcome.status`
to an HTTP status. Nothing here prints or exits.

Invariants:
- a tenant's CI identity puts its events in through the admission service's intake, never
  into the stream itself (services/runtime/intake.py);
- a job id is created once per tenant (`Bus.create_once`): the same content again is a
  retry (`duplicate`), other content a `conflict` (`JobIdConflict`, naming what differs);
  another tenant's job of the same id is no conflict and is never mentioned;
- a client never needs to read the log: it asks the admission service (`glq.job.<tenant>.<job>`).
  Only with `read_log=True` (an identity that may read the stream) does it fall back to the log
  when no admission service answers; otherwise that is `unavailable`;
- a cancel is published only for a job its tenant has (else `unknown_job`, nothing published).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuledger import events as ev
from gpuledger.events.reasons import RequestReason

SUBMITTED, DUPLICATE, ADMITTED = "submitted", "duplicate", "admitted"
REJECTED, REFUSED, CONFLICT = "rejected", "refused", "conflict"
TIMEOUT, CANCEL_REQUESTED, UNKNOWN_JOB, UNAVAILABLE = (
    "timeout",
    "cancel_requested",
    "unknown_job",
    "unavailable",
)


@dataclass(frozen=True)
class Outcome:
    """What came of a client request."""

    status: str
    """submitted | duplicate | admitted | rejected | refused | conflict | timeout |
    cancel_requested | unknown_job | unavailable."""
    job_id: str
    text: str
    """The one line a person reads (without `error: `)."""
    code: int
    """The CLI's exit code: 0 done, 1 rejected / refused / conflict / unknown job, 3 no
    admission service to ask, 4 timed out."""
    seq: int | None = None
    """Stream sequence of the job's submission (or of the cancel)."""
    reason: str | None = None
    """CamelCase reason: the rejection's, `JobIdConflict`, `UnknownJob`."""
    message: str = ""
    """The scheduler's quantitative message (rejections, refusals) or what differs (conflicts)."""
    priority: int | None = None
    error: bool = False
    """The CLI shows it as `error: TEXT`."""
    job_status: Any = None
    """The admission service's last answer about the job (a JobStatus), where one came."""

    @property
    def ok(self) -> bool:
        return self.code == 0


class StatusQueryError(RuntimeError):
    """The admission service answered a status query with an error object."""


async def ask_status(
    bus,
    tenant: str,
    job_id: str,
    *,
    after_seq: int = 0,
    timeout: float = 10.0,
    until: Callable[[Any], bool] | None = None,
    wait_for_service: bool = False,
    poll_s: float = 0.1,
):
    """Ask the admission service for `tenant`'s job `job_id` (`glq.job.<tenant>.<job>`, which a
    tenant's CI identity may do) until an answer has folded `after_seq` and satisfies `until`.
    None when no admission service answers at all (with `wait_for_service`: none has
    answered within `timeout`, e.g. one starting or restarting); TimeoutError after `timeout`;
    StatusQueryError for an error answer."""
    import nats.errors

    from gpuledger.services.domain.fold.job_status import QUERY_PREFIX, JobStatus, decode

    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = await bus.nc.request(
                f"{QUERY_PREFIX}.{tenant}.{job_id}", b"", timeout=min(2.0, timeout)
            )
        except nats.errors.NoRespondersError:
            if not wait_for_service or time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.2)
            continue
        except (TimeoutError, nats.errors.TimeoutError):
            msg = None
        if msg is not None:
            st = decode(msg.data)
            if not isinstance(st, JobStatus):
                raise StatusQueryError(f"status query for {job_id!r}: {st.get('error')}")
            if st.folded_seq >= after_seq and (until is None or until(st)):
                return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer about {job_id!r} within {timeout:g}s")
        await asyncio.sleep(poll_s)


def existing_submission(spec: ev.JobSpec, stored: Any) -> tuple[str, str] | None:
    """Compare the stored creation of a job id with a new submission: None when it holds
    the same job (an idempotent retry), else (`JobIdConflict`, what differs)."""
    from gpuledger.services.domain.fold.ledger import spec_differences

    if stored is None:
        return RequestReason.JobIdConflict, "its stored submission could not be read"
    target = ev.subjects.client_target(stored.subject)
    if target is not None and target[1] != spec.tenant:
        return RequestReason.JobIdConflict, "it belongs to another tenant"
    try:
        first = ev.decode(stored.data or b"")
    except ev.UndecodableEvent as exc:
        return (
            RequestReason.JobIdConflict,
            f"its first submission could not be decoded and was rejected (InvalidSpec: {exc})",
        )
    if not isinstance(first, ev.JobSubmitted):
        return RequestReason.JobIdConflict, f"its subject holds a {type(first).__name__}"
    if first.job == spec:
        return None
    return RequestReason.JobIdConflict, "other content: " + "; ".join(
        spec_differences(first.job, spec)
    )


def _no_admission(job_id: str) -> Outcome:
    return Outcome(
        UNAVAILABLE,
        job_id,
        f"no admission service answers status queries about {job_id!r}",
        3,
        error=True,
    )


async def publish_submission(
    bus,
    event: ev.JobSubmitted,
    *,
    timeout: float = 30.0,
    read_log: bool = True,
    as_user: str | None = None,
) -> Outcome:
    """Create the job of `event` once: `submitted` (new), `duplicate` (the same content was
    submitted before: a retry), `conflict` (the tenant's job of that id holds other content),
    `refused` (the intake's rules), or `timeout` (the id is taken and nobody said by what in
    time). With `as_user`, asked on that user's intake subjects (the gateway, for a user's
    token): the intake holds it to that user."""
    from gpuledger.services.domain.fold.ledger import spec_differences
    from gpuledger.services.runtime.bus import AlreadyExists
    from gpuledger.services.runtime.intake import IntakeError, IntakeRefused, create_client_event

    spec = event.job
    try:
        seq, duplicate = await create_client_event(bus, event, as_user)
        if duplicate:  # a quick retry JetStream recognised by its event id
            return Outcome(
                DUPLICATE,
                spec.job_id,
                f"already submitted {spec.job_id} (seq {seq}) with the same content",
                0,
                seq=seq,
            )
        return Outcome(SUBMITTED, spec.job_id, f"submitted {spec.job_id} (seq {seq})", 0, seq=seq)
    except IntakeRefused as exc:  # over a submit limit, another user's: nothing stored
        return Outcome(
            REFUSED,
            spec.job_id,
            f"not submitted {spec.job_id}: {exc}",
            1,
            reason=exc.reason,
            message=str(exc).removeprefix(f"{exc.reason}: "),
            error=True,
        )
    except IntakeError as exc:
        return Outcome(UNAVAILABLE, spec.job_id, f"not submitted: {exc}", 3, error=True)
    except AlreadyExists as exists:
        where = f" (seq {exists.last_seq})" if exists.last_seq else ""
        try:
            st = await ask_status(
                bus,
                spec.tenant,
                spec.job_id,
                after_seq=exists.last_seq or 0,
                timeout=timeout,
                wait_for_service=not read_log,
            )
        except TimeoutError as exc:
            return Outcome(
                TIMEOUT,
                spec.job_id,
                f"job {spec.job_id!r} already exists{where}, and {exc}",
                4,
                error=True,
            )
        if st is None and not read_log:
            return _no_admission(spec.job_id)
        if st is None:  # no admission service: compare with the stored creation itself
            stored = await bus.last_message(ev.subjects.create_filter(event))
            conflict = existing_submission(spec, stored)
            seq = None if stored is None else stored.seq
        elif not st.known:  # only a race: the creation is on the tenant's own subject
            conflict, seq = (RequestReason.JobIdConflict, "its submission is not folded yet"), None
        elif st.spec is None:
            conflict, seq = (
                (
                    RequestReason.JobIdConflict,
                    "its first submission could not be decoded and was rejected",
                ),
                None,
            )
        elif st.submit_event_id == event.event_id or st.spec == spec:
            conflict, seq = None, st.submit_seq
        else:
            conflict = (
                RequestReason.JobIdConflict,
                "other content: " + "; ".join(spec_differences(st.spec, spec)),
            )
            seq = None
    if conflict is not None:
        reason, what = conflict
        return Outcome(
            CONFLICT,
            spec.job_id,
            f"job {spec.job_id!r} already exists{where}: {what} ({reason}); submit under a new job id",
            1,
            reason=reason,
            message=what,
            error=True,
        )
    return Outcome(
        DUPLICATE,
        spec.job_id,
        f"already submitted {spec.job_id} (seq {seq}) with the same content",
        0,
        seq=seq or 0,
    )


async def wait_for_admission(
    bus, spec: ev.JobSpec, seq: int, timeout: float, *, read_log: bool = True
) -> Outcome:
    """The admission decision on the job submitted at `seq`: `admitted`, `rejected`, `refused`
    (the request itself, e.g. JobIdConflict), or `timeout`."""
    from gpuledger.events.reasons import JobState

    late = Outcome(
        TIMEOUT,
        spec.job_id,
        f"no admission decision for {spec.job_id} within {timeout:g}s",
        4,
        seq=seq,
    )
    try:
        st = await ask_status(
            bus,
            spec.tenant,
            spec.job_id,
            after_seq=seq,
            timeout=timeout,
            until=lambda st: st.known and st.state != JobState.submitted,
            wait_for_service=not read_log,
        )
    except TimeoutError:
        return late
    if st is not None:
        if st.state == JobState.rejected:
            return _rejected(spec.job_id, seq, st.reason, st.message)
        return _admitted(spec.job_id, seq, st.priority)
    if not read_log:
        return _no_admission(spec.job_id)
    deadline = time.monotonic() + timeout  # no admission service answers: watch the log
    async for rec in bus.follow(seq):
        with contextlib.suppress(ev.UndecodableEvent):
            e = ev.decode(rec.data)
            if isinstance(e, ev.JobAdmitted) and e.job_id == spec.job_id:
                return _admitted(spec.job_id, seq, e.priority)
            if isinstance(e, ev.JobRejected) and e.job_id == spec.job_id:
                return _rejected(spec.job_id, seq, e.reason, e.message)
            if isinstance(e, ev.RequestRefused) and e.request_seq == seq:
                return Outcome(
                    REFUSED,
                    spec.job_id,
                    f"refused {spec.job_id}: {e.reason}: {e.message}",
                    1,
                    seq=seq,
                    reason=e.reason,
                    message=e.message,
                )
        if time.monotonic() > deadline:
            break
    return late


def _admitted(job_id: str, seq: int, priority: int | None) -> Outcome:
    return Outcome(
        ADMITTED, job_id, f"admitted {job_id} (priority {priority})", 0, seq=seq, priority=priority
    )


def _rejected(job_id: str, seq: int, reason: str | None, message: str) -> Outcome:
    return Outcome(
        REJECTED,
        job_id,
        f"rejected {job_id}: {reason}: {message}",
        1,
        seq=seq,
        reason=reason,
        message=message,
    )


async def submit_job(
    bus,
    event: ev.JobSubmitted,
    *,
    wait: bool = False,
    timeout: float = 30.0,
    read_log: bool = True,
    on_published: Callable[[Outcome], None] | None = None,
    as_user: str | None = None,
) -> Outcome:
    """Submit (once) and, with `wait`, wait for the admission decision. `on_published` sees
    the outcome of the publish before the wait (the CLI prints it at once); `as_user` as for
    `publish_submission`."""
    published = await publish_submission(
        bus, event, timeout=timeout, read_log=read_log, as_user=as_user
    )
    if on_published is not None:
        on_published(published)
    if not wait or published.status not in (SUBMITTED, DUPLICATE):
        return published
    return await wait_for_admission(bus, event.job, published.seq or 0, timeout, read_log=read_log)


async def job_owner(
    bus, tenant: str | None, job_id: str, *, read_log: bool = True, timeout: float = 10.0
) -> str | None:
    """The tenant that has job `job_id`: asked of the admission service within `tenant`, else
    (no admission service, or no tenant given, and `read_log`) read from the log. None when
    nobody has it. TimeoutError; LookupError when no admission service answers and the log may
    not be read."""
    if tenant is not None:
        st = await ask_status(bus, tenant, job_id, timeout=timeout, wait_for_service=not read_log)
        if st is not None:
            return tenant if st.known else None
    if not read_log:
        raise LookupError("no admission service")
    stored = await bus.last_message(ev.subjects.submit_filter(job_id))
    target = None if stored is None else ev.subjects.client_target(stored.subject)
    return None if target is None else target[1]


async def cancel_job(
    bus,
    tenant: str | None,
    job_id: str,
    *,
    producer: str = "cli",
    read_log: bool = True,
    as_user: str | None = None,
) -> Outcome:
    """Publish JobCancelled for a job `tenant` has (None: whichever tenant submitted it):
    `cancel_requested`, `unknown_job` (nothing published), `timeout`, `unavailable`. With
    `as_user`, asked on that user's intake subject: another user's job is `unknown_job`."""
    from gpuledger.services.domain.tooling.stamp import stamp

    try:
        # a user's request: the intake alone answers, the same words for another user's job
        # as for none (no oracle)
        owner = (
            tenant
            if as_user is not None
            else await job_owner(bus, tenant, job_id, read_log=read_log)
        )
    except TimeoutError as exc:
        return Outcome(TIMEOUT, job_id, str(exc), 4, error=True)
    except LookupError:
        return _no_admission(job_id)
    if owner is None or (tenant is not None and tenant != owner):
        where = "" if tenant is None else f" in tenant {tenant!r}"
        return Outcome(
            UNKNOWN_JOB,
            job_id,
            f"no job {job_id!r}{where}: nothing was submitted under this id; "
            "nothing to cancel (UnknownJob)",
            1,
            reason=RequestReason.UnknownJob,
            error=True,
        )
    event = stamp(
        ev.JobCancelled,
        key=f"{owner}:{job_id}",  # ids are per tenant: another tenant's cancel is no retry
        producer=producer,
        now_ms=time.time_ns() // 1_000_000,
        correlation_id=job_id,
        job_id=job_id,
        tenant=owner,
    )
    from gpuledger.services.runtime.intake import IntakeError, IntakeRefused, publish_client_event

    try:
        seq = await publish_client_event(bus, event, as_user)
    except IntakeRefused as exc:  # another user's job (or none): nothing stored
        return Outcome(
            UNKNOWN_JOB, job_id, f"not cancelled: {exc}", 1, reason=exc.reason, error=True
        )
    except IntakeError as exc:
        return Outcome(UNAVAILABLE, job_id, f"not cancelled: {exc}", 3, error=True)
    return Outcome(CANCEL_REQUESTED, job_id, f"cancel requested for {job_id}", 0, seq=seq)


WAIT_FOR = ("running", "finished")
"""What `gpuledger status JOB --wait-for` waits for."""
REACHED, ENDED = "reached", "ended"


def _goal_states(wait_for: str | None):
    """(states that reach the goal, states that end the wait without reaching it)."""
    from gpuledger.events.reasons import JobState

    lost = frozenset({JobState.failed, JobState.rejected, JobState.cancelled})
    if wait_for == "running":  # placed: running, or past it (asked to checkpoint, completed)
        return frozenset({JobState.running, JobState.preempting, JobState.completed}), lost
    if wait_for == "finished":
        return frozenset({JobState.completed}), lost
    if wait_for is None:
        return None, lost
    raise ValueError(f"--wait-for: expected one of {', '.join(WAIT_FOR)}, got {wait_for!r}")


def _status_text(st) -> str:
    text = f"{st.job_id} {st.state}"
    if st.reason:
        text += f" ({st.reason}{': ' + st.message if st.message else ''})"
    return text


async def job_status_outcome(
    bus,
    tenant: str,
    job_id: str,
    *,
    wait_for: str | None = None,
    timeout: float = 10.0,
    on_change: Callable[[Any], None] | None = None,
    poll_s: float = 0.5,
) -> Outcome:
    """What `tenant`'s job `job_id` is, asked of the admission service (`glq.job.<tenant>.<job>`,
    which the tenant's CI identity may do), and with `wait_for` (`running` | `finished`) once it
    got there. Exit codes (`Outcome.code`), for a CI script to branch on:

    - 0: the job is known and not failed (no `wait_for`), or it reached `wait_for`
      (`running`: placed, also when already past it; `finished`: completed);
    - 1: the job failed, was rejected or cancelled (before reaching `wait_for`), or nothing
      of this tenant's has this id (`UnknownJob`; with `wait_for` an unknown job is waited for,
      as one just submitted may not be folded yet);
    - 3: no admission service answers (with `wait_for`: none did within `timeout`);
    - 4: `wait_for` not reached within `timeout`.

    `on_change` sees every answer whose state or reason differs from the one before."""
    goal, lost = _goal_states(wait_for)
    seen: list[Any] = []

    def settled(st) -> bool:
        if on_change is not None and (
            not seen
            or (seen[-1].known, seen[-1].state, seen[-1].reason) != (st.known, st.state, st.reason)
        ):
            on_change(st)
        seen[:] = [st]
        if goal is None:
            return True
        return st.known and (st.state in goal or st.state in lost)

    try:
        st = await ask_status(
            bus,
            tenant,
            job_id,
            timeout=timeout,
            until=settled,
            wait_for_service=wait_for is not None,
            poll_s=poll_s,
        )
    except TimeoutError:
        last = seen[-1] if seen else None
        if last is None:
            return Outcome(
                TIMEOUT, job_id, f"no answer about {job_id!r} within {timeout:g}s", 4, error=True
            )
        now = _status_text(last) if last.known else f"{job_id} unknown to tenant {tenant!r}"
        return Outcome(
            TIMEOUT,
            job_id,
            f"{job_id} not {wait_for} within {timeout:g}s: {now}",
            4,
            reason=last.reason,
            message=last.message,
            error=True,
            job_status=last,
        )
    if st is None:
        return _no_admission(job_id)
    if not st.known:
        return Outcome(
            UNKNOWN_JOB,
            job_id,
            f"no job {job_id!r} in tenant {tenant!r} (UnknownJob)",
            1,
            reason=RequestReason.UnknownJob,
            error=True,
            job_status=st,
        )
    failed = st.state in lost
    status = ENDED if failed else (REACHED if goal is not None else "state")
    return Outcome(
        status,
        job_id,
        _status_text(st),
        1 if failed else 0,
        seq=st.submit_seq,
        reason=st.reason,
        message=st.message,
        priority=st.priority,
        job_status=st,
    )
