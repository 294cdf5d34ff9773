"""A tiny JSONL log reader/writer for the projector.

Interim: the canonical reader/writer will be `replay.logio` (`read_log`, `write_log`); this
module reads and writes the same format itself until that lands (then replace its body with
an import). One line per
stream message: `{"seq": <int>, "subject": "<subject>", "event": {<event JSON>}}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

import events as ev


class _Line(msgspec.Struct):
    seq: int
    subject: str
    event: msgspec.Raw


_line = msgspec.json.Decoder(_Line)
_enc = msgspec.json.Encoder()


class LogFormatError(ValueError):
    """A line of the log is not `{"seq", "subject", "event"}` JSON."""


def read_log(path: str | Path) -> Iterator[tuple[int, str, ev.Event]]:
    """Yield `(seq, subject, event)` for every line of a JSONL log (old versions upcast)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = _line.decode(raw)
                event = ev.decode(line.event)
            except (msgspec.DecodeError, msgspec.ValidationError, ev.UndecodableEvent) as exc:
                raise LogFormatError(f"{path}:{lineno}: {exc}") from exc
            yield line.seq, line.subject, event


def write_log(path: str | Path, messages: Iterable[tuple[int, str, ev.Event]]) -> int:
    """Write `(seq, subject, event)` messages as JSONL; returns the number written."""
    n = 0
    buf = bytearray()
    with open(path, "wb") as f:
        for seq, subject, event in messages:
            buf += b'{"seq":%d,"subject":%s,"event":%s}\n' % (
                seq,
                _enc.encode(subject),
                ev.encode(event),
            )
            n += 1
            if len(buf) > 1 << 20:
                f.write(buf)
                buf.clear()
        f.write(buf)
    return n
