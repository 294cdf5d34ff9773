"""Encoding and decoding of events (JSON on the wire), with upcasting of old versions.

`decode` is the one door every consumer uses (hosts, projector, exports, log files): it
applies the limits of `events.limits` (size, nesting, number ranges) and turns every failure,
whatever raised it, into `UndecodableEvent` with a reason, so one bad message is dead-lettered
and never stops its reader.
"""

from __future__ import annotations

from typing import Any, Union, cast

import msgspec

from gpuledger.events.catalog import ALL_EVENTS
from gpuledger.events.envelope import Event
from gpuledger.events.limits import LimitExceeded, check_numbers, check_raw, may_hold_big_numbers
from gpuledger.events.upcasters import UPCASTERS

AnyEvent = Union[tuple(ALL_EVENTS)]  # type: ignore[valid-type]  # noqa: UP007

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)
_MAX_UPCASTS = 16


class UndecodableEvent(ValueError):
    """The payload is not a valid event of any known (or upcastable) version, or it exceeds
    the decoding limits (`events.limits`); the message says why."""


def encode(event: msgspec.Struct) -> bytes:
    """Canonical JSON bytes of an event or one of its parts (field order as declared)."""
    return _encoder.encode(event)


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    try:
        return bytes(memoryview(data))  # bytearray, memoryview, msgspec.Raw
    except TypeError as exc:
        raise UndecodableEvent(f"not bytes or text: {type(data).__name__}") from exc


def decode(data: bytes | str) -> Event:
    """Decode one event under the limits; old versions are upcast to current types.

    Raises UndecodableEvent with the reason for anything else (never another exception).
    """
    raw = _as_bytes(data)
    try:
        shape = check_raw(raw)
        try:
            event: Event = _decoder.decode(raw)
        except msgspec.ValidationError as first:
            obj = msgspec.json.decode(raw)
            if not isinstance(obj, dict) or obj.get("type") not in UPCASTERS:
                raise UndecodableEvent(str(first)) from first
            return from_builtins(obj)
        if may_hold_big_numbers(raw, shape):
            check_numbers(msgspec.json.decode(raw))
        return event
    except UndecodableEvent:
        raise
    except msgspec.DecodeError as exc:
        raise UndecodableEvent(f"not JSON: {exc}") from exc
    except LimitExceeded as exc:
        raise UndecodableEvent(str(exc)) from exc
    except RecursionError as exc:
        raise UndecodableEvent("JSON nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - any failure of one payload is that payload's
        raise UndecodableEvent(f"{type(exc).__name__}: {exc}") from exc


def from_builtins(obj: dict[str, Any]) -> Event:
    """Convert a JSON-like object (possibly an old version) into a current event."""
    try:
        check_numbers(obj)
        for _ in range(_MAX_UPCASTS):
            upcast = UPCASTERS.get(obj.get("type", ""))
            if upcast is None:
                break
            obj = upcast(obj)
        return cast(Event, msgspec.convert(obj, AnyEvent))
    except msgspec.ValidationError as exc:
        raise UndecodableEvent(str(exc)) from exc
    except LimitExceeded as exc:
        raise UndecodableEvent(str(exc)) from exc
    except RecursionError as exc:
        raise UndecodableEvent("nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - an upcaster meeting garbage
        raise UndecodableEvent(f"{type(exc).__name__}: {exc}") from exc


def to_builtins(event: msgspec.Struct) -> dict[str, Any]:
    """The event (or one of its parts) as a JSON-ready dict (an event with its `type` tag)."""
    return cast(dict[str, Any], msgspec.to_builtins(event))
