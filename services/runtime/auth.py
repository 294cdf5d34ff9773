"""Identities and least-privilege permissions for the NATS server every gpuledger cluster runs on.

`init(dir)` writes, for each principal (a role, a node agent, a tenant's CI system, the
auditor, the operator), an nkey seed file (`<name>.nk`, mode 0600), the server's
`auth.conf` (one `authorization` user per principal with its permissions), a complete
`nats.conf` for a stand-alone server that includes it, and `credentials.json`, which maps
each principal to `{"file": <path relative to dir>, "kind": "nkey", "public_key": ...,
"inbox_prefix": ...}` so tooling can find them.

Invariants:
- no anonymous access: the server config lists users only (no `no_auth_user`);
- a principal publishes only its own subjects (events/subjects.py names the producer in every
  subject) and calls only the JetStream API it needs; only `admin` may create, update, purge
  or delete a stream (the log, the lease and snapshot buckets);
- a service writes and reads only its own snapshot (`SNAPSHOT_BUCKET`, its key and the chunk
  keys under it: services/runtime/snapshots.py), by direct gets of those keys only;
- a tenant's CI identity publishes nothing into the stream: it asks the intake
  (`glr.submit.<tenant>.>`, `glr.cancel.<tenant>.>`, `glr.scale.<tenant>.>`, answered by the
  admission service, which stores the event with headers of its own: services/runtime/
  intake.py) and asks `glq.job.<tenant>.>` (its own jobs' status); it cannot read the stream;
- a tenant's user (`user:<tenant>:<user>`, `auth add-user`) asks the intake on its own
  subjects only (`glu.<kind>.<tenant>.<user>.>`), which hold it to its own user's jobs, and
  may ask its tenant's jobs' status; a user is added only to a tenant with a CI identity;
- every principal receives replies only on its own inbox prefix, `_INBOX_<public key>` (of its
  first key: kept across rotations, with the current key's too), so no principal can read
  another's consumer deliveries or replies;
- secrets are written 0600 and never overwritten by `add_*` (rotation replaces one on purpose).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The event contract (its package imports every event type) and the status-query prefix are
# imported by the functions that name subjects: the CLI reads LEASE_TTL_S when it starts.

CREDENTIALS = "credentials.json"
AUTH_CONF = "auth.conf"
SERVER_CONF = "nats.conf"
CLUSTER_CONF = "cluster.conf"
ROUTE_SECRET = "route.secret"
ROUTE_USER = "route"
CLUSTER_NAME = "gpuledger"
LEASE_BUCKET = "gpuledger-leases"
PROJECTOR_DURABLE = "projector"
"""The projector's durable consumer (projections/nats_source.py DURABLE)."""
SNAPSHOT_BUCKET = "gpuledger-snapshots"

CONTROL_PLANE = ("admission", "quota", "scheduler", "preemption")
"""Roles whose decisions are fenced by a leader lease (always on; node agents, one per node,
take none)."""
LEASE_TTL_S = 10.0
"""The default leader lease TTL (`gpuledger run --leader-lease`, `up`): a standby takes over
within about this long (plus two polls) after its leader stopped renewing."""
SERVICE_SUBJECTS = {
    "admission": "gl.admission.>",
    "quota": "gl.quota.>",
    "scheduler": "gl.sched.>",
    "preemption": "gl.preempt.>",
}
SCHEDULE_SUBJECTS: list[str] = []
"""What the quota role publishes for time-of-day policies (schedules) beyond `gl.quota.>`:
nothing since issue 30. Their changes (`TenantConfigured`, `PriorityClassConfigured`,
`ServiceScaled`) go to `gl.quota.<type>`, where the fold takes them only as what a schedule in
force produces (`NotScheduled`); `gl.admin.>` and `gl.scale.>` are not the quota's."""
FIXED = (*CONTROL_PLANE, "projector", "auditor", "admin", "gateway", "agents")
"""Principals every cluster has. `agents` is the simulated fleet (`gpuledger up`, demos):
one process that speaks for every node; a real node agent uses `node:<name>`."""


class AuthError(ValueError):
    """A bad auth directory, principal or credential file (one line, for the CLI)."""


# ---------------------------------------------------------------------- permissions


