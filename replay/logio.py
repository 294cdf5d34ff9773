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
from gpuledger.events.codec import AnyEvent
from gpuledger.events.limits import surely_within


class _Line(msgspec.Struct):
    seq: int
    subject: str
    event: msgspec.Raw


class _EventLine(msgspec.Struct):
    seq: int
    subject: str
    event: AnyEvent  # type: ignore[valid-type]  # a tagged union built at import


class LogFormatError(ValueError):
    """A log file line that is not a valid log entry; names the file and line."""


_line = msgspec.json.Decoder(_Line)
_event_line = msgspec.json.Decoder(_EventLine)
_encoder = msgspec.json.Encoder()


def read_log(path: str | Path) -> Iterator[tuple[int, str, ev.Event]]:
    """Yield `(seq, subject, event)` for every line.

    A line that is surely within the decoding limits (`events.limits.surely_within`) and holds
    a current event is decoded in one pass, entry and event together: the event is what
    `events.decode` returns for it, with the same decoder. Anything else (an old version to
    upcast, a line near a limit, an invalid line) takes the exact path through `events.decode`."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if surely_within(raw):
                try:
                    line = _event_line.decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                    pass  # decided below, exactly
                else:
                    yield line.seq, line.subject, line.event
                    continue
            if not raw.strip():
                continue
            try:
                line = _line.decode(raw)
                yield line.seq, line.subject, ev.decode(line.event)
            except RecursionError as exc:  # the line wrapper nests too deeply for msgspec
                raise LogFormatError(f"{path}:{lineno}: JSON nested too deeply") from exc
            except (msgspec.DecodeError, msgspec.ValidationError, ev.UndecodableEvent) as exc:
                raise LogFormatError(f"{path}:{lineno}: {exc}") from exc


def encode_lines(entries: Iterable[tuple[int, str, ev.Event]]) -> Iterator[bytes]:
    """The log's bytes for `entries`, in chunks of about 1 MiB (what `write_log` writes: a
    sweep hashes them, so a variant's sha256 is that of its written log)."""
    buf = bytearray()
    for seq, subject, event in entries:
        buf += b'{"seq":%d,"subject":%s,"event":%s}\n' % (
            seq,
            _encoder.encode(subject),
            ev.encode(event),
        )
        if len(buf) > 1 << 20:
            yield bytes(buf)
            buf.clear()
    if buf:
        yield bytes(buf)


def write_log(path: str | Path, entries: Iterable[tuple[int, str, ev.Event]]) -> int:
    """Write `(seq, subject, event)` entries; returns the number written."""
    n = 0

    def counted():
        nonlocal n
        for entry in entries:
            n += 1
            yield entry

    with open(path, "wb") as f:
        for chunk in encode_lines(counted()):
            f.write(chunk)
    return n
