"""The intake: how a tenant's CI identity puts a client event into the log (issue 44).

A CI key may not publish into the stream: with its own submit subject it could still send
the JetStream headers that read other subjects (`Nats-Expected-Last-Subject-Sequence-Subject`
answers `wrong last sequence: N` for any subject) and choose a `Nats-Msg-Id` in the stream's
one duplicate window (a predicted id of another tenant's job kept that job out of the log).
Permissions cannot filter headers. So a CI key *asks*: a core NATS request on
`glr.<kind>.<tenant>.<job>` (outside the stream's `gl.>`, its permissions allow only its own
tenant), and the admission service (`serve_intake`, a queue group: any replica answers)
checks and stores it:

- the body must decode as the client event of that subject (`JobSubmitted`,
  `JobCancelled`, `ServiceScaled`) whose own subject is exactly the request's, else one
  line of error and nothing stored;
- it is stored on its own subject with headers the intake writes, never the client's: the
  `Nats-Msg-Id` is `msg_id(key, subject, event_id)`, a keyed digest of the tenant's subject
  and the content (the key derives from the admission identity's seed), so two tenants'
  ids never meet in the duplicate window; a submission is a creation on its tenant's own
  subject (`Nats-Expected-Last-Subject-Sequence: 0`), so what an existing id answers is the
  tenant's own job's sequence, never another's;
- before storing, the rules over the admission service's folded state refuse what it must
  not store (services/domain/policy/requesters.py): a submission over its tenant's or user's
  submit limits or past its tenant's submissions a second (`SubmitLimit`; the rate's buckets
  are this instance's, services/domain/policy/submit_rate.py), and from a per-user credential, whose subjects are
  `glu.<kind>.<tenant>.<user>.<job>` (issue 43), a submission naming another user
  (`NotYourUser`) or a request about a job that is not that user's (`UnknownJob`, the same
  words as for no job);
- the answer is JSON: `{"seq": N, "duplicate": bool}`, `{"exists": N}` (the tenant's job of
  that id exists at N), `{"error": "...", "reason": "SubmitLimit"}` (refused by a rule), or
  `{"error": "..."}`.

Clients (`submit`, `cancel`, `scale` with a CI credential) use `request_create` and
`request_publish`; what they return matches `Bus.create_once_acked` and `Bus.publish`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import structlog

from gpuledger import events as ev

PREFIX = "glr"
"""Intake subjects of a tenant's CI credential: `glr.<submit|cancel|scale|ctl>.<tenant>.<job>`."""
USER_PREFIX = "glu"
"""Intake subjects of a per-user credential (issue 43):
`glu.<submit|cancel|scale|ctl>.<tenant>.<user>.<job>`; its permissions allow only its own
tenant and user."""
SUBJECTS = f"{PREFIX}.>"
USER_SUBJECTS = f"{USER_PREFIX}.>"
QUEUE = "gpuledger-intake"
CLIENT_EVENTS = (
    ev.JobSubmitted,
    ev.JobCancelled,
    ev.ServiceScaled,
    *ev.CONTROL_EVENTS,  # a tenant's own job control (issue 42): `glr.ctl.<tenant>.<job>.<Type>`
)


class IntakeError(RuntimeError):
    """The intake refused a request (one line: why), or nobody answered it."""


