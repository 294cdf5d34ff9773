"""The projector serves reads of the database it writes (docs/reads.md).

DuckDB lets one process hold a file for writing and no other process open it at the same
time, so readers that open the file pause the writer. Instead the projector keeps its file
open and answers queries on cursors of its own database: DuckDB's MVCC gives every read a
consistent snapshot of what was committed before it started, and a read never takes a lock
the writer needs. Reads go over HTTP/1.1 on a Unix domain socket, mode 0600 (the file
system is the authentication: only the projector's user may connect), named with the
server's pid in `<db>.reads.json` (written atomically, removed on close); the client is
projections/served.py.

Invariants: only read-only statements run (each statement of a query is classified by
DuckDB's parser; SELECT, EXPLAIN without ANALYZE and a few inspection PRAGMAs pass, anything
else is a 400 naming its type), inside a transaction that is always rolled back; parameters
are bound, never formatted; at most `readers` reads run at once (one pooled cursor each; a
further one waits `wait_s`, then 503), each is interrupted after `timeout_s` (504) and
answers at most `max_rows` rows and `max_bytes` bytes of values (413). Reads run in the
server's threads, never in the projector's commit loop.

Defence in depth (docs/security.md, "The reads socket"): serving locks the database down
first (`harden`: no file or network access, no extension installed or loaded, the
configuration locked), and a query naming a function that changes state or runs other SQL
(`checkpoint()`, `query()`, `nextval`, ... `REFUSED_FUNCTIONS`) is refused before it runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import logging
import os
import queue
import re
import shutil
import socketserver
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import msgspec

from gpuledger.projections.served import CONTENT_TYPE, PATH, descriptor_path

log = logging.getLogger("gpuledger.projector.reads")

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
SAFE_PRAGMAS = re.compile(
    r"\s*pragma\s+(table_info|show_tables|show_tables_expanded|show|version|database_size|"
    r"storage_info|functions|platform)\b[^=;]*;?\s*$",
    re.IGNORECASE,
)
EXPLAIN_ANALYZE = re.compile(r"\s*explain\s+analy[sz]e\b", re.IGNORECASE)
HARDENING = (
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET lock_configuration = true",
)
"""What `harden` sets on the database it serves, in order (the lock last: nothing after it
may change a setting, a read's `SET` included)."""
REFUSED_FUNCTIONS = frozenset(
    {
        # write or flush the database file
        "checkpoint",
        "force_checkpoint",
        # run SQL given as a string, past the statement check
        "query",
        "json_execute_serialized_sql",
        # change the database's or the session's state
        "nextval",
        "setval",
        "setseed",
        "enable_logging",
        "disable_logging",
        "truncate_duckdb_logs",
        "enable_profiling",
        "disable_profiling",
        "add_grammar_extension",
        "remove_grammar_extension",
        "create_external_resource",
        "register_external_resource",
        "register_external_resource_type",
        "deregister_external_resource",
        "destroy_external_resource",
        # scan memory named by a raw pointer (the Python client's own scans)
        "arrow_scan",
        "arrow_scan_dumb",
        "python_arrow_scan",
        "pandas_scan",
        "python_map_function",
        # credentials
        "duckdb_secrets",
        "which_secret",
    }
)
"""Functions a served read may not name, wherever in the query (a table or scalar function,
in a subquery or CTE). Files are closed by `enable_external_access = false` instead: every
reader of a file (`read_text`, `read_csv`, `glob`, `parquet_metadata`, ...) is refused by
DuckDB itself."""
MAX_BYTES = 32 * 1024 * 1024
"""Default byte cap of one answer (the sum of its values' sizes: a string's or blob's
length, 8 for any other value)."""
MAX_SOCKET_PATH = 100
"""AF_UNIX paths are limited to 108 bytes; a longer data dir gets its socket in a private
temporary directory instead (named in the descriptor all the same)."""


class Refused(ValueError):
    """A statement that is not a read."""


def check_read_only(sql: str) -> None:
    """Raise Refused unless every statement of `sql` only reads (see the module doc)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise Refused(" ".join(str(exc).split())) from None
    if not statements:
        raise Refused("no statement")
    for st in statements:
        text = st.query
        if st.type == duckdb.StatementType.PRAGMA and SAFE_PRAGMAS.match(text):
            continue
        if st.type not in ALLOWED or EXPLAIN_ANALYZE.match(text):
            kind = "EXPLAIN ANALYZE" if EXPLAIN_ANALYZE.match(text) else st.type.name
            raise Refused(f"read-only: {kind} statements are not served (only queries)")


def harden(con: duckdb.DuckDBPyConnection) -> None:
    """Lock down the database of `con` for serving reads (`HARDENING`). The settings are the
    database's: its writer keeps writing its own file, but nobody on it (the writer
    included) can read another file, install or load an extension, or change a setting
    again. Idempotent."""
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchone()
    if locked is not None and locked[0] is True:
        return
    for statement in HARDENING:
        con.execute(statement)


def _function_names(node: Any) -> set[str]:
    """Every function named anywhere in a serialized statement (json_serialize_sql)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            name = x.get("function_name")
            if isinstance(name, str):
                names.add(name.lower())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return names


