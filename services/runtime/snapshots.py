"""Snapshots of a service's folded state in JetStream, so a restart folds only the log's tail.

A snapshot is the host's folded state at stream sequence `seq` (every message up to `seq`
folded, nothing after), with a `Manifest`: format, state schema, service, sequence, the
stream's first sequence and creation time, the configuration digest in force, sizes, a
BLAKE2b digest of the payload, and a keyed MAC. `Host` saves one from time to time once
caught up (`SnapshotPolicy`) and, on start, loads the newest one that checks out and folds
only the messages after `seq`. Anything wrong with it (a MAC that is not the service's, another
format or schema, a digest mismatch, a missing or short chunk, a payload that does not
decode, a sequence beyond the stream's last one, a stream whose first sequence or creation
time changed, a state that disagrees with its manifest) is `Unusable`: the host logs one
`host.snapshot_ignored` line with the reason and refolds the whole log, exactly as before
snapshots existed.

Snapshots carry no code (issue 30). Encoding (`FORMAT`): a graph codec over msgspec msgpack
(`_encode_graph`), never pickle: a value is a scalar or a tagged list; classes are named and
must be on a fixed list of the fold's data classes (`_classes`); an object is restored without
calling its class and its fields are set directly; an event or spec struct is msgpack-decoded
as its type, so msgspec validates it. Nothing a stored byte says is imported, called or
evaluated. Shared objects stay shared (back references), insertion orders are kept, so a
restored state is the folded one, memos and all; the schema fingerprint (`schema()`: a
version bumped by hand plus the field names of every class the fold holds) makes old
snapshots incompatible rather than half-loaded. Then zlib level 1 and BLAKE2b-256 over the
compressed bytes, and HMAC-SHA256 over the manifest (which holds that digest) under a key
derived from the service's own nkey seed (`mac_key`; the secret kept with its credentials):
the bucket is created by the operator and each service is confined by NATS permissions to its
own keys (services/runtime/auth.py), but the operator's key (or a rotated-out service key)
can write any key; what it writes is refused as "forged or foreign". Measured on the synthetic
log of 100,000 events (2-core machine, shared): encode 0.68 s, decode 0.47 s, 11.7 MB -> 1.3 MB
after zlib; the earlier pickle-based codec took 0.31 s / 0.16 s for 7.8 MB. The fleet's score
caches (`Fleet._caches`, transparent memos of queries, docs/deciders.md) are left out and
refill on the next query; everything the fold owns is kept.

Encoding runs in a forked child (`Encoding`, the way Redis's BGSAVE does it): the child sees
the fold as it was at `fork()` and encodes it while the parent's event loop goes on folding
and deciding; the parent only pauses for the fork (encoding 1 M events' fold in the loop
would pause it for seconds).

Storage: the KV bucket `gpuledger-snapshots` (created by the operator,
`cli_bus(ensure=True)`). A fold of 100,000 events is about 1.3 MB after zlib, ten times that
at 1 M events: beyond one KV value (the server's max payload, 1 MiB by default). Not the
object store: its chunks go to random subjects and replacing an object purges through the
stream's bucket-wide purge API, so a service could not be confined to its own snapshot.
Instead the payload is cut into chunks under the service's own key prefix, `KEY.<slot>.<i>`
(two slots, `a` and `b`, used in turn), then the manifest is written to `KEY` itself (the
service name, `name.instance` for node agents) naming its slot: a crash mid-write leaves the
manifest on the previous, intact slot, and chunks left over from a longer earlier snapshot
are deleted. NATS permissions then confine each service to `KEY` and `KEY.>`.

The projector has no snapshot here: it commits the last sequence it applied in the same
DuckDB transaction as its rows (projections/nats_source.py) and resumes after it; that
committed sequence is its checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import gc
import hashlib
import hmac
import os
import signal
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KeyValue

BUCKET = "gpuledger-snapshots"
SCHEMA_VERSION = 1
"""Bump by hand when the meaning of the folded state changes without its shape changing."""
FORMAT = "gls3+msgpack-graph+zlib1+blake2b256+hmac-sha256"


class Unusable(Exception):
    """A snapshot that must be ignored (the message says why, in one line)."""


@dataclasses.dataclass
class SnapshotPolicy:
    """When a host saves its folded state: after `every_events` newly folded events, or
    after `every_s` seconds with anything new, whichever comes first; but never sooner after
    the last one than its cost (the encoding child's run, or the loop's pause if longer)
    divided by `max_cost_share`, so snapshots of a large fold take a bounded share of a core
    (at 1 M events an encoding took 5-7 s on a loaded 2-core machine with pickle alone: one
    every 2 minutes at most with the default 5%; about a quarter of that since msgspec
    encodes the records). `every_events` bounds the tail a restart folds, which at 1 M
    events is as long as loading the snapshot: 10,000 (was 20,000) keeps a restart there
    under 3 s."""

    every_events: int = 10_000
    every_s: float = 300.0
    max_cost_share: float = 0.05
    enabled: bool = True


class Manifest(msgspec.Struct, frozen=True):
    format: str
    schema: str
    service: str
    instance: str
    seq: int
    """Every message up to this stream sequence is folded, none after."""
    stream_first_seq: int
    stream_created: str
    config_digest: str
    raw_bytes: int
    bytes: int
    digest: str
    """BLAKE2b-256 of the stored (compressed) payload."""
    slot: str
    chunks: int
    chunk_bytes: int
    saved_ms: int
    mac: str = ""
    """HMAC-SHA256, under the service's snapshot key (`mac_key`), of the manifest with this
    field empty: it covers the payload through `digest`."""


MAC_CONTEXT = b"gpuledger snapshot mac v1"


def mac_key(seed: bytes) -> bytes:
    """The key a service signs its snapshots with, derived from its own nkey seed (the secret
    kept with its credentials): HMAC-SHA256(seed, context). Whoever does not hold the seed
    (another service, a node agent, the operator's own key) cannot write a snapshot the
    service accepts, even with write access to the bucket."""
    return hmac.new(seed.strip(), MAC_CONTEXT, hashlib.sha256).digest()


def seed_of_creds(path: str | os.PathLike[str]) -> bytes | None:
    """The nkey user seed (`SU...`) in a credential file, None if there is none."""
    try:
        data = open(path, "rb").read()  # noqa: SIM115 - a small file, read once
    except OSError:
        return None
    return next((ln.strip() for ln in data.splitlines() if ln.strip().startswith(b"SU")), None)


def connection_mac_key(nc: Any) -> bytes | None:
    """`mac_key` of the seed a nats-py connection authenticated with (its `nkeys_seed` file
    or `nkeys_seed_str`), None for a connection without one."""
    path = getattr(nc, "_nkeys_seed", None)
    seed = seed_of_creds(path) if path else None
    if seed is None and getattr(nc, "_nkeys_seed_str", None):
        seed = str(nc._nkeys_seed_str).encode()  # noqa: SLF001 - nats-py keeps it there
    return None if not seed else mac_key(seed)


def sign(manifest: Manifest, key: bytes) -> Manifest:
    unsigned = msgspec.structs.replace(manifest, mac="")
    mac = hmac.new(key, msgspec.json.encode(unsigned), hashlib.sha256).hexdigest()
    return msgspec.structs.replace(manifest, mac=mac)


def verify(manifest: Manifest, key: bytes) -> None:
    """`Unusable` unless `manifest` was signed with `key`."""
    if not manifest.mac:
        raise Unusable("forged or foreign: the manifest carries no MAC")
    want = sign(manifest, key).mac
    if not hmac.compare_digest(want, manifest.mac):
        raise Unusable(
            "forged or foreign: its MAC does not match this service's key (not written by"
            " this service's credential)"
        )


def snapshot_key(name: str, instance: str) -> str:
    """The service's key in the bucket: its name (`name.instance` for a node agent, one
    snapshot per agent)."""
    return name if name != "node-agent" else f"{name}.{instance}"


# ---------------------------------------------------------------------- schema and codec


def _fields_of(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return tuple(cls.__struct_fields__)
    slots: list[str] = []
    for klass in getattr(cls, "__mro__", (cls,)):
        slots.extend(getattr(klass, "__slots__", ()))
    return tuple(slots)


_SCHEMA: str | None = None


def schema() -> str:
    """`SCHEMA_VERSION` and a digest of the shape of every class the fold holds."""
    global _SCHEMA
    if _SCHEMA is not None:
        return _SCHEMA
    from gpuledger import events as ev
    from gpuledger.services.domain.fold import config, ledger, timeindex
    from gpuledger.services.node_agent import decider as agent
    from gpuledger.services.placement import fleet, fragmentation, index, memo, mig, model, state

    parts: list[str] = []
    for module in (ev, ledger, config, agent, fleet, index, memo, fragmentation, mig, model, state):
        for name, obj in sorted(vars(module).items()):
            if (
                isinstance(obj, type)
                and obj.__module__.startswith("gpuledger")
                and (
                    dataclasses.is_dataclass(obj)
                    or issubclass(obj, msgspec.Struct)
                    or getattr(obj, "__slots__", None)
                )
            ):
                parts.append(f"{obj.__module__}.{name}:{','.join(_fields_of(obj))}")
    for obj in (fleet.Fleet(), timeindex.TimeIndex(), fragmentation.Fragmentation(())):
        parts.append(f"{type(obj).__name__}:{','.join(sorted(vars(obj)))}")
    h = hashlib.blake2b("\n".join(sorted(set(parts))).encode(), digest_size=8).hexdigest()
    _SCHEMA = f"{SCHEMA_VERSION}-{h}"
    return _SCHEMA


def _fleets(part: Any) -> list[Any]:
    from gpuledger.services.placement import Fleet

    found = []
    for obj in (part, getattr(part, "ledger", None)):
        fleet = getattr(obj, "fleet", None)
        if isinstance(fleet, Fleet):
            found.append(fleet)
    return found


def config_digest(part: Any) -> str:
    for obj in (part, getattr(part, "ledger", None)):
        config = getattr(obj, "config", None)
        if config is not None and hasattr(config, "digest"):
            return str(config.digest)
    return ""


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """No collector passes while millions of objects are encoded or created."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# The graph codec: a fold as one msgpack tree (msgspec), never pickle. A value is a plain
# msgpack scalar, or a list whose first item says what it is. Containers and objects get an
# index in the order they are first met (implicitly: the decoder creates them in the same
# order), and an object met again is `[REF, index]`, so shared objects stay shared and cycles
# through mutable objects restore. Classes are named, from a fixed list of data classes of the
# fold (`_classes`): a name not on it makes the snapshot unusable. Restoring an object creates
# it without calling its class (`object.__new__`) and sets its fields directly (its
# `__dict__`, or the slot descriptors of names its class declares); an event or spec struct is
# msgpack decoded *as its type* (msgspec validates every field). Nothing a stored byte says
# is called, imported or evaluated.
_REF, _LIST, _TUPLE, _DICT, _SET, _FROZENSET, _OBJECT, _STRUCT, _ENUM, _UNSET, _FIELDS = range(11)