CONSUMER_SLOTS = 8
"""How many consumers one identity may hold on the stream at once (ephemeral or not): its
consumers can only carry the names `consumer_names` gives it."""


def consumer_names(inbox: str, slots: int = CONSUMER_SLOTS) -> list[str]:
    """The consumer names an identity whose reply prefix is `inbox` may create (and delete):
    `q<16 hex of blake2b(inbox)><i>`. Unguessable without the identity's public key, the same
    for a seed file copied out of its auth directory (the client derives them from its own
    prefix, services/runtime/bus.py)."""
    import hashlib

    digest = hashlib.blake2b(inbox.encode(), digest_size=8).hexdigest()
    return [f"q{digest}{i}" for i in range(slots)]


def _consumer_slots(inboxes: list[str]) -> list[str]:
    """The create and delete calls of an identity's own consumer names (`consumer_names` of
    each of its reply prefixes): the server counts what it may hold by name, so no key can
    hold more than CONSUMER_SLOTS consumers per prefix, durable or not."""
    from gpuledger.events.subjects import STREAM

    out: list[str] = []
    for inbox in inboxes:
        for name in consumer_names(inbox):
            out += [
                f"$JS.API.CONSUMER.CREATE.{STREAM}.{name}",
                f"$JS.API.CONSUMER.CREATE.{STREAM}.{name}.>",
                f"$JS.API.CONSUMER.DELETE.{STREAM}.{name}",
            ]
    return out


def _stream_reader() -> list[str]:
    """JetStream API calls of a reader of the log: stream info, consumer info, single-message
    and direct gets, flow control. Consumers are created only under the reader's own names
    (`_consumer_slots`, added per identity by `_user_block`), by the name-carrying create
    (`$JS.API.CONSUMER.CREATE.<stream>.<name>[.<filter>]`, where the server checks the name
    in the request against the subject); never by the bare
    `$JS.API.CONSUMER.CREATE.<stream>`, whose request may name any consumer: with it a
    reader replaced the projector's durable with its own filter, and never under any other
    name: with that a node key filled the stream's consumer limit (issue 44). Readers cannot
    list consumers."""
    from gpuledger.events.subjects import STREAM

    return [
        f"$JS.API.STREAM.INFO.{STREAM}",
        f"$JS.API.CONSUMER.INFO.{STREAM}.>",
        f"$JS.API.STREAM.MSG.GET.{STREAM}",
        f"$JS.API.DIRECT.GET.{STREAM}",
        f"$JS.API.DIRECT.GET.{STREAM}.>",
        f"$JS.FC.{STREAM}.>",
    ]


def _reader_deny() -> list[str]:
    """What no reader but the projector may publish: a create (or update) of the projector's
    durable consumer."""
    from gpuledger.events.subjects import STREAM

    return [
        f"$JS.API.CONSUMER.CREATE.{STREAM}.{PROJECTOR_DURABLE}",
        f"$JS.API.CONSUMER.CREATE.{STREAM}.{PROJECTOR_DURABLE}.>",
    ]


def _lease_user(role: str) -> list[str]:
    """A control-plane role's own key in the lease bucket (the bucket is created by admin)."""
    kv = f"KV_{LEASE_BUCKET}"
    return [
        f"$KV.{LEASE_BUCKET}.{role}",
        f"$JS.API.STREAM.INFO.{kv}",
        f"$JS.API.STREAM.MSG.GET.{kv}",
        f"$JS.API.DIRECT.GET.{kv}.>",
    ]


def _snapshot_user(key: str) -> list[str]:
    """A service's own snapshot key `key` and its chunks `key.>` (the bucket is created by
    admin): writes to them, direct gets of them, the bucket's stream info. Nothing else of
    the bucket: no other key, no consumer (no watch or listing), no purge."""
    kv, prefix = f"KV_{SNAPSHOT_BUCKET}", f"$KV.{SNAPSHOT_BUCKET}.{key}"
    return [
        prefix,
        f"{prefix}.>",
        f"$JS.API.STREAM.INFO.{kv}",
        f"$JS.API.DIRECT.GET.{kv}.{prefix}",
        f"$JS.API.DIRECT.GET.{kv}.{prefix}.>",
    ]


