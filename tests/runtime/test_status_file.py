"""`gpuledger status`'s NATS rows (issue 32): given a JetStream stream info's cluster part,
then every node holding the stream is a row (leader, replicas current, behind or offline), so
a dead node is visible; and the status command shows them and exits 1 for a dead one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nats.js.api import ClusterInfo, PeerInfo

from gpuledger.services.runtime.status_file import STATUS_FILE, nats_nodes, now_ms

ROOT = Path(__file__).resolve().parents[2]


def test_a_three_node_stream_shows_its_leader_and_each_replica_with_its_state():
    cluster = ClusterInfo(
        leader="node-2",
        replicas=[
            PeerInfo(name="node-3", current=False, offline=True, active=42_000_000_000, lag=17),
            PeerInfo(name="node-1", current=True, offline=False, active=120_000_000, lag=0),
        ],
    )
    assert nats_nodes(cluster, "node-1") == [
        {"name": "node-2", "role": "leader", "state": "current", "lag": 0, "seen_ms_ago": 0},
        {"name": "node-1", "role": "replica", "state": "current", "lag": 0, "seen_ms_ago": 120},
        {"name": "node-3", "role": "replica", "state": "offline", "lag": 17, "seen_ms_ago": 42_000},
    ]


def test_a_replica_that_is_reachable_but_not_caught_up_is_behind():
    cluster = ClusterInfo(
        leader="a", replicas=[PeerInfo(name="b", current=False, offline=False, active=0, lag=5)]
    )
    assert nats_nodes(cluster, "a")[1]["state"] == "behind"


def test_one_server_is_its_own_leader_and_a_lost_quorum_has_none():
    assert nats_nodes(None, "solo") == [
        {"name": "solo", "role": "leader", "state": "current", "lag": 0, "seen_ms_ago": 0}
    ]
    rows = nats_nodes(ClusterInfo(leader=None, replicas=[]), "a")
    assert rows == [
        {"name": "-", "role": "leader", "state": "no-leader", "lag": None, "seen_ms_ago": None}
    ]


def status_of(data: Path, nodes: list[dict], **fields) -> subprocess.CompletedProcess:
    doc = {
        "updated_at_ms": now_ms(),
        "up_pid": os.getpid(),  # a live process stands in for `up`
        "nats_url": "nats://127.0.0.1:4222",
        "mode": "processes",
        "stream_last_seq": 10,
        "stream_error": None,
        "nats_nodes": nodes,
        "services": [
            {"name": "admission", "role": "admission", "state": "running", "folded_seq": 10}
        ],
        **fields,
    }
    (data / STATUS_FILE).write_text(json.dumps(doc))
    return subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", "status", "--data", str(data)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_status_lists_the_nats_nodes_and_exits_1_when_one_is_offline(tmp_path):
    healthy = nats_nodes(
        ClusterInfo(leader="n1", replicas=[PeerInfo(name="n2", current=True, active=0, lag=0)]),
        "n1",
    )
    done = status_of(tmp_path, healthy)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    head = lines.index(next(ln for ln in lines if ln.startswith("NATS-NODE")))
    assert [ln.split()[:3] for ln in lines[head + 1 :]] == [
        ["n1", "leader", "current"],
        ["n2", "replica", "current"],
    ]

    dead = nats_nodes(
        ClusterInfo(
            leader="n1",
            replicas=[PeerInfo(name="n2", current=False, offline=True, active=90 * 10**9, lag=3)],
        ),
        "n1",
    )
    done = status_of(tmp_path, dead)
    assert done.returncode == 1
    assert ["n2", "replica", "offline", "3", "90s", "ago"] in [
        ln.split() for ln in done.stdout.splitlines()
    ]


def test_a_server_known_only_by_its_id_is_shown_by_its_address():
    sid = "N" + "A" * 55
    rows = nats_nodes(
        ClusterInfo(leader=sid, replicas=[]), "127.0.0.1:4222", {sid: "127.0.0.1:4222"}
    )
    assert [r["name"] for r in rows] == ["127.0.0.1:4222"]


def test_an_up_that_cannot_write_its_status_is_never_called_not_running(tmp_path):
    """On a full disk `up` may not manage to rewrite status.json: while its pid lives, status
    says it runs but cannot update the file (exit 1), not that it stopped."""
    done = status_of(tmp_path, nats_nodes(None, "solo"), updated_at_ms=now_ms() - 60_000)
    assert done.returncode == 1
    assert "is running but has not updated" in done.stderr
    assert "is the disk full?" in done.stderr and "is not running" not in done.stderr


def test_store_full_and_a_refused_reload_are_shown_and_exit_1(tmp_path):
    store = {
        "state": "full",
        "error": "the event store is full (NATS: insufficient resources, 10023)",
        "since_ms": now_ms() - 5000,
        "write_errors": 3,
        "restarts": 0,
    }
    done = status_of(tmp_path, nats_nodes(None, "solo"), store=store)
    assert done.returncode == 1
    assert "store full: the event store is full (NATS: insufficient resources" in done.stderr
    done = status_of(
        tmp_path,
        nats_nodes(None, "solo"),
        store={**store, "state": "ok", "error": None},
        nats_reload_error="nats-server refused to reload its config: parse error",
    )
    assert done.returncode == 1
    assert "NATS credential reload failed: nats-server refused" in done.stderr
    assert "store full" not in done.stderr