@dataclasses.dataclass(frozen=True)
class _Classes:
    by_name: dict[str, type]
    name_of: dict[type, str]
    slots: dict[type, frozenset[str]]
    decoders: dict[type, msgspec.msgpack.Decoder]


_CLASSES: _Classes | None = None


def _classes() -> _Classes:
    """The classes a fold may hold: the data classes, slotted classes, msgspec structs and
    enums of the modules whose state a service folds (the same ones `schema()` covers)."""
    global _CLASSES
    if _CLASSES is None:
        from gpuledger import events as ev
        from gpuledger.events import reasons
        from gpuledger.services.domain.fold import config, ledger, timeindex
        from gpuledger.services.node_agent import decider as agent
        from gpuledger.services.placement import (
            fleet,
            fragmentation,
            index,
            memo,
            mig,
            model,
            scorers,
            state,
        )

        found: dict[str, type] = {}
        for module in (
            ev,
            reasons,
            ledger,
            config,
            timeindex,
            agent,
            fleet,
            index,
            memo,
            fragmentation,
            mig,
            model,
            scorers,
            state,
        ):
            for obj in vars(module).values():
                if (
                    isinstance(obj, type)
                    and obj.__module__.startswith("gpuledger.")
                    and not issubclass(obj, BaseException)
                ):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
        slots: dict[type, frozenset[str]] = {}
        decoders: dict[type, msgspec.msgpack.Decoder] = {}
        for cls in found.values():
            names: set[str] = set()
            for klass in cls.__mro__:
                declared = vars(klass).get("__slots__", ())
                names.update((declared,) if isinstance(declared, str) else declared)
            slots[cls] = frozenset(names)
            if issubclass(cls, msgspec.Struct):
                decoders[cls] = msgspec.msgpack.Decoder(cls)
        _CLASSES = _Classes(found, {c: n for n, c in found.items()}, slots, decoders)
    return _CLASSES