def permissions(principal: str) -> dict[str, Any] | None:
    """The server-side permissions of `principal` (None: everything, the operator):
    `publish` (allowed), `deny_publish` (refused even where `publish` allows it),
    `subscribe`, `responses`."""
    from gpuledger.events.subjects import STREAM

    perms = _permissions(principal)
    if perms is not None and principal != "projector":
        reader = f"$JS.API.STREAM.INFO.{STREAM}"  # a reader: never the projector's consumer
        perms["deny_publish"] = _reader_deny() if reader in perms["publish"] else []
    return perms


def _permissions(principal: str) -> dict[str, Any] | None:
    from gpuledger.events.subjects import STREAM
    from gpuledger.services.domain.fold.job_status import QUERY_PREFIX

    kind, _, name = principal.partition(":")
    reader = _stream_reader()
    if principal == "admin":
        return None
    if principal in SERVICE_SUBJECTS:
        pub = [
            SERVICE_SUBJECTS[principal],
            "gl.dead.>",
            *reader,
            *_lease_user(principal),
            *_snapshot_user(principal),
        ]
        sub: list[str] = []
        if principal == "admission":
            sub.append(f"{QUERY_PREFIX}.>")  # answers job status queries
            # stores CI keys' and users' client events (services/runtime/intake.py)
            sub += ["glr.>", "glu.>"]
            pub += ["gl.submit.>", "gl.cancel.>", "gl.scale.>", "gl.ctl.>"]
        return {"publish": pub, "subscribe": sub, "responses": principal == "admission"}
    if principal == "agents":
        return {
            "publish": ["gl.node.>", "gl.dead.>", *reader, *_snapshot_user("node-agent.*")],
            "subscribe": [],
        }
    if kind == "node":
        return {
            "publish": [
                f"gl.node.{name}.>",
                "gl.dead.>",
                *reader,
                *_snapshot_user(f"node-agent.{name}"),
            ],
            "subscribe": [],
        }
    if principal == "projector":  # its own durable consumer only (projections/nats_source.py)
        durable = [
            f"$JS.API.CONSUMER.{op}.{STREAM}.{PROJECTOR_DURABLE}"
            for op in ("DURABLE.CREATE", "CREATE", "DELETE", "MSG.NEXT")
        ]
        durable.append(f"$JS.ACK.{STREAM}.{PROJECTOR_DURABLE}.>")
        return {"publish": [*reader, *durable], "subscribe": []}
    if principal == "auditor":
        return {"publish": reader, "subscribe": []}
    if principal == "gateway":
        return {
            "publish": [
                "gl.submit.>",
                "gl.cancel.>",
                "gl.scale.>",
                "glu.submit.>",  # a user's token: on that user's intake subjects (issue 43)
                "glu.cancel.>",
                "glu.ctl.>",  # and its hold, release, requeue, top and update (issue 42)
                f"{QUERY_PREFIX}.>",
                *_job_control("*"),
            ],
            "subscribe": [],
        }
    if kind == "user":  # one user of a tenant: its own subjects of the intake (issue 43)
        tenant, user = name.split(":", 1)
        return {
            "publish": [
                *(f"glu.{verb}.{tenant}.{user}.>" for verb in ("submit", "cancel", "scale", "ctl")),
                f"{QUERY_PREFIX}.{tenant}.>",  # its tenant's jobs' status (like squeue)
            ],
            "subscribe": [],
        }
    if kind == "ci":  # asks the intake: never the stream itself (services/runtime/intake.py)
        return {
            "publish": [
                f"glr.submit.{name}.>",
                f"glr.cancel.{name}.>",
                f"glr.scale.{name}.>",
                f"{QUERY_PREFIX}.{name}.>",
                f"glr.ctl.{name}.>",  # hold / release / requeue / update / top of its own jobs
            ],
            "subscribe": [],
        }
    raise AuthError(f"unknown principal {principal!r} (one of: {', '.join(FIXED)}, {KINDS})")


KINDS = "node:NAME, ci:TENANT, user:TENANT:USER"
"""The principals of which a cluster has any number."""


def user_principal(tenant: str, user: str) -> str:
    """The principal of one user of a tenant: `user:<tenant>:<user>` (a tenant has no `:`)."""
    return f"user:{tenant}:{user}"


