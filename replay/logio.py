"""Event logs as files: JSONL, one stream message per line.

    {"seq": 1, "subject": "gl.admin.TenantConfigured", "event": {"type": "TenantConfigured.v1", ...}}

`seq` is the 1-based stream sequence (gap-free in a complete log). Reading decodes every
event to its current version (upcasting old ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from events import Event, UndecodableEvent, from_builtins, to_builtins


class LogLine(msgspec.Struct, frozen=True):
    seq: int
    subject: str
    event: dict


class LogFormatError(ValueError):
    """A log file line that is not a valid log entry; names the file and line."""


_line_decoder = msgspec.json.Decoder(LogLine)
_encoder = msgspec.json.Encoder()


def write_log(path: str | Path, entries: Iterable[tuple[int, str, Event]]) -> int:
    """Write `(seq, subject, event)` entries; returns the number written."""
    n = 0
    with open(path, "wb") as f:
        for seq, subject, event in entries:
            f.write(_encoder.encode(LogLine(seq, subject, to_builtins(event))))
            f.write(b"\n")
            n += 1
    return n


def read_log(path: str | Path) -> Iterator[tuple[int, str, Event]]:
    """Yield `(seq, subject, event)` for every line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = _line_decoder.decode(raw)
                yield line.seq, line.subject, from_builtins(line.event)
            except (msgspec.DecodeError, msgspec.ValidationError, UndecodableEvent) as exc:
                raise LogFormatError(f"{path}:{lineno}: {exc}") from exc