_SCALARS = (str, int, float, bool, bytes, type(None))


def _encode_graph(root: Any) -> bytes:
    """The msgpack tree of `root` (see the codec's comment above). TypeError for a value of
    a type the codec does not know (a snapshot is then not written: the host logs it)."""
    encoder = _GraphEncoder(_classes())
    tree = encoder.enc(root)
    return msgspec.msgpack.encode((GRAPH_VERSION, encoder.names, tree))


class _GraphEncoder:
    """One encoding: class names in first-use order, and every shared mutable object (list,
    dict, set, struct, object) numbered once, in encoding order, so a second use is a `_REF`."""

    def __init__(self, classes: _Classes) -> None:
        self.classes = classes
        self.names: list[str] = []
        self.name_index: dict[str, int] = {}
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # what memo's ids refer to stays alive while encoding
        self.struct_encoder = msgspec.msgpack.Encoder()
        self.by_fields: set[type] = set()

    def class_ref(self, cls: type) -> int:
        name = self.classes.name_of.get(cls)
        if name is None:
            raise TypeError(f"a {cls.__module__}.{cls.__qualname__} is not a snapshot class")
        i = self.name_index.get(name)
        if i is None:
            i = self.name_index[name] = len(self.names)
            self.names.append(name)
        return i

    def enc(self, obj: Any) -> Any:
        t = type(obj)
        if t in _SCALARS:
            return obj
        if isinstance(obj, enum.Enum):
            return [_ENUM, self.class_ref(t), obj.value]
        if obj is msgspec.UNSET:
            return [_UNSET]
        enc = self.enc
        if t is tuple:
            return [_TUPLE, *map(enc, obj)]
        if t is frozenset:
            return [_FROZENSET, *map(enc, obj)]
        memo = self.memo
        seen = memo.get(id(obj))
        if seen is not None:
            return [_REF, seen]
        memo[id(obj)] = len(memo)
        self.keep.append(obj)
        if t is list:
            return [_LIST, *map(enc, obj)]
        if t is dict:
            out = [_DICT]
            for k, v in obj.items():
                out.append(enc(k))
                out.append(enc(v))
            return out
        if t is set:
            return [_SET, *map(enc, obj)]
        if isinstance(obj, msgspec.Struct):
            return self.enc_struct(obj, t)
        return self.enc_object(obj, t)

    def enc_struct(self, obj: Any, t: type) -> list[Any]:
        """msgspec's own encoding when the struct holds only what msgspec encodes, else field
        by field (a placement index inside)."""
        if t not in self.by_fields:
            try:
                return [_STRUCT, self.class_ref(t), self.struct_encoder.encode(obj)]
            except TypeError:  # it holds a non-struct object (a placement index)
                self.by_fields.add(t)
        memo = self.memo
        del memo[id(obj)]  # numbered after its fields: the decoder makes it after them
        out = [_FIELDS, self.class_ref(t)]
        out.extend(self.enc(getattr(obj, f)) for f in t.__struct_fields__)  # type: ignore[attr-defined]  # a msgspec Struct class (checked by the caller)
        memo[id(obj)] = len(memo)
        return out

    def enc_object(self, obj: Any, t: type) -> list[Any]:
        """A plain object: its slots (sorted), then its `__dict__`, as name/value pairs."""
        out = [_OBJECT, self.class_ref(t)]
        for slot in sorted(self.classes.slots[t]):
            if slot != "__dict__" and slot != "__weakref__" and hasattr(obj, slot):
                out.append(slot)
                out.append(self.enc(getattr(obj, slot)))
        for k, v in getattr(obj, "__dict__", {}).items():
            out.append(k)
            out.append(self.enc(v))
        return out