class IntakeRefused(IntakeError):
    """The intake refused a request for a reason with a code (`reason`: `SubmitLimit`,
    `NotYourUser`, `UnknownJob`): nothing was stored."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def intake_subject(subject: str, user: str | None = None) -> str:
    """`glr.submit.t.j` for the log subject `gl.submit.t.j`; with a `user`,
    `glu.submit.t.<user>.j` (a per-user credential's)."""
    if user is None:
        return PREFIX + subject.removeprefix("gl")
    kind, tenant, rest = subject.split(".", 3)[1:]
    return f"{USER_PREFIX}.{kind}.{tenant}.{user}.{rest}"


def log_subject(subject: str) -> str:
    """`gl.submit.t.j` for the intake subject `glr.submit.t.j` (or `glu.submit.t.u.j`)."""
    return parse_subject(subject)[0]


def parse_subject(subject: str) -> tuple[str, str | None]:
    """(log subject, user) of an intake subject: the user a `glu.` subject names, None for a
    CI credential's `glr.` one."""
    if not subject.startswith(USER_PREFIX + "."):
        return "gl" + subject.removeprefix(PREFIX), None
    parts = subject.split(".")
    if len(parts) < 5:
        raise IntakeError(f"{subject[:200]}: not glu.<kind>.<tenant>.<user>.<job>")
    return ".".join(["gl", parts[1], parts[2], *parts[4:]]), parts[3]


def msg_id(key: bytes, subject: str, event_id: str) -> str:
    """The `Nats-Msg-Id` the intake stores a client event under: keyed by the admission
    identity, over the tenant's subject and the event's content-derived id."""
    mac = hmac.new(key, f"{subject}\n{event_id}".encode(), hashlib.blake2b).hexdigest()
    return f"i-{mac[:40]}"


def intake_key(nc: Any) -> bytes:
    """The intake's Msg-Id key: from the nkey seed the connection `nc` authenticated with
    (the admission identity's: the same for every admission replica), a fixed one without a
    seed (the ids are tenant-scoped all the same)."""
    from gpuledger.services.runtime.snapshots import seed_of_creds

    path = getattr(nc, "_nkeys_seed", None)  # nats-py keeps the seed file it connected with
    seed = (seed_of_creds(path) if path else None) or b"gpuledger intake without a credential"
    return hmac.new(seed, b"gpuledger intake msg-id v1", hashlib.sha256).digest()


def check_request(subject: str, data: bytes) -> tuple[str, ev.Event, str | None]:
    """(log subject, event, user) of an intake request, or IntakeError saying why not. One
    rule decides: the body is a client event (`CLIENT_EVENTS`) whose own subject is the
    request's (so the request's subject names the event's kind, tenant and job, and nothing
    else); a per-user credential's subject (`glu.`) also names its user, which the state's
    rules then hold it to (services/domain/policy/requesters.py)."""
    own_subject, user = parse_subject(subject)
    try:
        event = ev.decode(data)
    except ev.UndecodableEvent as exc:
        raise IntakeError(f"not a client event: {' '.join(str(exc).split())[:300]}") from None
    if not isinstance(event, CLIENT_EVENTS):
        raise IntakeError(f"{type(event).__name__} is not a client event")
    try:
        own = ev.subject_for(event)
    except ev.InvalidId as exc:
        raise IntakeError(str(exc)) from None
    if own != own_subject:
        raise IntakeError(f"a {type(event).__name__} of this content belongs on {own}")
    return own, event, user


async def store(bus, key: bytes, subject: str, event: ev.Event, data: bytes) -> dict[str, Any]:
    """Store a checked client event (`data`, as the client sent it) on `subject` with the
    intake's own headers; the answer."""
    import nats.js.errors

    from gpuledger.services.runtime.bus import (
        EXPECTED_LAST_SUBJECT_SEQ,
        EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
        MSG_ID,
        WRONG_LAST_SEQUENCE_CODES,
    )

    headers = {MSG_ID: msg_id(key, subject, event.event_id or "")}
    if isinstance(event, ev.JobSubmitted):  # a creation on the tenant's own subject
        headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
        scope = ev.subjects.create_filter(event)
        if scope != subject:
            headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = scope
    try:
        ack = await bus.js.publish(subject, data, headers=headers)
    except nats.js.errors.APIError as err:
        if err.err_code not in WRONG_LAST_SEQUENCE_CODES:
            return {"error": f"not stored: {err.description or err}"}
        found = (err.description or "").rsplit(":", 1)[-1].strip()
        return {"exists": int(found) if found.isdigit() else 0}
    return {"seq": ack.seq, "duplicate": bool(ack.duplicate)}


async def serve_intake(bus, state: Callable[[], Any] | None = None) -> Any:
    """Answer intake requests on this connection (the admission service's) until it closes;
    `state` gives the service's folded `Ledger`, whose rules refuse a request before it is
    stored (submit limits, a per-user credential's own jobs: `requesters.refusal`)."""
    from gpuledger.services.domain.policy.requesters import refusal
    from gpuledger.services.domain.policy.submit_rate import SubmitRate

    log = structlog.get_logger("gpuledger.intake")
    key = intake_key(bus.nc)
    rates = SubmitRate()

    async def handle(msg) -> None:
        if not msg.reply:
            return
        try:
            subject, event, user = check_request(msg.subject, msg.data)
            now_ms = time.monotonic_ns() // 1_000_000
            refused = refusal(state(), event, user, rates, now_ms) if state is not None else None
            if refused is not None:
                raise IntakeRefused(refused.reason, f"{refused.reason}: {refused.message}")
            answer = await store(bus, key, subject, event, msg.data)
        except IntakeRefused as exc:
            answer = {"error": str(exc), "reason": exc.reason}
        except IntakeError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a request never stops the service
            log.warning("intake.failed", subject=msg.subject[:200], error=repr(exc))
            answer = {"error": f"not stored: {type(exc).__name__}"}
        await msg.respond(json.dumps(answer).encode())

    await bus.nc.subscribe(USER_SUBJECTS, queue=QUEUE, cb=handle)
    return await bus.nc.subscribe(SUBJECTS, queue=QUEUE, cb=handle)


def asks_intake(nc: Any) -> bool:
    """Whether a client connected as `nc` puts its client events in through the intake: a
    tenant's CI identity, or a credential copied out of its auth directory (which does not
    say whose it is); the operator, the gateway and a connection without a credential
    publish into the stream themselves."""
    from gpuledger.services.runtime.auth import principal_of_creds

    path = getattr(nc, "_nkeys_seed", None)
    if not path:
        return False
    principal = principal_of_creds(path)
    return principal is None or principal.startswith(("ci:", "user:"))


def intake_user(nc: Any) -> str | None:
    """The user a client connected as `nc` acts as: that of a per-user credential
    (`user:<tenant>:<user>`, services/runtime/auth.py), else None."""
    from gpuledger.services.runtime.auth import principal_of_creds, user_of_principal

    path = getattr(nc, "_nkeys_seed", None)
    principal = principal_of_creds(path) if path else None
    found = user_of_principal(principal) if principal else None
    return found[1] if found else None


async def publish_client_event(bus, event: ev.Event, as_user: str | None = None) -> int:
    """Publish a cancel or a scale (`JobCancelled`, `ServiceScaled`): through the intake
    where `asks_intake` or on `as_user`'s own intake subject (the gateway, for a user's
    token), else into the stream. The stored sequence."""
    if as_user is not None or asks_intake(bus.nc):
        return await request_publish(bus, event, as_user=as_user)
    return await bus.publish(event)


async def create_client_event(bus, event: ev.Event, as_user: str | None = None) -> tuple[int, bool]:
    """Create a job (`JobSubmitted`) once: through the intake where `asks_intake` or on
    `as_user`'s own intake subject, else `Bus.create_once_acked(read_existing=False)`.
    (seq, duplicate) or AlreadyExists."""
    if as_user is not None or asks_intake(bus.nc):
        return await request_create(bus, event, as_user=as_user)
    return await bus.create_once_acked(event, read_existing=False)


async def _ask(bus, event: ev.Event, timeout: float, as_user: str | None = None) -> dict[str, Any]:
    """The intake's answer to `event`, asked on `as_user`'s subjects (default: the user of
    this connection's credential, if any); while no admission service listens (one
    starting, a standby taking over) the request is repeated for up to `timeout` seconds."""
    import asyncio
    import time

    import nats.errors

    user = as_user if as_user is not None else intake_user(bus.nc)
    subject = intake_subject(ev.subject_for(event), user)
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await bus.nc.request(subject, ev.encode(event), timeout=timeout)
            break
        except nats.errors.NoRespondersError:
            if time.monotonic() >= deadline:
                raise IntakeError(
                    f"no admission service answered submissions (the intake) in {timeout:g}s"
                ) from None
            await asyncio.sleep(0.2)
        except (nats.errors.TimeoutError, TimeoutError):
            raise IntakeError(f"the intake did not answer in {timeout:g}s") from None
    answer = json.loads(reply.data)
    if "error" in answer and answer.get("reason"):
        raise IntakeRefused(answer["reason"], answer["error"])
    if "error" in answer:
        raise IntakeError(answer["error"])
    return answer


async def request_create(
    bus, event: ev.Event, *, timeout: float = 30.0, as_user: str | None = None
) -> tuple[int, bool]:
    """`Bus.create_once_acked(event, read_existing=False)` through the intake: (seq,
    duplicate), AlreadyExists naming the tenant's own job's sequence, IntakeError."""
    from gpuledger.services.runtime.bus import AlreadyExists

    answer = await _ask(bus, event, timeout, as_user)
    if "exists" in answer:
        subject = ev.subject_for(event)
        raise AlreadyExists(subject, f"wrong last sequence: {answer['exists']}")
    return int(answer["seq"]), bool(answer.get("duplicate"))


async def request_publish(
    bus, event: ev.Event, *, timeout: float = 30.0, as_user: str | None = None
) -> int:
    """`Bus.publish(event)` through the intake: the stored sequence, or IntakeError."""
    return int((await _ask(bus, event, timeout, as_user))["seq"])
