"""Snapshots of a service's folded state in JetStream, so a restart folds only the log's tail.

A snapshot is the host's folded state at stream sequence `seq` (every message up to `seq`
folded, nothing after), with a `Manifest`: state schema, service, sequence, the stream's first
sequence and creation time, the configuration digest in force, sizes and a BLAKE2b digest.
`Host` saves one from time to time once caught up (`SnapshotPolicy`) and, on start, loads
the newest one that checks out and folds only the messages after `seq`. Anything wrong with
it (another schema, a digest mismatch, a missing or short chunk, a payload that does not
unpickle, a sequence beyond the stream's last one, a stream whose first sequence or creation
time changed, a state that disagrees with its manifest) is `Unusable`: the host logs one
line and refolds the whole log, exactly as before snapshots existed.

Encoding (`FORMAT`): the fold is pickled (protocol 5), except its bulk, the job and
allocation records and every event or spec struct, which pickle only references by index and
msgspec encodes, by class, as msgpack (records as tuples of their fields); then zlib level 1
and BLAKE2b-256 over the compressed bytes. Pickle alone rebuilt those ~40,000 objects per
100,000 events one call at a time, which was most of a restart at 1 M events: there,
decompressing and decoding take 0.78 s instead of 3.3 s (a bare process, 2-core machine at
load 2.4), and encoding a quarter of the time (`_pickle_around`). The rest stays pickle: the
fold is a graph of mutable dataclasses, sets, tuple-keyed dicts and the placement index
(`Fleet`: slotted `NodeState`s, a change log, per-node memos, a `TimeIndex`), none of which
msgspec can decode back without a parallel schema for every class and a hand-written rebuild
of the fleet, which would itself be a second fold to keep in step. Pickle restores the exact
object graph (insertion orders included; an indexed object met twice is restored once and
shared), so a restored state is the folded one, memos and all. Should msgspec refuse
something in a fold, the whole fold is pickled (the payload says so), never a lost snapshot.
What pickle does not protect against, the digest and the schema check do: the schema
fingerprint (`schema()`) covers a version number bumped by hand plus the field names of
every dataclass, slotted class and msgspec struct the fold holds, so a changed class makes
old snapshots incompatible rather than half-loaded. Pickle executes code from what it loads:
the bucket is written only by the services themselves, each confined by NATS permissions to
its own keys (services/runtime/auth.py), and created by the operator; an identity that can
write there could equally publish forged decisions. The fleet's score caches
(`Fleet._caches`, transparent memos of queries, docs/deciders.md) are left out and refill on
the next query; everything the fold owns is kept.

Encoding runs in a forked child (`Encoding`, the way Redis's BGSAVE does it): the child sees
the fold as it was at `fork()` and encodes it while the parent's event loop goes on folding
and deciding; the parent only pauses for the fork. Pickling 1 M events' fold (59 MB) in the
loop paused it 5-6.6 s on a loaded 2-core machine (before msgspec took the records), far too
long for the decision path.

Storage: the KV bucket `gpuledger-snapshots` (created by the operator,
`cli_bus(ensure=True)`). Measured sizes (encoded -> zlib 1, with pickle alone): the replayed
openb fixture slice (5,440 events) 0.52 MB -> 0.09 MB, the synthetic log of 100,000 events
5.3 MB -> 1.1 MB, of 1,000,000 events about ten times that; with the msgpack part, 200,000
events 15.2 MB -> 2.3 MB and 1,000,000 events 75.9 MB -> 11.1 MB (pickle alone 12.6 -> 2.2
and 62.0 -> 10.3): beyond one KV value (the server's max payload, 1 MiB by default). Not the
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
import gc
import hashlib
import io
import os
import pickle
import signal
import struct
import time
import zlib
from collections.abc import Iterator
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
FORMAT = "gls2+msgpack+pickle5+zlib1+blake2b256"


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
    from gpuledger.services.domain import config, ledger, timeindex
    from gpuledger.services.node_agent import decider as agent
    from gpuledger.services.placement import fleet, fragmentation, mig, model, state

    parts: list[str] = []
    for module in (ev, ledger, config, agent, fleet, fragmentation, mig, model, state):
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
    """No collector passes while millions of objects are pickled or created."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclasses.dataclass(frozen=True)
class _Codec:
    kinds: tuple[type, ...]
    """The classes msgspec encodes: the ledger's job and allocation records (as tuples of
    their fields, `records` of them), then every event and spec struct."""
    records: int
    index: dict[type, int]
    fields: tuple[tuple[str, ...], ...]
    getters: tuple[Any, ...]
    decoder: msgspec.msgpack.Decoder


_CODEC: _Codec | None = None


