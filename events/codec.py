"""Encoding and decoding of events (JSON on the wire), with upcasting of old versions."""

from __future__ import annotations

from typing import Any, Union

import msgspec

from events.catalog import ALL_EVENTS
from events.envelope import Event
from events.upcasters import UPCASTERS

AnyEvent = Union[tuple(ALL_EVENTS)]  # type: ignore[valid-type]  # noqa: UP007

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)
_MAX_UPCASTS = 16


class UndecodableEvent(ValueError):
    """The payload is not a valid event of any known (or upcastable) version."""


def encode(event: Event) -> bytes:
    """Canonical JSON bytes of an event (field order as declared)."""
    return _encoder.encode(event)


def decode(data: bytes | str) -> Event:
    """Decode one event; old versions are upcast to current types.

    Raises UndecodableEvent with the reason for anything else.
    """
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as first:
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise UndecodableEvent(f"not JSON: {exc}") from exc
        if not isinstance(obj, dict) or obj.get("type") not in UPCASTERS:
            raise UndecodableEvent(str(first)) from first
        return from_builtins(obj)
    except msgspec.DecodeError as exc:
        raise UndecodableEvent(f"not JSON: {exc}") from exc


def from_builtins(obj: dict[str, Any]) -> Event:
    """Convert a JSON-like object (possibly an old version) into a current event."""
    for _ in range(_MAX_UPCASTS):
        upcast = UPCASTERS.get(obj.get("type", ""))
        if upcast is None:
            break
        obj = upcast(obj)
    try:
        return msgspec.convert(obj, AnyEvent)
    except msgspec.ValidationError as exc:
        raise UndecodableEvent(str(exc)) from exc


def to_builtins(event: Event) -> dict[str, Any]:
    """The event as a JSON-ready dict (with its `type` tag)."""
    return msgspec.to_builtins(event)