def user_of_principal(principal: str) -> tuple[str, str] | None:
    """(tenant, user) of a per-user principal, else None."""
    kind, _, name = principal.partition(":")
    if kind != "user" or ":" not in name:
        return None
    tenant, user = name.split(":", 1)
    return tenant, user


def _job_control(tenant: str) -> list[str]:
    """Job control (hold, release; events/control.py) of `tenant`'s own jobs (`*`: any
    tenant's, the gateway): `gl.ctl.<tenant>.>`. A CI key asks the intake on
    `glr.ctl.<tenant>.>` instead (issue 44). The operator's own acts travel on
    `gl.admin.ctl.>`, which only the operator may publish on."""
    return [f"gl.ctl.{tenant}.>"]


def check_principal(principal: str) -> str:
    """`principal` if it is well formed (node and tenant names are valid subject tokens)."""
    from gpuledger.events.ids import validate_tenant, validate_token

    kind, sep, name = principal.partition(":")
    try:
        if sep and kind == "node":
            validate_token("node", name)
        elif sep and kind == "ci":
            validate_tenant(name)
        elif sep and kind == "user":
            tenant, colon, user = name.partition(":")
            validate_tenant(tenant)
            if not colon:
                raise AuthError(f"principal {principal!r}: not user:TENANT:USER")
            validate_token("user", user)
        elif principal not in FIXED:
            raise AuthError(
                f"unknown principal {principal!r} (one of: {', '.join(FIXED)}, {KINDS})"
            )
    except ValueError as err:
        raise AuthError(f"principal {principal!r}: {err}") from None
    return principal


# ---------------------------------------------------------------------- keys


def new_seed() -> bytes:
    """A fresh nkey user seed (`SU...`)."""
    import nkeys

    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)


def public_key(seed: bytes) -> str:
    import nkeys

    try:
        return nkeys.from_seed(bytearray(seed.strip())).public_key.decode()
    except Exception as err:  # noqa: BLE001 - nkeys raises several unrelated types
        raise AuthError(f"not an nkey user seed ({type(err).__name__})") from None


def inbox_prefix(public: str) -> str:
    """The reply-subject prefix a principal may subscribe to."""
    return f"_INBOX_{public}"


