"""Limits every payload is decoded under, checked before and after msgspec sees it.

One bad message must never stop a consumer, so the codec refuses, with a reason, what no
legitimate event looks like:

- `MAX_PAYLOAD_BYTES` (1 MiB, NATS's default `max_payload`): nothing larger is an event;
- `MAX_DEPTH` (64) levels of JSON nesting: our deepest event is about 6 levels deep, and
  msgspec recurses per level (50,000 levels raise RecursionError inside the decoder);
- integers within +-`MAX_INT` (2**53 - 1, the JSON-safe integer range): every quantity,
  time and sequence fits with room for sums, and a projection's BIGINT columns never overflow;
- floats finite (msgspec refuses a literal like `1e999`; the walk re-checks values).

The checks are cheap on the hot path (about 1 us for a typical 500-byte event): nesting is
bounded by the count of `[` and `{` (scanned exactly only above MAX_DEPTH of them), and only
payloads with a run of 16+ digits (not a float's fraction) are decoded a second time and
walked for their numbers.
"""

from __future__ import annotations

import re
from typing import Any

MAX_PAYLOAD_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_INT = (1 << 53) - 1

# A number that may exceed the limits has a run of 16+ digits (2**53 has 16) that does not
# follow a decimal point: a float's fraction digits (0.8444218515250481, what a measured
# utilisation looks like) can never overflow. The cheap checks read a payload's shape (one
# `bytes.translate`): digits become "0", "." stays, "[" and "{" become "[", everything else a
# space. One count of "[" bounds the nesting; a run of 16 "0" is searched, and only if there is
# one, searched again with the first 16 digits after every "." dropped (a fraction of up to 31
# digits no longer looks long; a run not after a "." is untouched). Several times faster than a
# regex. Strings can match too; a match only triggers the exact walk. Float literals beyond the
# double range are refused by msgspec itself ("Number out of range").
_SHAPE = bytes(
    ord("0")
    if chr(c).isdigit() and c < 128
    else c
    if c == ord(".")
    else ord("[")
    if c in b"[{"
    else ord(" ")
    for c in range(256)
)
_LONG_RUN = b"0" * 16
_FRACTION = b"." + _LONG_RUN
_INF = float("inf")
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class LimitExceeded(ValueError):
    """A payload outside the decoding limits; the message says which limit and where."""


def _depth(data: bytes) -> int:
    """Maximum nesting depth of `[`/`{` outside JSON strings."""
    depth = deepest = 0
    for m in _TOKENS.finditer(data):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif tok in (b"]", b"}"):
            depth -= 1
    return deepest


def check_raw(data: bytes) -> bytes:
    """Size and nesting limits on raw bytes (before any JSON parsing); returns the payload's
    shape (`_SHAPE`, for `may_hold_big_numbers`)."""
    if len(data) > MAX_PAYLOAD_BYTES:
        raise LimitExceeded(
            f"payload of {len(data)} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit"
        )
    shape = data.translate(_SHAPE)
    if shape.count(b"[") > MAX_DEPTH and _depth(data) > MAX_DEPTH:
        raise LimitExceeded(f"JSON nested deeper than {MAX_DEPTH} levels")
    return shape


def surely_within(data: bytes) -> bool:
    """True when any event inside `data` (a payload, or a log line wrapping one) passes every
    limit: small enough, fewer brackets than MAX_DEPTH, no number that may be out of range. A
    False only means the exact checks must decide."""
    if len(data) > MAX_PAYLOAD_BYTES:
        return False
    shape = data.translate(_SHAPE)
    return shape.count(b"[") <= MAX_DEPTH and not may_hold_big_numbers(data, shape)


def may_hold_big_numbers(data: bytes, shape: bytes | None = None) -> bool:
    """False when no number in `data` (whose shape, `_SHAPE`, is `shape` when known) can be
    outside the limits (cheap, conservative)."""
    if shape is None:
        shape = data.translate(_SHAPE)
    return _LONG_RUN in shape and _LONG_RUN in shape.replace(_FRACTION, b".")


def check_numbers(obj: Any, path: str = "$") -> None:
    """Every integer within +-MAX_INT and every float finite, in a decoded JSON value."""
    stack = [(obj, path)]
    while stack:
        value, where = stack.pop()
        t = type(value)
        if t is int:
            if not -MAX_INT <= value <= MAX_INT:
                shown = str(value) if value.bit_length() <= 80 else f"of {value.bit_length()} bits"
                raise LimitExceeded(f"integer {shown} at `{where}` is outside +-{MAX_INT}")
        elif t is float:
            if not -_INF < value < _INF:  # false for infinities and NaN
                raise LimitExceeded(f"number {value} at `{where}` is not finite")
        elif t is dict:
            stack.extend((v, f"{where}.{k}") for k, v in value.items())
        elif t is list:
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
