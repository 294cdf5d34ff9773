"""The status file `gpuledger up` writes into its data directory (`status.json`) and what its
readers make of it: `gpuledger status`, and the staleness warning of `jobs`, `why` and `sql`.
Light on purpose (the standard library only): a read command imports this, not the
supervisor (services/runtime/supervisor.py, which re-exports every name here).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

STATUS_FILE = "status.json"
DEFAULT_DATA = Path(".gpuledger")
"""The data directory `gpuledger up` runs in, and every command reads, unless told otherwise."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Readers see the old or the new document, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_json_keeping(path: Path, doc: dict[str, Any]) -> None:
    """`write_json_atomic`, or, when the disk is too full for a new file, an overwrite of the
    existing file in place (its blocks are already allocated: a document no longer than the
    last one fits), so readers still see `up` alive on a full disk. OSError when neither can."""
    try:
        write_json_atomic(path, doc)
    except OSError:
        path.with_name(f".{path.name}.{os.getpid()}.tmp").unlink(missing_ok=True)
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def staleness(
    status: dict[str, Any] | None, db_seq: int, *, now: int | None = None, grace_ms: int = 3000
) -> str | None:
    """A warning when a projection read at `db_seq` is stale: `up` is running (its status
    file is fresh), the stream is further, and the projector is not running (crashed,
    restarting) or has missed events the stream held more than `grace_ms` ago (blocked by a
    reader, or catching up). None when the read is current (or unknowable)."""
    if not status:
        return None
    now = now_ms() if now is None else now
    stream = status.get("stream_last_seq")
    if stream is None or db_seq >= stream or now - status.get("updated_at_ms", 0) > 15_000:
        return None
    if not pid_alive(status.get("up_pid")):
        return None
    pj = next((r for r in status.get("services", []) if r.get("role") == "projector"), None)
    if pj is None:
        return None
    since = pj.get("behind_since_ms")
    if pj.get("state") in ("running", "blocked") and (since is None or now - since < grace_ms):
        return None
    why = pj.get("state", "?")
    if pj.get("detail") or pj.get("last_error"):
        why += f": {pj.get('detail') or pj.get('last_error')}"
    age = "" if since is None else f" for {(now - since) / 1000:.0f}s"
    return (
        f"projection is stale: at seq {db_seq}, the stream is at {stream} "
        f"({stream - db_seq} events behind{age}; projector {why})"
    )


def nats_nodes(
    cluster: Any, server_name: str | None, aliases: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The NATS nodes that hold the stream, as `gpuledger status` shows them, from a JetStream
    stream info's `cluster` (`nats.js.api.ClusterInfo`: the leader, and each other replica's
    `current`, `offline`, `active` (ns since last heard) and `lag` (operations behind)).

    One row per node: `name`, `role` (`leader` | `replica`), `state` (`current` | `behind` |
    `offline`), `lag`, `seen_ms_ago`. A stream without a cluster (one server) is one row, the
    leader: `server_name`, the server the status was asked of. No leader (an election, or too
    few nodes for a quorum) is a row named `-` in state `no-leader`. `aliases` renames nodes (a
    server without a `server_name` of its own is called by its 56-character id: its address
    reads better)."""
    rows = _node_rows(cluster, server_name)
    for row in rows:
        row["name"] = (aliases or {}).get(row["name"], row["name"])
    return rows


def _node_rows(cluster: Any, server_name: str | None) -> list[dict[str, Any]]:
    if cluster is None:
        return [
            {
                "name": server_name or "-",
                "role": "leader",
                "state": "current",
                "lag": 0,
                "seen_ms_ago": 0,
            }
        ]
    rows = []
    if cluster.leader:
        rows.append(
            {
                "name": cluster.leader,
                "role": "leader",
                "state": "current",
                "lag": 0,
                "seen_ms_ago": 0,
            }
        )
    else:
        rows.append(
            {"name": "-", "role": "leader", "state": "no-leader", "lag": None, "seen_ms_ago": None}
        )
    for peer in sorted(cluster.replicas or [], key=lambda p: p.name or ""):
        if peer.offline:
            state = "offline"
        elif peer.current:
            state = "current"
        else:
            state = "behind"
        rows.append(
            {
                "name": peer.name or "?",
                "role": "replica",
                "state": state,
                "lag": peer.lag or 0,
                "seen_ms_ago": None if peer.active is None else peer.active // 1_000_000,
            }
        )
    return rows
