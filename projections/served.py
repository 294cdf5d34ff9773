"""Reading a projection through the projector that writes it (the client side).

A running projector serves reads of its database over HTTP/1.1 on a Unix domain socket (mode
0600: only its user may connect) and names the socket in `<db>.reads.json` next to the file
(projections/serving.py). `connect_served(db)` returns a connection-like object whose
`execute(sql, params)` runs on the projector's own database (a consistent snapshot, never a
file lock), or None when no projector serves that file (no descriptor, or nobody listens on
its socket): the caller then opens the file itself, which nobody writes.

Light on purpose: the standard library and msgspec only (no duckdb, no pyarrow), so that
`gpuledger jobs` starts fast. Values keep their Python types: the server sends each column's
DuckDB type and the client turns the ISO strings of TIMESTAMP, DATE and DECIMAL columns back
into datetime, date and Decimal.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

DESCRIPTOR_SUFFIX = ".reads.json"
PATH = "/v1/query"
CONTENT_TYPE = "application/msgpack"


def descriptor_path(db_path: str | Path) -> Path:
    """Where the projector writing `db_path` names its read socket."""
    p = Path(db_path)
    return p.with_name(p.name + DESCRIPTOR_SUFFIX)


class ServedError(RuntimeError):
    """A read the projector refused or could not answer (`status`: the HTTP status, `kind`: the
    DuckDB exception's class name when the query itself failed)."""

    def __init__(self, message: str, *, status: int = 0, kind: str | None = None) -> None:
        self.status, self.kind = status, kind
        super().__init__(message)


class ServedUnavailable(ServedError):
    """The projector's socket stopped answering (it stopped or restarted)."""


EXIT_TIMED_OUT = 4
"""The command line's exit code for a read stopped at its time limit, refused while the
projector was busy, or left unanswered (CONVENTIONS: 4 timed out waiting)."""


def failure(exc: ServedError) -> tuple[str, int]:
    """What a command prints (one line, without `error: `) and its exit code when a read
    through the projector fails: 4 when it ran out of time, found the projector busy or
    stopped answering (retrying may help), 1 otherwise (the query itself)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ServedUnavailable):
        return f"{text}: retry (`gpuledger status` shows the projector)", EXIT_TIMED_OUT
    if exc.status == 504:
        return f"query stopped: {text}; narrow it (a WHERE, a LIMIT)", EXIT_TIMED_OUT
    if exc.status == 503:
        return f"query not run: {text}; retry", EXIT_TIMED_OUT
    return f"query failed: {text}", 1


_BOTH: dict[type, type] = {}


def _query_error(message: str, status: int, kind: str | None) -> Exception:
    """The error a failed query raises: a ServedError that is also DuckDB's own exception
    class when the caller has imported duckdb (so `except duckdb.Error` keeps working)."""
    duckdb = sys.modules.get("duckdb")
    cls = getattr(duckdb, kind, None) if duckdb is not None and kind else None
    if isinstance(cls, type) and issubclass(cls, duckdb.Error):
        both = _BOTH.get(cls)
        if both is None:
            both = _BOTH[cls] = type(f"Served{cls.__name__}", (ServedError, cls), {})
        return both(message, status=status, kind=kind)
    return ServedError(message, status=status, kind=kind)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, sock_path: str, timeout: float) -> None:
        super().__init__("projector", timeout=timeout)
        self.sock_path = sock_path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.sock_path)
        except OSError:
            s.close()
            raise
        self.sock = s


def _convert(types: list[str]) -> list[Any]:
    """Per column: a function turning the wire value back into DuckDB's Python type, or None."""
    import datetime as dt
    from decimal import Decimal

    def timestamp(v: Any) -> Any:
        return dt.datetime.fromisoformat(v) if isinstance(v, str) else v

    def date(v: Any) -> Any:
        return dt.date.fromisoformat(v) if isinstance(v, str) else v

    def decimal(v: Any) -> Any:
        return Decimal(v) if isinstance(v, str) else v

    out: list[Any] = []
    for t in types:
        if t.startswith("TIMESTAMP"):
            out.append(timestamp)
        elif t == "DATE":
            out.append(date)
        elif t.startswith("DECIMAL"):
            out.append(decimal)
        else:
            out.append(None)
    return out


class ServedResult:
    """The rows of one served query, shaped like a DuckDB result (`description`, `fetchall`,
    `fetchone`, `fetchmany`)."""

    def __init__(self, cols: list[str], types: list[str], rows: list[list[Any]]) -> None:
        self.description = [
            (c, t, None, None, None, None, None) for c, t in zip(cols, types, strict=True)
        ]
        fns = _convert(types)
        if any(fns):
            rows = [[v if f is None else f(v) for v, f in zip(r, fns, strict=True)] for r in rows]
        self._rows = [tuple(r) for r in rows]
        self._at = 0

    def fetchall(self) -> list[tuple]:
        rows, self._at = self._rows[self._at :], len(self._rows)
        return rows

    def fetchone(self) -> tuple | None:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchmany(self, size: int = 1) -> list[tuple]:
        rows = self._rows[self._at : self._at + size]
        self._at += len(rows)
        return rows


class ServedConnection:
    """A connection-like handle on the projector's database (`execute`, `arrow_ipc`,
    `close`). One keep-alive HTTP connection; not for concurrent use from several threads."""

    served = True

    def __init__(self, sock_path: str, db_path: Path, timeout_s: float = 30.0) -> None:
        self.sock_path, self.db_path = sock_path, db_path
        self._http = _UnixHTTPConnection(sock_path, timeout_s)
        self._http.connect()  # OSError: nobody listens

    def _post(self, body: dict[str, Any]) -> tuple[int, bytes, str]:
        raw = msgspec.msgpack.encode(body)
        try:
            self._http.request("POST", PATH, raw, {"Content-Type": CONTENT_TYPE})
            resp = self._http.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._http.close()
            raise ServedUnavailable(
                f"the projector serving {self.db_path} stopped answering ({exc!r})"
            ) from None
        return resp.status, data, resp.getheader("Content-Type") or ""

    def _check(self, status: int, data: bytes) -> None:
        if status == 200:
            return
        try:
            err = msgspec.msgpack.decode(data)
            message, kind = err.get("error", ""), err.get("kind")
        except (msgspec.DecodeError, AttributeError):
            message, kind = data.decode(errors="replace")[:300], None
        raise _query_error(message, status, kind)

    def execute(self, sql: str, params: list | tuple | None = None) -> ServedResult:
        """Run one read-only query (SELECT, EXPLAIN, DESCRIBE, SHOW, ...) on the projector's
        database; its rows, or the query's error (see `_query_error`)."""
        status, data, _ = self._post({"sql": sql, "params": list(params or [])})
        self._check(status, data)
        res = msgspec.msgpack.decode(data)
        return ServedResult(res["cols"], res["types"], res["rows"])

    def arrow_ipc(self, sql: str, params: list | tuple | None = None) -> bytes:
        """The query's rows as an Arrow IPC stream (typed columns, for `sql -o parquet`)."""
        status, data, _ = self._post({"sql": sql, "params": list(params or []), "format": "arrow"})
        self._check(status, data)
        return data

    def cursor(self) -> ServedConnection:
        return self

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServedConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect_served(db_path: str | Path, *, timeout_s: float = 30.0) -> ServedConnection | None:
    """A connection to the projector serving `db_path`, or None when none does (no
    descriptor next to the file, a descriptor of another file, or nobody on its socket: a
    projector that stopped, even by a crash). `GPULEDGER_DIRECT_READS=1` always gives None."""
    if os.environ.get("GPULEDGER_DIRECT_READS") == "1":
        return None
    db_path = Path(db_path)
    try:
        desc = json.loads(descriptor_path(db_path).read_text())
        sock = desc["socket"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        if Path(desc.get("db", "")).resolve() != db_path.resolve():
            return None
        return ServedConnection(sock, db_path, timeout_s)
    except (OSError, TypeError):
        return None
