"""EmbeddedNatsCluster: three real nats-server processes routed on loopback, authentication on,
the stream at 3 replicas (DESIGN.md §4's production profile).

Given a 3-node cluster and admission running against every node's URL, when the stream's
leader is killed with SIGKILL under a steady publish load, then no publish whose ack came
back is missing from the stream (read through another node), admission reconnects and goes
on deciding, and the restarted node catches up with the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from pathlib import Path

import pytest
import structlog

from gpuledger import events as ev
from gpuledger.services.domain.inputs.configfile import config_events
from gpuledger.services.domain.inputs.jobfile import job_spec
from gpuledger.services.domain.tooling.stamp import submission
from gpuledger.services.roles import build
from gpuledger.services.runtime.auth import client_options
from gpuledger.services.runtime.bus import MAX_OUTSTANDING_PINGS, PING_INTERVAL_S, Bus
from gpuledger.services.runtime.host import run_service
from gpuledger.services.runtime.nats_cluster import EmbeddedNatsCluster
from tests.natsauth import as_admin
from tests.waiting import eventually_async

CONFIG = {
    "cluster": {"nodes": [{"name_prefix": "n", "count": 1, "gpus": 8}]},
    "tenants": [{"name": "team-a", "guaranteed": 8}],
}


@pytest.fixture
def cluster(monkeypatch, tmp_path: Path):
    c = EmbeddedNatsCluster(3, tmp_path / "nats", auth=tmp_path / "auth", start_timeout_s=60)
    with c:
        as_admin(monkeypatch, c)
        yield c


# the servers come and go under these tests: a failing check (a connection error) is "not yet"
wait_for = functools.partial(eventually_async, ignoring=(Exception,), interval_s=0.1)


def submit_event(i: int):
    spec = job_spec({"id": f"load-{i}", "tenant": "team-a", "gpus": 1, "duration": "1h"})
    return submission(spec, producer="test", now_ms=time.time_ns() // 1_000_000)


async def test_the_stream_has_three_replicas_and_routes_need_the_secret(cluster) -> None:
    bus = await Bus.connect(cluster.url, **cluster.client_options())
    try:
        info = await bus.ensure_stream(replicas=3)
        assert info.config.num_replicas == 3
        assert info.cluster is not None and info.cluster.leader
        assert len(info.cluster.replicas or []) == 2
        # a development default (replicas=None) never scales the production stream down
        assert (await bus.ensure_stream()).config.num_replicas == 3
    finally:
        await bus.close()
    # each node has its own store, client port and cluster port
    assert len({n.store_dir for n in cluster.nodes}) == 3
    assert all((n.store_dir / "jetstream").is_dir() for n in cluster.nodes)
    assert len(set(cluster.client_ports) | set(cluster.cluster_ports)) == 6
    # every node fsyncs before acknowledging, and admits no anonymous client
    for i, node in enumerate(cluster.nodes):
        text = node._config_text(node.store_dir)  # noqa: SLF001
        assert "sync_interval: always" in text and f'server_name: "gpuledger-{i + 1}"' in text
        assert "no_auth_user" not in text
    # a route without the cluster's secret is refused
    with socket.create_connection(("127.0.0.1", cluster.cluster_ports[0]), timeout=5) as s:
        s.settimeout(5)
        assert s.recv(4096).startswith(b"INFO")
        s.sendall(b'CONNECT {"user":"route","pass":"guess","verbose":false}\r\nPING\r\n')
        reply = b""
        with contextlib.suppress(TimeoutError, OSError):
            while b"\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        assert b"PONG" not in reply, reply


async def test_kill_9_of_the_stream_leader_under_load_loses_no_acknowledged_event(cluster) -> None:
    admin = await Bus.connect(cluster.url, name="test-admin", **cluster.client_options())
    await admin.ensure_stream(replicas=3)
    for e in config_events(CONFIG, producer="test", at_ms=time.time_ns() // 1_000_000):
        await admin.publish(e)
    leader = (await admin.stream_info()).cluster.leader
    victim = next(i for i in range(3) if cluster.server_name(i) == leader)
    other = (victim + 1) % 3
    await admin.close()

    # Clients list every node with the victim first (and keep that order), so both the load
    # and the service are connected to the node that dies.
    urls = ",".join([cluster.urls[victim]] + [u for j, u in enumerate(cluster.urls) if j != victim])
    stop = asyncio.Event()
    hosts: list = []
    service = asyncio.create_task(
        run_service(
            build("admission"),
            urls,
            stop=stop,
            on_host=hosts.append,
            nats_options={**client_options(cluster.creds("admission")), "dont_randomize": True},
        )
    )

    load = await Bus.connect(
        urls, name="test-load", timeout_s=2.0, dont_randomize=True, **cluster.client_options()
    )
    acked: list[tuple[int, str, float]] = []  # (seq, job id, monotonic time of the ack)
    failed = 0
    stop_load = asyncio.Event()

    async def publish_steadily() -> None:
        nonlocal failed
        i = 0
        while not stop_load.is_set():
            event = submit_event(i)
            i += 1
            try:
                seq = await load.publish(event)
            except Exception:  # noqa: BLE001 - not acknowledged: the client may retry, we count it
                failed += 1
                await asyncio.sleep(0.05)
                continue
            acked.append((seq, event.job.job_id, time.monotonic()))
            # a steady 50/s at most: load, not a flood admission cannot fold
            await asyncio.sleep(0.02)

    def acked_after(t: float) -> int:
        return sum(1 for _, _, at in acked if at > t)

    publisher = asyncio.create_task(publish_steadily())
    try:
        await wait_for(
            lambda: _true(len(acked) >= 20 and hosts and hosts[-1].folded_seq > 0),
            30,
            "load and admission running",
        )
        killed_at = time.monotonic()
        cluster.kill(victim)
        await wait_for(
            lambda: _true(acked_after(killed_at) >= 30), 60, "acknowledged publishes after the kill"
        )

        # admission reconnected (through another node) and decides the jobs submitted since
        reader = await Bus.connect(
            cluster.urls[other], name="test-reader", **cluster.client_options()
        )
        try:
            after_kill = [job for _, job, at in acked if at > killed_at][:10]

            # read on from where the last look stopped: the stream grows under the load, and
            # re-reading all of it every time costs more than the load on a busy machine
            decided_jobs: set[str] = set()
            cursor = 0

            async def decided() -> bool:
                nonlocal cursor
                async for r in reader.read_all(after_seq=cursor):
                    cursor = r.seq
                    if r.subject.startswith("gl.admission."):
                        decided_jobs.add(r.subject.split(".")[2])
                return all(job in decided_jobs for job in after_kill)

            await wait_for(decided, 60, f"admission decisions for {after_kill}", interval_s=0.5)
            assert hosts[-1].bus.nc.connected_url.port != cluster.client_ports[victim]

            restarted_at = time.monotonic()
            await asyncio.to_thread(cluster.restart, victim)
            await wait_for(
                lambda: _true(acked_after(restarted_at) >= 10),
                60,
                "acknowledged publishes after the restart",
            )
            stop_load.set()
            await publisher

            # no acknowledged event lost: each ack's sequence holds that very submission
            stored = {r.seq: r.subject async for r in reader.read_all()}
            missing = [
                (seq, job)
                for seq, job, _ in acked
                if stored.get(seq) != ev.subject_for(submit_event_for(job))
            ]
            assert not missing, f"{len(missing)} acknowledged events lost: {missing[:5]}"
            assert len({seq for seq, _, _ in acked}) == len(acked)

            # the restarted node catches up: its replica is current with no lag at the last seq
            last = max(stored)

            async def caught_up() -> bool:
                info = await reader.stream_info()
                peers = {p.name: p for p in info.cluster.replicas or []}
                if info.cluster.leader == cluster.server_name(victim):
                    return info.state.last_seq == last
                peer = peers.get(cluster.server_name(victim))
                return (
                    info.state.last_seq == last
                    and peer is not None
                    and peer.current
                    and not peer.offline
                    and not peer.lag
                )

            await wait_for(
                caught_up, 60, f"{cluster.server_name(victim)} catching up to seq {last}"
            )
        finally:
            await reader.close()
    finally:
        stop_load.set()
        with contextlib.suppress(Exception):
            await publisher
        await load.close()
        stop.set()
        await asyncio.wait_for(service, 30)
    assert acked, "no publish was acknowledged"
    times = sorted(at for _, _, at in acked)
    stall = max(b - a for a, b in zip(times, times[1:], strict=False))
    print(
        f"killed {cluster.server_name(victim)} (stream leader): {len(acked)} acknowledged, "
        f"{failed} not acknowledged, longest gap between acks {stall:.2f}s"
    )


async def _true(value) -> bool:
    return bool(value)


def submit_event_for(job_id: str):
    return submit_event(int(job_id.rsplit("-", 1)[1]))


async def test_a_new_identity_is_admitted_by_every_node(cluster) -> None:
    import nats

    node_creds = None
    with contextlib.suppress(Exception):
        node_creds = cluster.creds("node:late")
    assert node_creds is None  # not there yet
    assert cluster.add_principals("node:late") == ["node:late"]
    for url in cluster.urls:  # each node reloaded the shared auth dir
        nc = await nats.connect(
            url,
            allow_reconnect=False,
            connect_timeout=5,
            **client_options(cluster.creds("node:late")),
        )
        await nc.close()


async def test_a_client_whose_server_is_killed_reconnects_to_a_live_node_without_waiting_for_it(
    cluster, monkeypatch
) -> None:
    """nats-py shuffles its server pool before reconnecting; whichever server the shuffle puts
    first, the one that died included (forced here: the pool is ordered victim first), a client
    of every node must move to a live one, trying the dead one at most once, not retry the dead
    one alone until it comes back."""
    import nats.aio.client

    victim = 1
    port = cluster.client_ports[victim]
    monkeypatch.setattr(
        nats.aio.client, "shuffle", lambda pool: pool.sort(key=lambda s: s.uri.port != port)
    )
    bus = await Bus.connect(cluster.url, name="test-failover", **cluster.client_options())
    try:
        assert bus.nc.connected_url.port == port  # the victim, first in the pool
        with structlog.testing.capture_logs() as logs:
            cluster.kill(victim)
            await wait_for(
                lambda: _true(bus.nc.is_connected and bus.nc.connected_url.port != port),
                10.0,
                "a connection to a live node",
                interval_s=0.02,
            )
            await bus.nc.flush(timeout=2)  # a round trip through the live node
        refused = [r for r in logs if r["event"] == "bus.reconnect_failed"]
        # at most one try of the dead node before a live one (none when a live one comes first)
        assert len(refused) <= 1, refused
    finally:
        await bus.close()


async def test_a_client_whose_server_is_paused_moves_to_a_live_node(cluster, monkeypatch) -> None:
    """A SIGSTOPped (hung, partitioned) node keeps its TCP connections open: only unanswered
    pings show it. The client drops it after `max_outstanding_pings` of them and reconnects to
    a live node (pings every 0.3 s here; every `PING_INTERVAL_S` by default)."""
    import os
    import signal

    import nats.aio.client

    victim = 2
    port = cluster.client_ports[victim]
    monkeypatch.setattr(
        nats.aio.client, "shuffle", lambda pool: pool.sort(key=lambda s: s.uri.port != port)
    )
    bus = await Bus.connect(
        cluster.url,
        name="test-paused",
        ping_interval=0.3,
        max_outstanding_pings=2,
        **cluster.client_options(),
    )
    pid = cluster.nodes[victim]._proc.pid  # noqa: SLF001 - the server's own child
    try:
        assert bus.nc.connected_url.port == port
        os.kill(pid, signal.SIGSTOP)
        try:
            await wait_for(
                lambda: _true(bus.nc.is_connected and bus.nc.connected_url.port != port),
                5.0,
                "a connection to a live node",
                interval_s=0.05,
            )
            await bus.nc.flush(timeout=2)  # a round trip through the live node
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        await bus.close()


async def test_clients_ping_their_server_often_enough_to_leave_a_hung_one_within_20_s(
    cluster,
) -> None:
    bus = await Bus.connect(cluster.url, name="test-defaults", **cluster.client_options())
    try:
        assert bus.nc.options["ping_interval"] == PING_INTERVAL_S == 5
        assert bus.nc.options["max_outstanding_pings"] == MAX_OUTSTANDING_PINGS == 3
    finally:
        await bus.close()