def file_name(principal: str) -> str:
    """The key file of `principal`: its name made safe, and for a user a digest of the whole
    name too (user names may hold `@`, `+`, `=`, `,`, `~`, `:`, which would otherwise meet)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", principal.replace(":", "-"))
    if principal.startswith("user:"):
        import hashlib

        safe += "-" + hashlib.blake2b(principal.encode(), digest_size=4).hexdigest()
    return safe + ".nk"


def _write_secret(path: Path, data: bytes) -> None:
    """Write `data` 0600, atomically (a running service re-reads its seed on reconnect and
    must never see half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data + b"\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)


# ---------------------------------------------------------------------- the directory


@dataclass(frozen=True)
class Principal:
    name: str
    file: str
    public_key: str
    inbox: str = ""
    """The principal's reply prefix: `_INBOX_<its first public key>`, kept when its key is
    rotated, so that a running service that re-reads its seed on reconnect still receives its
    replies and consumer deliveries (its subscriptions outlive the old key)."""

    @property
    def inbox_prefix(self) -> str:
        return self.inbox or inbox_prefix(self.public_key)

    def inboxes(self) -> list[str]:
        """The reply prefixes this principal may subscribe to: its kept one and, after a
        rotation, the one of its current key (a process that has only the new seed file)."""
        current = inbox_prefix(self.public_key)
        return [self.inbox_prefix] + ([current] if current != self.inbox_prefix else [])

    def entry(self) -> dict[str, str]:
        return {
            "file": self.file,
            "kind": "nkey",
            "public_key": self.public_key,
            "inbox_prefix": self.inbox_prefix,
        }


class AuthDir:
    """A directory of identities (what `gpuledger auth init` writes)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()  # children may run in another directory

    @property
    def exists(self) -> bool:
        return (self.path / CREDENTIALS).exists()

    def principals(self) -> dict[str, Principal]:
        try:
            doc = json.loads((self.path / CREDENTIALS).read_text())
        except OSError as err:
            raise AuthError(f"{self.path / CREDENTIALS}: cannot read: {err.strerror}") from None
        except ValueError as err:
            raise AuthError(f"{self.path / CREDENTIALS}: not JSON: {err}") from None
        return {
            name: Principal(name, e["file"], e["public_key"], e.get("inbox_prefix", ""))
            for name, e in doc.items()
        }

    def creds(self, principal: str) -> Path:
        """The seed file of `principal`."""
        found = self.principals().get(principal)
        if found is None:
            raise AuthError(
                f"{self.path}: no identity {principal!r} (add it with `gpuledger auth add-node`"
                " or `add-tenant`)"
            )
        return self.path / found.file

    def add(self, *principals: str, rotate: bool = False) -> list[str]:
        """Create identities that do not exist yet (or, with `rotate`, replace their keys);
        rewrite credentials.json, auth.conf and nats.conf. Returns the names created or
        rotated."""
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        known = self.principals() if self.exists else {}
        changed = []
        for name in principals:
            check_principal(name)
            found = user_of_principal(name)
            if found is not None and f"ci:{found[0]}" not in known:
                raise AuthError(
                    f"{self.path}: unknown tenant {found[0]!r} for user {found[1]!r} (add the "
                    f"tenant first: `gpuledger auth add-tenant {self.path} {found[0]}`)"
                )
        for name in principals:
            if name in known and not rotate:
                continue
            seed = new_seed()
            fname = file_name(name)
            _write_secret(self.path / fname, seed)
            kept = known[name].inbox_prefix if name in known else ""
            known[name] = Principal(name, fname, public_key(seed), kept)
            changed.append(name)
        self._write(known)
        return changed

    def remove(self, *principals: str) -> list[str]:
        """Delete these identities (node agents and tenants' CI systems only: a role is
        rotated, never removed): their entries, their key files, their users in auth.conf.
        A server that reloads refuses their keys from then on. Returns the names removed;
        an unknown name is an error and nothing is removed."""
        known = self.principals()
        for name in principals:
            check_principal(name)
            if name in FIXED:
                raise AuthError(
                    f"{name!r} is a role every cluster needs: rotate its key instead "
                    f"(`gpuledger auth rotate {self.path} {name}`)"
                )
            if name not in known:
                raise AuthError(f"{self.path}: no identity {name!r} to remove")
        gone = [known.pop(name) for name in dict.fromkeys(principals)]
        self._write(known)
        for p in gone:
            (self.path / p.file).unlink(missing_ok=True)
        return [p.name for p in gone]

    def route_password(self) -> str:
        """The secret cluster nodes authenticate their routes with (generated once, 0600;
        every node of a cluster reads the same auth dir)."""
        path = self.path / ROUTE_SECRET
        if not path.exists():
            import secrets

            self.path.mkdir(parents=True, exist_ok=True)
            _write_secret(path, secrets.token_urlsafe(32).encode())
        return path.read_text().strip()

    def write_cluster_conf(
        self, routes: list[str], *, listen: str = "0.0.0.0:6222", name: str = CLUSTER_NAME
    ) -> Path:
        """`cluster.conf` for a stand-alone cluster (compose, systemd): the `cluster` block
        every node includes, with route authentication and a route to each `host:port` of
        `routes` (a node skips the route to itself). Written 0600: it holds the route secret."""
        path = self.path / CLUSTER_CONF
        _write_secret(path, cluster_conf(name, listen, routes, self.route_password()).encode())
        return path

    def _write(self, known: dict[str, Principal]) -> None:
        doc = {name: p.entry() for name, p in sorted(known.items())}
        tmp = self.path / (CREDENTIALS + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path / CREDENTIALS)
        # Atomically: a running `gpuledger up` watches this file and reloads what it reads.
        tmp = self.path / (AUTH_CONF + ".tmp")
        tmp.write_text(auth_conf(known.values()))
        tmp.replace(self.path / AUTH_CONF)
        conf = self.path / SERVER_CONF
        if not conf.exists():
            conf.write_text(server_conf())


def init(
    path: str | os.PathLike[str],
    *,
    tenants: list[str] = (),
    nodes: list[str] = (),
    cluster_routes: list[str] = (),
) -> AuthDir:
    """Everything a cluster needs to run authenticated (idempotent: existing keys stay).
    `cluster_routes` (`host:port` of each NATS node's cluster port) also writes cluster.conf."""
    d = AuthDir(path)
    d.add(*FIXED, *(f"ci:{t}" for t in tenants), *(f"node:{n}" for n in nodes))
    if cluster_routes:
        d.write_cluster_conf(list(cluster_routes))
    return d


def cluster_conf(name: str, listen: str, routes: list[str], password: str) -> str:
    """A nats-server `cluster` block: routes only between nodes that know the route secret
    (an `authorization` on the cluster port; each route URL carries the credential), never
    open routes."""
    from urllib.parse import quote

    urls = [f"nats-route://{ROUTE_USER}:{quote(password, safe='')}@{r}" for r in routes]
    return (
        "cluster {\n"
        f"  name: {json.dumps(name)}\n"
        f"  listen: {json.dumps(listen)}\n"
        f"  authorization {{\n    user: {json.dumps(ROUTE_USER)}\n    password: {json.dumps(password)}\n  }}\n"
        f"  routes: {json.dumps(urls)}\n"
        "}\n"
    )


def _user_block(p: Principal) -> str:
    perms = permissions(p.name)
    lines = [f"    # {p.name}", "    {", f"      nkey: {json.dumps(p.public_key)}"]
    if perms is not None and f"$JS.API.STREAM.INFO.{_stream()}" in perms["publish"]:
        perms["publish"] = [*perms["publish"], *_consumer_slots(p.inboxes())]  # a reader
    if perms is not None:
        sub = [*perms["subscribe"], *(f"{inbox}.>" for inbox in p.inboxes())]
        lines.append("      permissions: {")
        deny = perms.get("deny_publish") or []
        publish = f"allow: {json.dumps(perms['publish'])}"
        if deny:
            publish += f", deny: {json.dumps(deny)}"
        lines.append(f"        publish: {{ {publish} }}")
        lines.append(f"        subscribe: {{ allow: {json.dumps(sub)} }}")
        if perms.get("responses"):
            lines.append("        allow_responses: true")
        lines.append("      }")
    lines.append("    }")
    return "\n".join(lines)


def _stream() -> str:
    from gpuledger.events.subjects import STREAM

    return STREAM


def auth_conf(principals) -> str:
    """The server's `authorization` block: one nkey user per principal, no anonymous user."""
    users = ",\n".join(_user_block(p) for p in sorted(principals, key=lambda p: p.name))
    return (
        "# generated by gpuledger auth: one identity per principal, least privilege\n"
        f"authorization {{\n  users = [\n{users}\n  ]\n}}\n"
    )


def server_conf(port: int = 4222, store_dir: str = "/data/jetstream") -> str:
    """A stand-alone server config (compose, systemd) that includes auth.conf."""
    return (
        f"# generated by gpuledger auth init; edit freely (auth.conf is rewritten by `gpuledger auth`)\n"
        f"port: {port}\n"
        f"jetstream {{\n  store_dir: {json.dumps(store_dir)}\n  sync_interval: always\n}}\n"
        f"include {AUTH_CONF}\n"
    )


# ---------------------------------------------------------------------- clients


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a TLS set-up: the CA clients trust, the server's certificate and key, and
    (optional) a client certificate; `verify_clients` makes the server require one."""

    ca: str
    server_cert: str | None = None
    server_key: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    verify_clients: bool = False


TLS_ENV = {
    "ca": "GPULEDGER_TLS_CA",
    "client_cert": "GPULEDGER_TLS_CERT",
    "client_key": "GPULEDGER_TLS_KEY",
}
CREDS_ENV = "GPULEDGER_CREDS"


def tls_from_env(environ: Mapping[str, str] = os.environ) -> TlsFiles | None:
    """The client side of TLS from `GPULEDGER_TLS_CA` (+ `_CERT`, `_KEY` for a client certificate)."""
    values = {k: environ.get(v) or None for k, v in TLS_ENV.items()}
    return TlsFiles(**values) if values["ca"] else None


def client_options(
    creds: str | os.PathLike[str] | None = None, tls: TlsFiles | None = None
) -> dict[str, Any]:
    """`nats.connect` options for a credential file (an nkey seed: its key signs the
    server's nonce, and replies use the principal's own inbox prefix) and optional TLS."""
    options: dict[str, Any] = {}
    if creds is not None:
        path = Path(creds)
        try:
            seed = path.read_bytes()
        except OSError as err:
            raise AuthError(f"{path}: cannot read credential file: {err.strerror}") from None
        options["nkeys_seed"] = str(path)
        options["inbox_prefix"] = _kept_inbox(path) or inbox_prefix(_seed_public_key(path, seed))
    if tls is not None:
        import ssl

        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca)
            if tls.client_cert:
                ctx.load_cert_chain(tls.client_cert, tls.client_key)
        except (OSError, ssl.SSLError) as err:
            raise AuthError(f"TLS files ({tls.ca}, {tls.client_cert}): {err}") from None
        options["tls"] = ctx
    return options


@dataclass(frozen=True)
class NatsAccess:
    """How a process reaches the bus: the URL, its own credential, TLS, and (for a launcher
    such as `gpuledger up`) the auth directory from which each child gets its own identity."""

    url: str
    creds: Path | None = None
    auth: AuthDir | None = None
    tls: TlsFiles | None = None

    def options(self) -> dict[str, Any]:
        return client_options(self.creds, self.tls)

    def as_principal(self, principal: str) -> NatsAccess:
        """The same bus as `principal` (its own credential from the auth directory; without
        one, this process's credential is shared)."""
        if self.auth is None:
            return self
        return NatsAccess(self.url, self.auth.creds(principal), self.auth, self.tls)

    def child_env(self) -> dict[str, str]:
        """Environment for a child process that connects with this access."""
        env = {} if self.creds is None else {CREDS_ENV: str(self.creds)}
        if self.tls is not None:
            for field, var in TLS_ENV.items():
                if getattr(self.tls, field):
                    env[var] = str(getattr(self.tls, field))
        return env


def principal_of_creds(creds: str | os.PathLike[str]) -> str | None:
    """The principal a credential file belongs to, when it lies in an auth directory (its
    credentials.json names it), else None."""
    path = Path(creds).absolute()
    try:
        doc = json.loads((path.parent / CREDENTIALS).read_text())
    except (OSError, ValueError):
        return None
    return next((name for name, e in doc.items() if e.get("file") == path.name), None)


def _kept_inbox(creds: Path) -> str | None:
    """The reply prefix credentials.json beside `creds` keeps for it (stable across
    rotations), if there is one."""
    path = creds.absolute()
    try:
        doc = json.loads((path.parent / CREDENTIALS).read_text())
    except (OSError, ValueError):
        return None
    for entry in doc.values() if isinstance(doc, dict) else ():
        if isinstance(entry, dict) and entry.get("file") == path.name:
            prefix = entry.get("inbox_prefix")
            return prefix if isinstance(prefix, str) and prefix.startswith("_INBOX_") else None
    return None


def consumer_slots_of(options: Mapping[str, Any]) -> list[str] | None:
    """The consumer names a client connecting with `options` (`client_options`) may create:
    `consumer_names` of its reply prefix; None (any name) for the operator, whose entry in
    credentials.json beside its seed says so, and for a client without a credential."""
    seed, inbox = options.get("nkeys_seed"), options.get("inbox_prefix")
    if not seed or not isinstance(inbox, str):
        return None
    path = Path(seed).absolute()
    try:
        doc = json.loads((path.parent / CREDENTIALS).read_text())
    except (OSError, ValueError):
        doc = {}
    entry = doc.get("admin") if isinstance(doc, dict) else None
    if isinstance(entry, dict) and entry.get("file") == path.name:
        return None
    return consumer_names(inbox)


def principal_of(role: str, node: str | None = None) -> str:
    """The identity a service process runs as."""
    if role == "node-agent":
        return "agents" if node is None else f"node:{node}"
    return role


def _seed_public_key(path: Path, data: bytes) -> str:
    for line in data.splitlines():
        if line.strip().startswith(b"SU"):
            try:
                return public_key(line.strip())
            except AuthError as err:
                raise AuthError(f"{path}: {err}") from None
    raise AuthError(f"{path}: no nkey user seed (a line starting with SU) in this file")
