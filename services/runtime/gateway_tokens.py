"""The HTTP gateway's bearer tokens: a file mapping each tenant, and each user of a tenant
(`user:TENANT:USER`, the principal `gpuledger auth add-user` names), to the SHA-256 hashes of
its tokens, so the file never holds a usable secret.

    # tokens.yaml (YAML or JSON), written 0600 by `gpuledger gateway token TENANT [USER]`
    research:
      - sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    user:research:alice:
      - sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
    product: []

A token is presented as `Authorization: Bearer <token>`; it is accepted for the one owner
whose list holds `sha256:<hex digest of the token>`: a tenant's token acts for its tenant
(vouching for any user it names, like a tenant's CI key), a user's token as that user only.
Validation is strict: every problem is one line naming the file and key path.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path
from typing import Any

import yaml

from gpuledger.events.ids import validate_tenant, validate_token

PREFIX = "sha256:"
USER_KEY = "user:"
"""A user's key in the file: `user:TENANT:USER` (a tenant name has no `:`)."""

Owner = tuple[str, str | None]
"""(tenant, user) a token acts for; user None: the tenant's own token."""
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


class TokenFileError(ValueError):
    """A tokens file that cannot be used; one line per problem in `problems`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def token_hash(token: str) -> str:
    """What the tokens file stores for `token`."""
    return PREFIX + hashlib.sha256(token.encode()).hexdigest()


def owner_key(tenant: str, user: str | None = None) -> str:
    """The file's key of a tenant's tokens, or of one of its users' (`user:TENANT:USER`)."""
    return tenant if user is None else f"{USER_KEY}{tenant}:{user}"


def owner_of_key(key: str) -> Owner:
    """(tenant, user) of a file key; ValueError naming what is wrong."""
    if not key.startswith(USER_KEY):
        return validate_tenant(key), None
    tenant, sep, user = key.removeprefix(USER_KEY).partition(":")
    if not sep:
        raise ValueError(f"invalid user key {key!r}: expected user:TENANT:USER")
    return validate_tenant(tenant), validate_token("user", user)


def parse(doc: Any, where: str) -> dict[str, tuple[str, ...]]:
    """Owner key (a tenant, or `user:TENANT:USER`) -> token hashes of a loaded tokens
    document; TokenFileError."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TokenFileError(
            [
                f"{where}: (top level): expected a mapping of tenant to a list of "
                f"'sha256:<hex>' token hashes, got {type(doc).__name__}"
            ]
        )
    problems: list[str] = []
    out: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for tenant, hashes in doc.items():
        try:
            owner_of_key(str(tenant))
        except ValueError as exc:
            what = "a user" if str(tenant).startswith(USER_KEY) else "a tenant name"
            problems.append(f"{where}: {tenant}: not {what}: {exc}")
            continue
        if hashes is None:
            hashes = []
        if not isinstance(hashes, list):
            problems.append(
                f"{where}: {tenant}: expected a list of 'sha256:<hex>' token hashes, "
                f"got {type(hashes).__name__}"
            )
            continue
        for i, h in enumerate(hashes):
            if not isinstance(h, str) or not _HASH.match(h):
                problems.append(
                    f"{where}: {tenant}[{i}]: expected 'sha256:' and 64 lower-case hex "
                    "digits, the hash of a token (the file never holds tokens themselves; "
                    "`gpuledger gateway token` adds one)"
                )
            elif owner.setdefault(h, str(tenant)) != str(tenant):
                problems.append(
                    f"{where}: {tenant}[{i}]: the same token hash is listed for tenant {owner[h]!r}"
                )
        out[str(tenant)] = tuple(h for h in hashes if isinstance(h, str))
    if problems:
        raise TokenFileError(problems)
    return out


def load(path: Path) -> dict[str, tuple[str, ...]]:
    """Read and validate a tokens file; TokenFileError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TokenFileError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TokenFileError([" ".join(f"{path}: not YAML/JSON: {exc}".split())]) from None
    return parse(doc, str(path))


class Tokens:
    """The tokens of a file, re-read when the file changes (a token added with `gpuledger
    gateway token` works at once; an invalid edit keeps the tokens last loaded)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._by_hash: dict[str, Owner] = {}
        self.reload()

    def reload(self) -> bool:
        """Re-read the file if it changed; True if it was read. TokenFileError (old tokens stay)."""
        try:
            st = self.path.stat()
        except OSError as exc:
            raise TokenFileError([f"{self.path}: cannot read: {exc.strerror}"]) from None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return False
        tenants = load(self.path)
        self._by_hash = {h: owner_of_key(t) for t, hashes in tenants.items() for h in hashes}
        self._stamp = stamp
        return True

    @property
    def count(self) -> int:
        return len(self._by_hash)

    def owner_of(self, token: str) -> Owner | None:
        """(tenant, user) `token` acts for (user None: a tenant's token), or None."""
        digest = token_hash(token)
        found = None
        for h, owner in self._by_hash.items():  # constant time per entry, no early exit
            if hmac.compare_digest(h, digest):
                found = owner
        return found

    def tenant_of(self, token: str) -> str | None:
        """The tenant `token` belongs to (its own or one of its users'), or None."""
        owner = self.owner_of(token)
        return None if owner is None else owner[0]


def add_token(path: Path, tenant: str, user: str | None = None) -> str:
    """Generate a token for `tenant` (with `user`: for that user of it), store its hash in
    `path` (created 0600 if missing; TokenFileError if the file is invalid, or names no
    `tenant` for a user's token: nothing is written) and return the token (shown once). ValueError (`InvalidId`) for a bad tenant or user name."""
    key = owner_key(tenant, user)
    owner_of_key(key)
    tenants = dict(load(path)) if path.exists() else {}
    if user is not None and tenant not in tenants:  # as `auth add-user` needs the tenant's key
        raise TokenFileError(
            [
                f"{path}: unknown tenant {tenant!r} for user {user!r} (add the tenant first: "
                f"gpuledger gateway token {tenant} --tokens {path})"
            ]
        )
    token = secrets.token_urlsafe(32)
    tenants[key] = (*tenants.get(key, ()), token_hash(token))
    text = (
        "# gpuledger gateway tokens: tenant (or user:TENANT:USER) -> sha256 hashes of its "
        "bearer tokens\n" + yaml.safe_dump({t: list(h) for t, h in tenants.items()}, sort_keys=True)
    )
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return token
