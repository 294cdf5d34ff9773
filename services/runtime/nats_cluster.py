"""A real nats-server cluster on loopback (3 nodes by default), for `gpuledger up --nats-cluster`
and tests: the production profile of DESIGN.md §4 (the stream at 3 replicas, each node fsyncs
before acknowledging).

Each node is an `EmbeddedNats` with its own store dir, client port and cluster port, the
same identities (one auth dir: clients connect to any node as themselves), and routes to
the other nodes authenticated with a generated route secret (auth.py `route_password`):
nothing without the secret can join the cluster.

Invariants: ports are fixed at the first `start()` and kept for the cluster's life, so `url`
(every node's client URL, comma-separated: what `Bus.connect` takes) never changes, and a
node killed and restarted comes back where clients and the other nodes look for it, on its
own store; `start()` and `restart(i)` return only once every running node answers a JetStream
request through the cluster's meta leader (a node that is up but not routed, or a cluster
without a leader, does not count as ready); `stop()` leaves no child behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuledger.services.runtime.auth import CLUSTER_NAME, AuthDir, NatsAccess, cluster_conf
from gpuledger.services.runtime.nats_server import (
    EmbeddedNats,
    NatsServerFailed,
    StartedWhileEntered,
    auth_location,
    open_auth,
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_async(make: Callable[[], Any]) -> Any:
    """Run a coroutine to completion on a private event loop in a thread (callable from sync
    code, and from inside a running loop too)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            box["error"] = err

    t = threading.Thread(target=target, name="nats-cluster-probe", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


class EmbeddedNatsCluster(StartedWhileEntered):
    """`n` nats-server nodes with JetStream, routed to each other, on 127.0.0.1.

    `store_dir` keeps each node's store in `<store_dir>/node-<i>` (kept on stop; otherwise
    a temporary dir removed on stop); `auth` is the identities' dir (default `<store_dir>/../auth`
    for a kept store, else temporary), generated on first use.
    """

    def __init__(
        self,
        n: int = 3,
        store_dir: str | os.PathLike[str] | None = None,
        *,
        auth: str | os.PathLike[str] | None = None,
        name: str = CLUSTER_NAME,
        sync_always: bool = True,
        start_timeout_s: float = 30.0,
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        if n < 1:
            raise ValueError("a cluster has at least one node")
        self.n = n
        self.name = name
        self.sync_always = sync_always
        self.start_timeout_s = start_timeout_s
        self._binary = binary
        self._given_store = Path(store_dir) if store_dir is not None else None
        self._tmp: Path | None = None
        self._auth_path = Path(auth) if auth is not None else None
        self._auth_tmp: Path | None = None
        self.nodes: list[EmbeddedNats] = []
        self.client_ports: list[int] = []
        self.cluster_ports: list[int] = []

    # ------------------------------------------------------------------ properties

    @property
    def auth(self) -> AuthDir:
        if self._auth_path is None:
            self._auth_path, self._auth_tmp = auth_location(self._given_store)
        return open_auth(self._auth_path)

    @property
    def urls(self) -> list[str]:
        """Each node's client URL (also of a node that is down: its port is kept)."""
        if not self.client_ports:
            raise RuntimeError("EmbeddedNatsCluster was never started")
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (`Bus.connect` takes the list)."""
        return ",".join(self.urls)

    def server_name(self, i: int) -> str:
        return f"{self.name}-{i + 1}"

    @property
    def running(self) -> bool:
        return bool(self.nodes) and any(node.running for node in self.nodes)

    def creds(self, principal: str = "admin") -> Path:
        return self.auth.creds(principal)

    def access(self, principal: str = "admin", node: int | None = None) -> NatsAccess:
        """How `principal` reaches the cluster (every node's URL; only node `node`'s with one)."""
        url = self.url if node is None else self.urls[node]
        return NatsAccess(url, self.creds(principal), self.auth, None)

    def client_options(self, principal: str = "admin") -> dict:
        return self.access(principal).options()

    def add_principals(self, *principals: str) -> list[str]:
        """Create identities that do not exist yet; every running node reloads its config."""
        created = self.auth.add(*principals)
        if created:
            for node in self.nodes:
                node.reload()
        return created

    # ------------------------------------------------------------------ lifecycle

    def _store(self) -> Path:
        if self._given_store is not None:
            return self._given_store
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="gpuledger-nats-cluster-"))
        return self._tmp

    def _make_nodes(self) -> None:
        self.client_ports = [free_port() for _ in range(self.n)]
        self.cluster_ports = [free_port() for _ in range(self.n)]
        password = self.auth.route_password()
        routes = [f"127.0.0.1:{p}" for p in self.cluster_ports]
        for i in range(self.n):
            block = cluster_conf(
                self.name,
                f"127.0.0.1:{self.cluster_ports[i]}",
                [r for j, r in enumerate(routes) if j != i],
                password,
            )
            self.nodes.append(
                EmbeddedNats(
                    self._store() / f"node-{i + 1}",
                    port=self.client_ports[i],
                    sync_always=self.sync_always,
                    start_timeout_s=self.start_timeout_s,
                    binary=self._binary,
                    auth=self.auth.path,
                    server_name=self.server_name(i),
                    extra_conf=block,
                )
            )

    def start(self) -> EmbeddedNatsCluster:
        """Start every node; return once each one is routed and the cluster has a JetStream
        meta leader (or raise NatsServerFailed within `start_timeout_s`)."""
        if not self.nodes:
            self._make_nodes()
        try:
            for node in self.nodes:
                node.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, i: int) -> None:
        """SIGKILL node `i` (a crash); its store stays for `restart(i)`."""
        self.nodes[i].kill()

    def stop_node(self, i: int) -> None:
        self.nodes[i].stop()

    def restart(self, i: int) -> None:
        """Start node `i` again on its store and ports; return once it is routed to a cluster
        with a meta leader."""
        self.nodes[i].start()
        self.wait_ready([i])

    def wait_ready(self, nodes: list[int] | None = None, timeout_s: float | None = None) -> None:
        """Until each of `nodes` (default: every running one), connected to alone, answers a
        JetStream account-info request: only the meta leader answers it, so this node is
        routed to a cluster that has one."""
        import nats
        import nats.errors
        import nats.js.errors

        which = [i for i in (range(self.n) if nodes is None else nodes) if self.nodes[i].running]
        timeout = self.start_timeout_s if timeout_s is None else timeout_s
        options = self.client_options("admin")

        async def probe(url: str) -> str | None:
            nc = None
            try:
                nc = await nats.connect(
                    url,
                    connect_timeout=1,
                    max_reconnect_attempts=0,
                    allow_reconnect=False,
                    **options,
                )
                await nc.jetstream(timeout=1.0).account_info()
                return None
            except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as err:
                return f"{type(err).__name__}: {err}"
            finally:
                if nc is not None:
                    with contextlib.suppress(Exception):
                        await nc.close()

        async def main() -> None:
            deadline = time.monotonic() + timeout
            pending = list(which)
            last = ""
            while pending:
                for i in list(pending):
                    if not self.nodes[i].running:
                        raise NatsServerFailed(
                            f"{self.server_name(i)} exited: {self.nodes[i]._log_tail()}"
                        )  # noqa: SLF001
                    error = await probe(self.urls[i])
                    if error is None:
                        pending.remove(i)
                    else:
                        last = f"{self.server_name(i)}: {error}"
                if pending:
                    if time.monotonic() > deadline:
                        raise NatsServerFailed(
                            f"NATS cluster not ready after {timeout}s (no JetStream meta leader "
                            f"reachable from {', '.join(self.server_name(i) for i in pending)}; "
                            f"last: {last}): {self.nodes[pending[0]]._log_tail()}"
                        )  # noqa: SLF001
                    await asyncio.sleep(0.1)

        _run_async(main)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every node (SIGTERM, then SIGKILL after `timeout_s`); a temporary store is removed."""
        for node in self.nodes:
            node.stop(timeout_s)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
            self.nodes = []
        if self._auth_tmp is not None:
            shutil.rmtree(self._auth_tmp, ignore_errors=True)
            self._auth_tmp, self._auth_path = None, None