def _decode_graph(raw: bytes | memoryview) -> Any:
    """The fold a `_encode_graph` tree holds; ValueError for anything that is not one."""
    classes = _classes()
    version, names, tree = msgspec.msgpack.decode(raw, type=tuple[int, list[str], Any])
    if version != GRAPH_VERSION:
        raise ValueError(f"graph version {version}, this build reads {GRAPH_VERSION}")
    known = []
    for name in names:
        cls = classes.by_name.get(name)
        if cls is None:
            raise ValueError(f"names {name[:100]!r}, not a snapshot class")
        known.append(cls)
    made: list[Any] = []
    rare = _RareNodes(classes, known, made)

    def dec(node: Any) -> Any:
        """The common nodes inline (the hot path of a restart); structs, objects, enums and
        UNSET through `rare`."""
        if type(node) is not list:
            return node
        tag = node[0]
        if tag == _REF:
            return made[node[1]]
        if tag == _TUPLE:
            return tuple(map(dec, node[1:]))
        if tag == _FROZENSET:
            return frozenset(map(dec, node[1:]))
        if tag == _LIST:
            out: Any = []
            made.append(out)
            out.extend(map(dec, node[1:]))
            return out
        if tag == _DICT:
            out = {}
            made.append(out)
            items = node[1:]
            for i in range(0, len(items), 2):
                key = dec(items[i])  # first: `d[k] = v` would decode the value first, and
                out[key] = dec(items[i + 1])  # objects are numbered in encoding order
            return out
        if tag == _SET:
            out = set()
            made.append(out)
            out.update(map(dec, node[1:]))
            return out
        return rare.dec(tag, node, dec)

    return dec(tree)