def check_functions(cur: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise Refused when a query of `sql` names a function of `REFUSED_FUNCTIONS`. Each
    SELECT is parsed by DuckDB (`json_serialize_sql`), not matched as text; EXPLAIN does not
    run its query and PRAGMAs are the inspection ones `check_read_only` lets pass."""
    for st in duckdb.extract_statements(sql):
        if st.type != duckdb.StatementType.SELECT:
            continue
        row = cur.execute("SELECT json_serialize_sql(?)", [st.query]).fetchone()
        tree = json.loads(row[0]) if row else {}
        if tree.get("error"):
            raise Refused(f"read-only: {tree.get('error_message') or 'cannot parse the query'}")
        named = sorted(_function_names(tree) & REFUSED_FUNCTIONS)
        if named:
            raise Refused(f"read-only: {named[0]}() changes state or runs other SQL: not served")


def _size(v: Any) -> int:
    """The bytes `v` counts against an answer's cap (see MAX_BYTES)."""
    if isinstance(v, str | bytes | bytearray):
        return len(v)
    if isinstance(v, list | tuple):
        return 8 + sum(_size(x) for x in v)
    if isinstance(v, dict):
        return 8 + sum(_size(k) + _size(x) for k, x in v.items())
    return 8


def _enc_hook(v: Any) -> Any:
    return str(v)


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


class _Answer(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(body.get("error"))
        self.status, self.body, self.headers = status, body, headers or {}


class ReadServer:
    """Serve read-only queries on cursors of `con` (the projector's connection) until
    `close()`. `start()` binds the socket and writes the descriptor."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        db_path: str | Path,
        *,
        readers: int = 2,
        wait_s: float = 5.0,
        timeout_s: float = 10.0,
        max_rows: int = 1_000_000,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.db_path = Path(db_path)
        self.wait_s, self.timeout_s, self.max_rows = wait_s, timeout_s, max_rows
        self.max_bytes = max_bytes
        harden(con)
        self._cursors: queue.Queue = queue.Queue()
        for _ in range(max(1, readers)):
            self._cursors.put(con.cursor())
        self._con = con
        self._server: socketserver.UnixStreamServer | None = None
        self._thread: threading.Thread | None = None
        self._private_dir: str | None = None
        self.socket_path = ""
        self.served = 0
        """Reads answered (any status)."""

    # ------------------------------------------------------------------ lifecycle

    def _bind_path(self) -> str:
        own = str(self.db_path.with_name(self.db_path.name + ".sock"))
        if len(os.fsencode(own)) <= MAX_SOCKET_PATH:
            return own
        # a path too long for a socket: a private directory named for the file, so a projector
        # restarted after a crash reuses (and at its close removes) the one it left
        digest = hashlib.blake2b(str(self.db_path.resolve()).encode(), digest_size=8).hexdigest()
        private = os.path.join(tempfile.gettempdir(), f"gpuledger-reads-{digest}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(private, 0o700)
        st = os.lstat(private)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError(f"{private}: not a private directory of this user; remove it")
        self._private_dir = private
        return os.path.join(private, "reads.sock")

    def start(self) -> ReadServer:
        path = self._bind_path()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a crashed projector's: this process holds the file's write lock
        handler = _handler(self)
        old = os.umask(0o177)
        try:
            server = _Server(path, handler)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._server, self.socket_path = server, path
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="projector-reads"
        )
        self._thread.daemon = True
        self._thread.start()
        desc = descriptor_path(self.db_path)
        tmp = desc.with_name(desc.name + ".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "socket": path,
                    "pid": os.getpid(),
                    "db": str(self.db_path.resolve()),
                    "started_at_ms": int(time.time() * 1000),
                }
            )
        )
        os.replace(tmp, desc)
        log.info("serving reads of %s on %s", self.db_path, path)
        return self

    def close(self) -> None:
        """Stop answering (reads in progress finish first), remove the descriptor and the
        socket, close the cursors. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        desc = descriptor_path(self.db_path)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(desc.read_text()).get("socket") == self.socket_path:
                desc.unlink()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
        while True:
            try:
                cur = self._cursors.get_nowait()
            except queue.Empty:
                break
            with contextlib.suppress(duckdb.Error):
                cur.close()

    # ------------------------------------------------------------------ one read

    def answer(self, body: bytes) -> tuple[int, bytes, str, dict[str, str]]:
        """One request body to (status, body, content type, headers)."""
        try:
            req = msgspec.msgpack.decode(body)
            if not isinstance(req, dict) or not isinstance(req.get("sql"), str):
                raise _Answer(400, {"error": "a request is {sql, params?, format?}"})
            if self._server is None:
                raise _Answer(503, {"error": "the projector is stopping"}, {"Retry-After": "1"})
            sql, params = req["sql"], req.get("params") or []
            if not isinstance(params, list):
                raise _Answer(400, {"error": "params must be a list"})
            try:
                check_read_only(sql)
            except Refused as exc:
                raise _Answer(400, {"error": str(exc), "kind": "PermissionException"}) from None
            return self._run(sql, params, arrow=req.get("format") == "arrow")
        except _Answer as ans:
            return ans.status, _encoder.encode(ans.body), CONTENT_TYPE, ans.headers
        except msgspec.DecodeError:
            return 400, _encoder.encode({"error": "not msgpack"}), CONTENT_TYPE, {}
        finally:
            self.served += 1

    def _run(self, sql: str, params: list, *, arrow: bool) -> tuple[int, bytes, str, dict]:
        try:
            cur = self._cursors.get(timeout=self.wait_s)
        except queue.Empty:
            raise _Answer(
                503, {"error": "the projector is busy with other reads"}, {"Retry-After": "1"}
            ) from None
        try:
            return self._on(cur, sql, params, arrow=arrow)
        finally:
            self._cursors.put(cur)

    def _too_big(self) -> _Answer:
        return _Answer(
            413,
            {
                "error": f"the answer is over {self.max_bytes:,} bytes or {self.max_rows:,}"
                " rows: add a LIMIT or select fewer columns"
            },
        )

    def _rows(self, res) -> list:
        """The result's rows, fetched in chunks and counted against both caps."""
        rows: list = []
        size = 0
        while True:
            chunk = res.fetchmany(2048)
            if not chunk:
                return rows
            rows.extend(chunk)
            size += sum(_size(r) for r in chunk)
            if size > self.max_bytes or len(rows) > self.max_rows:
                raise self._too_big()

    def _arrow(self, rel) -> bytes:
        """The relation's rows as an Arrow IPC stream, batch by batch within both caps."""
        import pyarrow as pa

        reader = rel.to_arrow_reader(2048)
        sink = pa.BufferOutputStream()
        rows = 0
        with pa.ipc.new_stream(sink, reader.schema) as w:
            for batch in reader:
                rows += batch.num_rows
                if sink.tell() + batch.nbytes > self.max_bytes or rows > self.max_rows:
                    raise self._too_big()
                w.write_batch(batch)
        return sink.getvalue().to_pybytes()

    def _on(self, cur, sql: str, params: list, *, arrow: bool) -> tuple[int, bytes, str, dict]:
        try:
            check_functions(cur, sql)
        except Refused as exc:
            raise _Answer(400, {"error": str(exc), "kind": "PermissionException"}) from None
        timer = threading.Timer(self.timeout_s, cur.interrupt)
        cur.execute("BEGIN TRANSACTION")
        try:
            timer.start()
            try:
                if arrow:
                    body = self._arrow(cur.sql(sql, params=params or None))
                    return 200, body, "application/x-arrow", {}
                res = cur.execute(sql, params or None)
                cols = [d[0] for d in res.description or []]
                types = [str(d[1]) for d in res.description or []]
                rows = self._rows(res) if cols else []
            finally:
                timer.cancel()
        except duckdb.InterruptException:
            raise _Answer(
                504, {"error": f"the read ran longer than {self.timeout_s:g}s and was stopped"}
            ) from None
        except duckdb.Error as exc:
            raise _Answer(400, {"error": str(exc), "kind": type(exc).__name__}) from None
        finally:
            _rollback(cur)
        return 200, _encoder.encode({"cols": cols, "types": types, "rows": rows}), CONTENT_TYPE, {}


def _rollback(cur) -> None:
    """End the read's transaction (a read never commits anything); an interrupt that arrived
    just as the read ended may hit the first ROLLBACK: try once more."""
    for _ in range(2):
        try:
            cur.execute("ROLLBACK")
            return
        except duckdb.Error:
            continue


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


def _handler(server: ReadServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "gpuledger-projector"

        def address_string(self) -> str:  # a Unix socket has no client address
            return "local"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("read: " + format, *args)

        def do_POST(self) -> None:
            if self.path != PATH:
                self._send(404, _encoder.encode({"error": f"no {self.path}"}), CONTENT_TYPE, {})
                return
            n = int(self.headers.get("Content-Length") or 0)
            self._send(*server.answer(self.rfile.read(n)))

        def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main(argv: list[str] | None = None) -> None:
    """`python -m gpuledger.projections.serving DB`: hold DB as its writer (as a projector
    does, folding nothing) and serve reads of it until stdin closes or SIGTERM; prints
    `serving <socket>` once ready. For benchmarks (`gpuledger bench cli`) and for reading a
    projection that no projector follows through the same path as a live one."""
    import signal
    import sys

    from gpuledger.projections.store import Store

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m gpuledger.projections.serving DB")

    def stop(*_: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    store = Store(args[0])  # the writer's lock and settings, without folding anything
    try:
        server = ReadServer(store.con, args[0]).start()
        try:
            print(f"serving {server.socket_path}", flush=True)
            with contextlib.suppress(ValueError, OSError):
                sys.stdin.read()
        finally:
            server.close()
    finally:
        store.close()


if __name__ == "__main__":
    main()
