"""Items of a `kubectl get ... -o json` List, one at a time, in bounded memory.

`kubectl get pods -A -o json` writes one JSON object `{"apiVersion": "v1", "items": [...],
"kind": "List", "metadata": {...}}`; a big cluster's dump is gigabytes. `iter_items` reads it
in chunks and decodes one item at a time (memory: one item plus one chunk). JSON Lines (one
object per line, e.g. `kubectl get pods -A -o json | jq -c '.items[]'`) is read too, and so is
a single object that is not a List (one item).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuledger.replay.importers.common import TraceImportError

CHUNK = 1 << 20
_dec = json.JSONDecoder()
_WS = " \t\r\n"


class _Reader:
    def __init__(self, f, progress: Callable[[int, int], None] | None, total: int) -> None:
        self.f = f
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.read_chars = 0
        self.progress = progress
        self.total = total
        self.line_base = 1  # line number of buf[0]

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            chunk = self.f.read(CHUNK)
        except UnicodeDecodeError as exc:
            raise TraceImportError(
                f"{self.f.name}:{self.line_base + self.buf.count(chr(10))}+: not UTF-8 text"
                f" (binary data?): {exc.reason}"
            ) from None
        if not chunk:
            self.eof = True
            return False
        if self.pos > 0:
            self.line_base += self.buf.count("\n", 0, self.pos)
            self.buf = self.buf[self.pos :]
            self.pos = 0
        self.buf += chunk
        if self.progress is not None:
            try:
                self.progress(self.f.buffer.tell(), self.total)
            except (OSError, ValueError, AttributeError):
                pass
        return True

    def skip_ws(self) -> None:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf) or not self.more():
                return

    def peek(self) -> str:
        self.skip_ws()
        return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def line(self) -> int:
        return self.line_base + self.buf.count("\n", 0, self.pos)

    def value(self, path: str) -> Any:
        self.skip_ws()
        while True:
            try:
                value, end = _dec.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise TraceImportError(
                    f"{path}:{self.line()}: not JSON this importer reads: nested too deeply"
                ) from None
            except json.JSONDecodeError as exc:
                if self.more():
                    continue
                raise TraceImportError(
                    f"{path}:{self.line_base + self.buf.count(chr(10), 0, exc.pos)}: "
                    f"not JSON: {exc.msg}"
                ) from None
            if end == len(self.buf) and not self.eof and isinstance(value, (int, float)):
                if self.more():  # a number cut at the chunk's end
                    continue
            self.pos = end
            return value

    def expect(self, ch: str, path: str) -> None:
        got = self.peek()
        if got != ch:
            raise TraceImportError(
                f"{path}:{self.line()}: expected {ch!r}, got {got or 'end of file'!r}"
            )
        self.pos += 1


def iter_items(
    path: str | Path, progress: Callable[[int, int], None] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """`(line, item)` for every item of the List in `path` (keys other than `items` skipped)."""
    import os

    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise TraceImportError(f"{path}: {exc.strerror or exc}") from exc
    p = str(path)
    with f:
        r = _Reader(f, progress, os.fstat(f.fileno()).st_size)
        if r.peek() != "{":
            raise TraceImportError(
                f"{p}:1: expected a JSON object (kubectl get ... -o json), "
                f"got {r.peek() or 'an empty file'!r}"
            )
        r.pos += 1
        first, seen_items = True, False
        while r.peek() != "}":
            if not r.peek():
                raise TraceImportError(f"{p}:{r.line()}: unexpected end of file")
            if not first:
                r.expect(",", p)
            first = False
            line = r.line()
            key = r.value(p)
            if not isinstance(key, str):
                raise TraceImportError(f"{p}:{line}: expected a key")
            r.expect(":", p)
            if key != "items":
                r.value(p)
                continue
            seen_items = True
            r.expect("[", p)
            if r.peek() == "]":
                r.pos += 1
                continue
            while True:
                line = r.line()
                item = r.value(p)
                if not isinstance(item, dict):
                    raise TraceImportError(
                        f"{p}:{line}: items: expected objects, got {type(item).__name__}"
                    )
                yield line, item
                if r.peek() == ",":
                    r.pos += 1
                    continue
                r.expect("]", p)
                break
        if not seen_items:
            raise TraceImportError(
                f"{p}:1: no 'items' list: give the output of kubectl get ... -o json"
            )