class _RareNodes:
    """The decoder's nodes other than containers and references: an enum member, UNSET, a
    struct (msgspec's encoding or field by field) and a plain object. `made` holds every
    numbered object in the order the encoder numbered them."""

    def __init__(self, classes: _Classes, known: list[type], made: list[Any]) -> None:
        self.classes = classes
        self.known = known
        self.made = made

    def dec(self, tag: Any, node: list[Any], dec: Callable[[Any], Any]) -> Any:
        if tag == _ENUM:
            return self.known[node[1]](node[2])
        if tag == _UNSET:
            return msgspec.UNSET
        if tag == _STRUCT:
            return self.dec_struct(node)
        if tag == _FIELDS:
            return self.dec_fields(node, dec)
        if tag == _OBJECT:
            return self.dec_object(node, dec)
        raise ValueError(f"unknown tag {tag!r}")

    def dec_struct(self, node: list[Any]) -> Any:
        cls = self.known[node[1]]
        decoder = self.classes.decoders.get(cls)
        if decoder is None:
            raise ValueError(f"{cls.__qualname__} is not a struct")
        out = decoder.decode(node[2])
        self.made.append(out)
        return out

    def dec_fields(self, node: list[Any], dec: Callable[[Any], Any]) -> Any:
        cls = self.known[node[1]]
        if cls not in self.classes.decoders:
            raise ValueError(f"{cls.__qualname__} is not a struct")
        names = cls.__struct_fields__  # type: ignore[attr-defined]  # a msgspec Struct: checked just above
        if len(node) - 2 != len(names):
            raise ValueError(f"{cls.__qualname__} has {len(names)} fields")
        out = cls(**dict(zip(names, map(dec, node[2:]), strict=True)))
        self.made.append(out)
        return out

    def dec_object(self, node: list[Any], dec: Callable[[Any], Any]) -> Any:
        cls = self.known[node[1]]
        if issubclass(cls, msgspec.Struct) or cls in self.classes.decoders:
            raise ValueError(f"{cls.__qualname__} is a struct")
        out = object.__new__(cls)
        self.made.append(out)
        slots, attrs = self.classes.slots[cls], getattr(out, "__dict__", None)
        fields = node[2:]
        for i in range(0, len(fields), 2):
            name, value = fields[i], dec(fields[i + 1])
            if type(name) is not str:
                raise ValueError("a field name that is not a string")
            if name in slots and name not in ("__dict__", "__weakref__"):
                getattr(cls, name).__set__(out, value)  # the slot's member descriptor
            elif attrs is not None:
                attrs[name] = value
            else:
                raise ValueError(f"{cls.__qualname__} has no field {name[:100]!r}")
        return out


GRAPH_VERSION = 1
"""The graph codec's own version (inside the payload); `FORMAT` names the whole encoding."""


def dumps(part: Any) -> bytes:
    """Encode a fold (synchronously: the caller must not let it change meanwhile), the
    fleets' score caches set aside (`_encode_graph`)."""
    fleets = _fleets(part)
    kept = [f._caches for f in fleets]
    for f in fleets:
        f._caches = {}
    try:
        with _quiet_gc():
            return _encode_graph(part)
    finally:
        for f, caches in zip(fleets, kept, strict=True):
            f._caches = caches


def _decode(raw: bytes) -> Any:
    fold = _decode_graph(raw)
    for f in _fleets(fold):
        f._caches = {}
    return fold


