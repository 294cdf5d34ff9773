"""`gpuledger up --nats-cluster 3`: the whole scheduler on a 3-node NATS cluster of its own
(loopback, authentication on, routes authenticated), the stream at 3 replicas."""

import asyncio
import json
import signal
import socket
import subprocess

import pytest

from gpuledger.services.runtime.auth import client_options
from gpuledger.services.runtime.bus import Bus
from tests.integration.cluster import EXAMPLES, cli, start_up
from tests.waiting import eventually

pytestmark = pytest.mark.integration


async def stream_info(url: str, creds):
    bus = await Bus.connect(url, connect_attempts=3, quiet=True, **client_options(creds))
    try:
        return await bus.stream_info()
    finally:
        await bus.close()


def test_up_with_a_three_node_cluster_replicates_the_stream_and_decides(tmp_path):
    up = start_up(
        tmp_path,
        "--nats-cluster",
        "3",
        "--config",
        str(EXAMPLES / "three-jobs.yaml"),
        level="warning",
        text=False,
    )
    data = tmp_path / ".gpuledger"
    url_file = data / "nats-url"
    try:
        eventually(lambda: url_file.exists() or up.poll() is not None, 60, "up's URL file")
        assert url_file.exists(), up.stdout.read().decode() if up.poll() is not None else "no URL"
        urls = url_file.read_text().strip().split(",")
        assert len(urls) == 3 and all(u.startswith("nats://127.0.0.1:") for u in urls)
        assert sorted(p.name for p in (data / "nats-cluster").iterdir()) == [
            "node-1",
            "node-2",
            "node-3",
        ]

        (tmp_path / "job.yaml").write_text("id: first\ntenant: team-a\ngpus: 4\nduration: 1\n")
        ok = cli("submit", "job.yaml", "--wait", cwd=tmp_path)  # finds the cluster by itself
        assert ok.returncode == 0 and "admitted first" in ok.stdout, ok.stderr

        info = asyncio.run(stream_info(urls[1], data / "auth" / "admin.nk"))
        assert info.config.num_replicas == 3
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2

        # `gpuledger status` shows each NATS node: one leader, two current replicas (issue 32)
        def nats_rows():
            done = cli("status", "-o", "json", cwd=tmp_path)
            rows = json.loads(done.stdout).get("nats_nodes") if done.stdout else None
            states = sorted((r["role"], r["state"]) for r in rows or [])
            if states == [("leader", "current"), ("replica", "current"), ("replica", "current")]:
                return rows
            return None

        rows = eventually(nats_rows, 30, "3 NATS nodes current in status", interval_s=0.5)
        assert sorted(r["name"] for r in rows) == ["gpuledger-1", "gpuledger-2", "gpuledger-3"]
        assert all(r["lag"] == 0 for r in rows)
    finally:
        up.send_signal(signal.SIGINT)
        try:
            out, _ = up.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            out, _ = up.communicate()
    assert up.returncode == 0, out.decode()[-3000:]
    assert not url_file.exists()
    for url in urls:  # every node stopped with `up`
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()


def test_apply_with_replicas_creates_the_stream_at_three_on_a_cluster(monkeypatch, tmp_path):
    # compose's `config` service: `apply ... --replicas ${GPULEDGER_STREAM_REPLICAS}`
    from gpuledger.services.runtime.nats_cluster import EmbeddedNatsCluster
    from tests.natsauth import as_admin

    with EmbeddedNatsCluster(3, tmp_path / "nats", start_timeout_s=60) as c:
        as_admin(monkeypatch, c)
        out = cli(
            "apply", str(EXAMPLES / "three-jobs.yaml"), "--replicas", "3", "--nats-url", c.url
        )
        assert out.returncode == 0, out.stderr
        info = asyncio.run(stream_info(c.urls[2], c.creds("admin")))
        assert info.config.num_replicas == 3 and info.state.messages > 0
        # applying again without --replicas keeps the count
        assert cli("apply", str(EXAMPLES / "three-jobs.yaml"), "--nats-url", c.url).returncode == 0
        assert asyncio.run(stream_info(c.url, c.creds("admin"))).config.num_replicas == 3
