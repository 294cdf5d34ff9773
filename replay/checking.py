"""Checking mode: every `decide` runs on a read-only view of the folded state and is re-run
without caches (`gpuledger simulate --check`, `gpuledger verify --check`).

`checked_decide` hands the decide `replay.readonly.read_only(ledger)`, so a write
raises at once, naming the path (only the transparent memos of docs/deciders.md are
exempt); refuses events that hold a view; fingerprints the state before and after (a second
line of defence for writes the view cannot see); then re-runs the decide, also on a view,
on a copy of the service with empty caches and the fleet's score caches set aside, and
raises `DecideDrift` at the first difference.

`digest(ledger)` is a SHA-256 over a canonical encoding of the folded state (every field of
the `Ledger`; the fleet by its node records and allocations; memo tables of pure functions,
such as the fleet's score caches, left out); `fingerprints` is its fast form for comparing
one ledger object with itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from typing import Any

import msgspec

from gpuledger.events import Event
from gpuledger.replay.readonly import StateWriteError, forget, read_only
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.placement import Fleet


class DecideDrift(Exception):
    """A decide wrote to the folded state, or its cached and uncached runs differ."""


_FROZEN: dict[int, tuple[Any, Any]] = {}
"""id -> (frozen struct, its builtins): events and specs recur in every digest (the struct is
kept referenced, so its id is not reused)."""
_FIELDS: dict[type, tuple[str, ...]] = {}


def _struct(x: msgspec.Struct) -> Any:
    if not type(x).__struct_config__.frozen:
        return msgspec.to_builtins(x)
    hit = _FROZEN.get(id(x))
    if hit is None or hit[0] is not x:
        if len(_FROZEN) > 200_000:
            _FROZEN.clear()
        hit = _FROZEN[id(x)] = (x, msgspec.to_builtins(x))
    return hit[1]


def _canon(x: Any) -> Any:
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, msgspec.Struct):
        return _struct(x)
    if isinstance(x, Fleet):
        return _fleet(x)
    if dataclasses.is_dataclass(x):
        names = _FIELDS.get(type(x))
        if names is None:
            names = _FIELDS[type(x)] = tuple(f.name for f in dataclasses.fields(x))
        return [_canon(getattr(x, n)) for n in names]
    if isinstance(x, dict):
        return sorted(([_canon(k), _canon(v)] for k, v in x.items()), key=repr)
    if isinstance(x, (set, frozenset)):
        return sorted((_canon(v) for v in x), key=repr)
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    if hasattr(x, "__dict__"):
        return {k: _canon(v) for k, v in sorted(vars(x).items())}
    return repr(x)


def _fleet(fleet: Fleet) -> Any:
    """The fleet's folded facts: per node its free capacity, schedulability and version (a
    version moves on every write, so a place-and-undo shows), and the allocations."""
    nodes = []
    for name in fleet.node_names():
        s = fleet.node_state(name)
        nodes.append(
            [
                name,
                s.version,
                s.schedulable,
                s.free_cpu,
                s.free_mem,
                list(s.gpu_free),
                list(s.mps_tenant),
                list(s.mps_users),
                [None if m is None else msgspec.to_builtins(m) for m in s.mig],
            ]
        )
    allocs = [
        [a, msgspec.to_builtins(fleet.allocation(a).placement)] for a in fleet.allocation_ids()
    ]
    return {"nodes": nodes, "allocations": allocs, "tenants": _canon(fleet.tenant_gpu_milli())}


def field_digests(ledger: Ledger) -> dict[str, str]:
    """One SHA-256 per top-level field of the ledger (to name what a decide changed)."""
    out = {}
    for f in dataclasses.fields(ledger):
        data = msgspec.json.encode(_canon(getattr(ledger, f.name)))
        out[f.name] = hashlib.sha256(data).hexdigest()
    return out


def fingerprints(ledger: Ledger) -> dict[str, bytes]:
    """Per Ledger field, a fast hash of this object's exact contents (pickle: insertion orders
    included, so only comparable for one ledger object before and after a decide; `digest`
    is the canonical form that compares two ledgers)."""
    out = {}
    for f in dataclasses.fields(ledger):
        value = getattr(ledger, f.name)
        data = pickle.dumps(_fleet(value) if isinstance(value, Fleet) else value, protocol=5)
        out[f.name] = hashlib.blake2b(data, digest_size=16).digest()
    return out


_LAST: dict[int, tuple[int, Ledger, dict[str, bytes]]] = {}
"""id(ledger) -> (last_seq, ledger, fingerprints) after the last checked decide: the next
decide at the same sequence starts from it (a checked decide changed nothing)."""


def digest(ledger: Ledger) -> str:
    """A deterministic digest of the whole folded state."""
    h = hashlib.sha256()
    for name, d in field_digests(ledger).items():
        h.update(f"{name}={d};".encode())
    return h.hexdigest()


def _show(events: list[Event]) -> str:
    if not events:
        return "nothing"
    items = [
        f"{type(e).__name__}({e.correlation_id}: {getattr(e, 'reason', '') or e.event_id})"
        for e in events[:6]
    ]
    more = f" and {len(events) - 6} more" if len(events) > 6 else ""
    return "[" + ", ".join(items) + more + "]"


def _first_difference(a: list[Event], b: list[Event]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            fx, fy = msgspec.to_builtins(x), msgspec.to_builtins(y)
            keys = [k for k in fx if fx.get(k) != fy.get(k)][:3]
            detail = ", ".join(f"{k}: {fx.get(k)!r} vs {fy.get(k)!r}" for k in keys)
            return f"event {i + 1} differs ({detail})"
    return f"{len(a)} vs {len(b)} events"


def _decide_read_only(service: Any, ledger: Ledger, now_ms: int, where: str) -> list[Event]:
    """`service.decide` on a read-only view of the ledger (replay/readonly.py): a
    write raises at once, naming the path; an event that carries a piece of the state (a
    view) instead of a copy is refused too."""
    try:
        out = service.decide(read_only(ledger), now_ms)
    except StateWriteError as err:
        raise DecideDrift(f"{where} wrote to the folded state ({err.field}): {err}") from err
    finally:
        forget()
    for event in out:
        try:
            msgspec.to_builtins(event)
        except TypeError as err:
            raise DecideDrift(
                f"{where} returned {type(event).__name__}({event.correlation_id}) holding a piece "
                f"of the folded state instead of a copy: {err}"
            ) from err
    return out


def checked_decide(service: Any, ledger: Ledger, now_ms: int) -> list[Event]:
    """`service.decide(ledger, now_ms)`, checked: raises `DecideDrift` when the decide wrote
    to the folded state or a run without caches returns something else."""
    where = f"{service.producer} decide after seq {ledger.last_seq} at t={now_ms / 1000:g}s"
    last = _LAST.get(id(ledger))
    if last is not None and last[0] == ledger.last_seq and last[1] is ledger:
        before = last[2]
    else:
        before = fingerprints(ledger)
    out = _decide_read_only(service, ledger, now_ms, where)
    after = fingerprints(ledger)
    if before != after:
        changed = ", ".join(k for k in before if before[k] != after[k])
        raise DecideDrift(
            f"{where} wrote to the folded state ({changed}); it returned {_show(out)}"
        )
    fresh = service.uncached() if hasattr(service, "uncached") else service
    with ledger.fleet.caches_set_aside():
        again = _decide_read_only(fresh, ledger, now_ms, where)
    _LAST.clear()
    _LAST[id(ledger)] = (ledger.last_seq, ledger, before)  # the uncached run is the same code
    if out != again:
        raise DecideDrift(
            f"{where}: cached and uncached runs differ, {_first_difference(out, again)}: "
            f"cached {_show(out)}, uncached {_show(again)}"
        )
    return out


def checked_quiet(service: Any, ledger: Ledger, now_ms: int) -> None:
    """A decide the simulator skips (nothing that can change its answer was folded since a
    quiet one, `unaffected_by` / `quiet_until_wakeup`): checked, and it must be quiet too."""
    out = checked_decide(service, ledger, now_ms)
    if out:
        raise DecideDrift(
            f"{service.producer} decide after seq {ledger.last_seq} at t={now_ms / 1000:g}s was "
            f"skipped as quiet (unaffected_by / quiet_until_wakeup) but returns {_show(out)}"
        )