def _codec() -> _Codec:
    global _CODEC
    if _CODEC is None:
        import operator
        import typing

        from gpuledger import events as ev
        from gpuledger.services.domain import ledger

        records = (ledger.JobRecord, ledger.AllocationRecord)
        structs = [
            obj
            for _, obj in sorted(vars(ev).items())
            if isinstance(obj, type)
            and issubclass(obj, msgspec.Struct)
            and obj.__struct_config__.frozen
        ]
        kinds = (*records, *structs)
        assert len(kinds) <= 256, "a kind is one byte"
        for r in records:  # restored as `cls(*fields)`: that must set the fields and only them
            if not all(f.init for f in dataclasses.fields(r)) or hasattr(r, "__post_init__"):
                raise TypeError(f"{r.__name__} cannot be rebuilt from its fields' values")
        fields = tuple(tuple(f.name for f in dataclasses.fields(r)) for r in records)
        types: list[Any] = []
        for cls, names in zip(records, fields, strict=True):
            hints = typing.get_type_hints(cls, vars(ledger))
            types.append(list[tuple[tuple(hints[n] for n in names)]])  # type: ignore[misc]  # a tuple type built at run time
        types.extend(list[k] for k in structs)
        _CODEC = _Codec(
            kinds,
            len(records),
            {k: i for i, k in enumerate(kinds)},
            fields,
            tuple(operator.attrgetter(*names) for names in fields),
            msgspec.msgpack.Decoder(tuple[bytes, tuple[tuple(types)]]),
        )
    return _CODEC


_HEAD = struct.Struct(">4sQQ")
_MAGIC = b"GLS2"


def _pickle_around(part: Any) -> tuple[bytes, bytes]:
    """(pickle of `part` in which every job and allocation record and every event or spec
    struct is only an index, msgpack of those objects by class, records as tuples of their
    fields, rebuilt as `cls(*fields)`): several times as fast as pickle building them one
    at a time (a struct by calling its class, a record from a dict of named fields), both
    ways. An object met twice gets one index, so it is restored once and shared as before
    (what a record holds is encoded inline: frozen structs and containers only that record
    holds). TypeError for a record with attributes beyond its fields (they would be lost)."""
    codec = _codec()
    by_kind: list[list[Any]] = [[] for _ in codec.kinds]
    seen: dict[int, int] = {}
    order = bytearray()
    index = codec.index

    def persistent_id(obj: Any) -> int | None:
        k = index.get(type(obj))
        if k is None:
            return None
        pid = seen.get(id(obj))
        if pid is None:  # the objects are referenced by the fold meanwhile: ids stay unique
            pid = seen[id(obj)] = len(order)
            order.append(k)
            by_kind[k].append(obj)
        return pid

    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.persistent_id = persistent_id  # type: ignore[method-assign]  # the documented pickle hook
    pickler.dump(part)
    for k in range(codec.records):
        width, get = len(codec.fields[k]), codec.getters[k]
        if any(len(vars(r)) != width for r in by_kind[k]):
            raise TypeError(f"a {codec.kinds[k].__name__} with attributes beyond its fields")
        by_kind[k] = [get(r) for r in by_kind[k]]
    return out.getvalue(), msgspec.msgpack.encode((bytes(order), by_kind))


def dumps(part: Any) -> bytes:
    """Encode a fold (synchronously: the caller must not let it change meanwhile), the
    fleets' score caches set aside: `GLS2`, the two lengths, the msgpack of the records and
    structs, the pickle of the rest (`_pickle_around`). Should msgspec refuse something, the
    whole fold is pickled (no msgpack part), so a snapshot is never lost to the codec."""
    fleets = _fleets(part)
    kept = [f._caches for f in fleets]
    for f in fleets:
        f._caches = {}
    try:
        with _quiet_gc():
            try:
                body, structs = _pickle_around(part)
            except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
                body, structs = pickle.dumps(part, protocol=5), b""
            return _HEAD.pack(_MAGIC, len(structs), len(body)) + structs + body
    finally:
        for f, caches in zip(fleets, kept, strict=True):
            f._caches = caches


def _decode(raw: bytes) -> Any:
    magic, structs_len, body_len = _HEAD.unpack_from(raw)
    if magic != _MAGIC or _HEAD.size + structs_len + body_len != len(raw):
        raise ValueError("not a GLS2 payload")
    view = memoryview(raw)
    body = view[_HEAD.size + structs_len :]
    if not structs_len:
        return pickle.loads(body)
    codec = _codec()
    order, decoded = codec.decoder.decode(view[_HEAD.size : _HEAD.size + structs_len])
    by_kind = list(decoded)
    if len(order) != sum(map(len, by_kind)):
        raise ValueError("the struct index does not match the structs")
    for k in range(codec.records):  # every field is an __init__ argument, nothing else runs
        cls = codec.kinds[k]
        by_kind[k] = [cls(*values) for values in by_kind[k]]
    nexts = [iter(objs).__next__ for objs in by_kind]
    objects = [nexts[k]() for k in order]  # back in the order of their indexes
    unpickler = pickle.Unpickler(io.BytesIO(body))
    unpickler.persistent_load = objects.__getitem__  # type: ignore[assignment]  # the documented unpickle hook
    return unpickler.load()


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
        """(pickled size, payload, digest); RuntimeError if the child failed."""
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
        raise Unusable(f"does not unpickle: {type(err).__name__}: {str(err)[:200]}") from None


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

    def __init__(self, kv: KeyValue, key: str, chunk_bytes: int) -> None:
        self.kv = kv
        self.key = key
        self.chunk_bytes = max(1024, chunk_bytes)

    async def manifest(self) -> Manifest | None:
        """The stored manifest, None if there is none; `Unusable` if it does not decode."""
        try:
            entry = await self.kv.get(self.key)
        except nats.js.errors.KeyNotFoundError:
            return None
        try:
            return msgspec.json.decode(entry.value or b"", type=Manifest)
        except msgspec.DecodeError as err:
            raise Unusable(f"manifest does not decode: {str(err)[:200]}") from None

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
