"""Event logs as files: JSONL, one stream message per line.

    {"seq": 1, "subject": "gl.admin.TenantConfigured", "event": {"type": "TenantConfigured.v1", ...}}

`seq` is the 1-based stream sequence (gap-free in a complete log). Reading decodes every
event to its current version (upcasting old ones) through the one codec (`events.decode`,
under its limits); the event JSON is handed to it as raw bytes, never through an
intermediate dict. A line that is not a valid entry raises LogFormatError naming the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from gpuledger import events as ev


class _Line(msgspec.Struct):
    seq: int
    subject: str
    event: msgspec.Raw


class LogFormatError(ValueError):
    """A log file line that is not a valid log entry; names the file and line."""


_line = msgspec.json.Decoder(_Line)
_encoder = msgspec.json.Encoder()


def read_log(path: str | Path) -> Iterator[tuple[int, str, ev.Event]]:
    """Yield `(seq, subject, event)` for every line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = _line.decode(raw)
                yield line.seq, line.subject, ev.decode(line.event)
            except RecursionError as exc:  # the line wrapper nests too deeply for msgspec
                raise LogFormatError(f"{path}:{lineno}: JSON nested too deeply") from exc
            except (msgspec.DecodeError, msgspec.ValidationError, ev.UndecodableEvent) as exc:
                raise LogFormatError(f"{path}:{lineno}: {exc}") from exc


def write_log(path: str | Path, entries: Iterable[tuple[int, str, ev.Event]]) -> int:
    """Write `(seq, subject, event)` entries; returns the number written."""
    n = 0
    buf = bytearray()
    with open(path, "wb") as f:
        for seq, subject, event in entries:
            buf += b'{"seq":%d,"subject":%s,"event":%s}\n' % (seq, _encoder.encode(subject), ev.encode(event))
            n += 1
            if len(buf) > 1 << 20:
                f.write(buf)
                buf.clear()
        f.write(buf)
    return n
