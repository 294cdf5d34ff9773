"""Identifier rules and deterministic event ids.

Ids that become NATS subject tokens (job ids, node names, tenant path segments) must not
contain `.`, `*`, `>` or whitespace and are bounded in length, so a subject can never be
forged or widened by a crafted id. Event ids are derived from a semantic key (what the event
is about) so that a retried or re-decided publish carries the same `Nats-Msg-Id` and is
deduplicated by JetStream.
"""

from __future__ import annotations

import hashlib
import re

MAX_ID_LEN = 128
_TOKEN = re.compile(r"^[A-Za-z0-9_\-:+@=,~]+$")
_TENANT = re.compile(r"^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*$")


class InvalidId(ValueError):
    """An id that cannot be used as a subject token; `reason` says why."""

    def __init__(self, kind: str, value: str, reason: str) -> None:
        super().__init__(f"invalid {kind} {value!r}: {reason}")
        self.kind = kind
        self.value = value
        self.reason = reason


_VALID_TOKENS: set[str] = set()  # values already accepted (validity depends on the value only)
_VALID_TENANTS: set[str] = set()


def validate_token(kind: str, value: str) -> str:
    """Return `value` if it is a safe subject token (job id, node name), else raise InvalidId."""
    if type(value) is str and value in _VALID_TOKENS:
        return value
    if not isinstance(value, str) or not value:
        raise InvalidId(kind, str(value), "must be a non-empty string")
    if len(value) > MAX_ID_LEN:
        raise InvalidId(kind, value, f"longer than {MAX_ID_LEN} characters")
    if not _TOKEN.match(value):
        raise InvalidId(
            kind, value, "only letters, digits and _-:+@=,~ are allowed (no '.', '*', '>', spaces)"
        )
    if len(_VALID_TOKENS) >= 65536:
        _VALID_TOKENS.clear()
    _VALID_TOKENS.add(value)
    return value


REPLICA_SEPARATOR = "~"
"""Joins a service's job id and a replica index into the replica's job id (`svc~0`)."""
ARRAY_SEPARATOR = "@"
"""Joins an array job's id and a task index into the task's job id (`sweep@7`)."""


TENANT_KEY_SEPARATOR = "~~"
"""Joins a job id and a digest of its tenant in the fold's key of a job whose id another
tenant's job already holds (`tenant_job_key`). No submitted id holds `~`."""
_KEY_SUFFIX = re.compile(r"~~[0-9a-f]{16}")
_KEY_ID_LEN = 64


def tenant_job_key(tenant: str, job_id: str) -> str:
    """The key under which the fold keeps `tenant`'s job `job_id` when that id already names
    another tenant's job: `<job id>~~<16 hex digits of blake2b(tenant, job id)>` (the id cut
    to 64 characters, so replica, task and allocation ids built on the key stay valid
    tokens). Job ids are per tenant: the first job of an id keeps the id itself as its key
    (every log written before keeps its keys), later ones of other tenants get this one.
    Decisions about the job carry the key as their `job_id`; clients never see it (a
    tenant names its jobs by the id it submitted)."""
    digest = hashlib.blake2b(f"{tenant}\x1f{job_id}".encode(), digest_size=8).hexdigest()
    return f"{job_id[:_KEY_ID_LEN]}{TENANT_KEY_SEPARATOR}{digest}"


def without_keys(text: str) -> str:
    """`text` (a decision's message) with every tenant key shown as the id it stands for."""
    return _KEY_SUFFIX.sub("", text) if TENANT_KEY_SEPARATOR in text else text


def job_name(key: str) -> str:
    """The job id a tenant submitted, for the fold's key of its job (or of a task or replica
    of it): `tenant_job_key`'s suffix removed (an id cut to 64 characters stays cut)."""
    return _KEY_SUFFIX.sub("", key, count=1) if TENANT_KEY_SEPARATOR in key else key


def validate_job_id(value: str) -> str:
    """Return `value` if it may name a job a client submits: a subject token
    (`validate_token`) without `~`, which only replica ids `<service>~<i>` hold, and without
    `@`, which only array task ids `<array>@<i>` hold, so a user's job can never take a
    replica's or a task's id. Else raise InvalidId."""
    validate_token("job id", value)
    if REPLICA_SEPARATOR in value:
        raise InvalidId(
            "job id",
            value,
            f"{REPLICA_SEPARATOR!r} is reserved for the replicas of services "
            f"(<service>{REPLICA_SEPARATOR}<index>); use another character",
        )
    if ARRAY_SEPARATOR in value:
        raise InvalidId(
            "job id",
            value,
            f"{ARRAY_SEPARATOR!r} is reserved for the tasks of array jobs "
            f"(<array>{ARRAY_SEPARATOR}<index>); use another character",
        )
    return value


def validate_tenant(value: str) -> str:
    """Tenant paths are `/`-separated segments (`org/team/project`) of safe characters."""
    if type(value) is str and value in _VALID_TENANTS:
        return value
    if not isinstance(value, str) or not value:
        raise InvalidId("tenant", str(value), "must be a non-empty string")
    if len(value) > MAX_ID_LEN:
        raise InvalidId("tenant", value, f"longer than {MAX_ID_LEN} characters")
    if not _TENANT.match(value):
        raise InvalidId(
            "tenant", value, "must be '/'-separated segments of letters, digits, '_' and '-'"
        )
    if len(_VALID_TENANTS) >= 4096:
        _VALID_TENANTS.clear()
    _VALID_TENANTS.add(value)
    return value


def derive_event_id(kind: str, key: str) -> str:
    """Deterministic event id: `<kind>-<24 hex digits of blake2b(kind, key)>`.

    `kind` is the event type name, `key` the semantic identity of the fact (for example
    `"job-7#2"` for the third placement of job-7). Equal inputs always give equal ids.
    """
    digest = hashlib.blake2b(f"{kind}\x1f{key}".encode(), digest_size=12).hexdigest()
    return f"{kind}-{digest}"