def compress(raw: bytes) -> tuple[bytes, str]:
    """(stored payload, its digest); zlib releases the GIL, so this may run in a thread."""
    data = zlib.compress(raw, 1)
    return data, hashlib.blake2b(data, digest_size=32).hexdigest()


def encode(part: Any) -> tuple[int, bytes, str]:
    """(encoded size, stored payload, its digest) of a fold, all in this thread."""
    raw = dumps(part)
    data, digest = compress(raw)
    return len(raw), data, digest


class Encoding:
    """A fold being encoded by a forked child (as Redis's BGSAVE): the child holds a
    copy-on-write image of the process at the fork, so the event loop pauses only for
    `fork()` while the fold goes on changing; `result()` (blocking: run it in a thread)
    reads what the child wrote to a pipe and reaps it. Where `fork` is missing, the fold is
    encoded at once, in the caller's thread."""

    def __init__(self, part: Any) -> None:
        self.pid = 0
        self._done: tuple[int, bytes, str] | None = None
        if not hasattr(os, "fork"):
            self._done = encode(part)
            return
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: encode, write, leave without running any cleanup
            status = 1
            try:
                os.close(read)
                raw_bytes, data, digest = encode(part)
                head = struct.pack(">QQ", raw_bytes, len(data)) + digest.encode()
                view = memoryview(head + data)
                while view:
                    view = view[os.write(write, view) :]
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self.pid, self._read = pid, read

    def result(self) -> tuple[int, bytes, str]:
        """(encoded size, payload, digest); RuntimeError if the child failed."""
        if self._done is not None:
            return self._done
        chunks = []
        try:
            while block := os.read(self._read, 1 << 20):
                chunks.append(block)
        finally:
            os.close(self._read)
            _, status = os.waitpid(self.pid, 0)
            self.pid = 0
        out = b"".join(chunks)
        if status != 0 or len(out) < 80:
            raise RuntimeError(f"the encoding child failed (wait status {status})")
        raw_bytes, size = struct.unpack(">QQ", out[:16])
        digest, data = out[16:80].decode(), out[80:]
        if len(data) != size:
            raise RuntimeError(f"the encoding child wrote {len(data)} of {size} bytes")
        return raw_bytes, data, digest

    def kill(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


FREEZE_ABOVE_BYTES = 4 << 20
"""A restored fold at least this large (encoded) is moved, with everything else alive then,
to the collector's permanent generation (`gc.freeze()`): it is long-lived, and otherwise
the first collections after the restore walk all of it (1 M events: ~2 M objects, 0.7 s a
pass on a loaded 2-core machine, twice: young, then older generations) while the tail is
being folded. Frozen objects are still freed by reference counting; only a cycle among them
that later becomes garbage is not collected. It also keeps the forked encoder's pages shared."""


def loads(data: bytes, manifest: Manifest) -> Any:
    """The fold a stored payload holds; `Unusable` for anything wrong with it."""
    if len(data) != manifest.bytes:
        raise Unusable(f"truncated: {len(data)} of {manifest.bytes} bytes")
    if hashlib.blake2b(data, digest_size=32).hexdigest() != manifest.digest:
        raise Unusable("digest mismatch")
    try:
        raw = zlib.decompress(data)
        with _quiet_gc():
            fold = _decode(raw)
            if len(raw) >= FREEZE_ABOVE_BYTES:
                gc.freeze()
            return fold
    except Exception as err:  # noqa: BLE001 - any failure means: refold
        raise Unusable(f"does not decode: {type(err).__name__}: {str(err)[:200]}") from None


def check(
    manifest: Manifest, *, name: str, instance: str, first_seq: int, last_seq: int, created: str
) -> None:
    """Raise `Unusable` unless the manifest fits this service and this stream."""
    if manifest.format != FORMAT:
        raise Unusable(f"format {manifest.format!r}, this build reads {FORMAT!r}")
    if manifest.schema != schema():
        raise Unusable(f"state schema {manifest.schema}, this build's is {schema()}")
    if (manifest.service, manifest.instance) != (name, instance):
        raise Unusable(f"written by {manifest.service}/{manifest.instance}")
    if manifest.seq > last_seq:
        raise Unusable(f"at seq {manifest.seq}, beyond the stream's last seq {last_seq}")
    if manifest.stream_first_seq != first_seq:
        raise Unusable(f"the stream's first seq was {manifest.stream_first_seq}, now {first_seq}")
    if manifest.stream_created != created:
        raise Unusable(f"the stream was created at {manifest.stream_created}, now {created}")


def check_state(manifest: Manifest, part: Any) -> None:
    last = getattr(part, "last_seq", getattr(getattr(part, "ledger", None), "last_seq", None))
    if not isinstance(last, int) or last > manifest.seq:
        raise Unusable(f"its state is at seq {last}, its manifest says {manifest.seq}")
    if config_digest(part) != manifest.config_digest:
        raise Unusable("its state's configuration digest differs from its manifest's")


# ---------------------------------------------------------------------- the bucket


async def snapshot_bucket(bus: Any, *, create: bool = False, replicas: int = 1) -> KeyValue:
    """Open the bucket (`create`: the operator creates it if missing: file storage, one value
    per key, direct gets so a service can be allowed to read only its own keys)."""
    try:
        return await bus.js.key_value(BUCKET)
    except nats.js.errors.BucketNotFoundError:
        if not create:
            raise
        return await bus.js.create_key_value(
            api.KeyValueConfig(
                bucket=BUCKET,
                history=1,
                storage=api.StorageType.FILE,
                replicas=replicas,
                direct=True,
                description="gpuledger service snapshots (key = service name)",
            )
        )


class SnapshotStore:
    """One service's snapshot in the bucket (`KEY` = manifest, `KEY.<slot>.<i>` = chunks)."""

    def __init__(self, kv: KeyValue, key: str, chunk_bytes: int, mac_key: bytes) -> None:
        self.kv = kv
        self.key = key
        self.chunk_bytes = max(1024, chunk_bytes)
        self.mac_key = mac_key

    async def manifest(self, *, verified: bool = True) -> Manifest | None:
        """The stored manifest, None if there is none; `Unusable` if it does not decode or
        (unless `verified=False`) was not signed with this store's key."""
        try:
            entry = await self.kv.get(self.key)
        except nats.js.errors.KeyNotFoundError:
            return None
        try:
            manifest = msgspec.json.decode(entry.value or b"", type=Manifest)
        except msgspec.DecodeError as err:
            raise Unusable(f"manifest does not decode: {str(err)[:200]}") from None
        if verified:
            verify(manifest, self.mac_key)
        return manifest

    async def payload(self, manifest: Manifest) -> bytes:
        async def chunk(i: int) -> bytes:
            try:
                entry = await self.kv.get(f"{self.key}.{manifest.slot}.{i}")
            except nats.js.errors.KeyNotFoundError:
                raise Unusable(f"truncated: chunk {i} of {manifest.chunks} is missing") from None
            return entry.value or b""

        if manifest.slot not in ("a", "b") or not 0 <= manifest.chunks <= 1 << 16:
            raise Unusable(f"bad slot or chunk count ({manifest.slot!r}, {manifest.chunks})")
        parts = await asyncio.gather(*(chunk(i) for i in range(manifest.chunks)))
        return b"".join(parts)

    async def save(
        self, fields: dict[str, Any], data: bytes, digest: str, previous: Manifest | None
    ) -> Manifest:
        """Write the chunks to the slot the current manifest does not name, then the manifest;
        then delete chunks of that slot beyond the new count (left from an earlier one)."""
        slot = "b" if previous is not None and previous.slot == "a" else "a"
        size = self.chunk_bytes
        chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        for start in range(0, len(chunks), 8):  # a few acks in flight at a time
            await asyncio.gather(
                *(
                    self.kv.put(f"{self.key}.{slot}.{i}", chunks[i])
                    for i in range(start, min(len(chunks), start + 8))
                )
            )
        manifest = Manifest(
            format=FORMAT,
            schema=schema(),
            slot=slot,
            chunks=len(chunks),
            chunk_bytes=size,
            bytes=len(data),
            digest=digest,
            saved_ms=time.time_ns() // 1_000_000,
            **fields,
        )
        manifest = sign(manifest, self.mac_key)
        await self.kv.put(self.key, msgspec.json.encode(manifest))
        i = len(chunks)
        while True:  # chunks of this slot left by an earlier, longer snapshot
            try:
                await self.kv.get(f"{self.key}.{slot}.{i}")
            except nats.js.errors.KeyNotFoundError:
                break
            await self.kv.delete(f"{self.key}.{slot}.{i}")
            i += 1
        return manifest


BUS_ERRORS = (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError)
