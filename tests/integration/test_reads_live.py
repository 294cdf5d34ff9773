"""Reads never block the projector, and the projector never blocks reads.

Given a live cluster (a real nats-server, every service and the projector as OS processes)
with jobs arriving, when `gpuledger jobs`, `why`, `sql` and the UI's pages are read over and
over meanwhile, then every read answers, the projector logs no `projector.blocked` (readers go
through it: none opens its file), and after the last publish the projection's committed
sequence reaches the stream's last sequence.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuledger.projections.served import connect_served
from gpuledger.replay import live_player
from gpuledger.replay.scenario import load
from gpuledger.services.runtime.processes import ServiceProcesses
from tests.integration.cluster import EXAMPLES, ROOT, Processes, cli
from tests.integration.test_bad_messages import submit
from tests.waiting import eventually, eventually_async

pytestmark = pytest.mark.integration
THREE = EXAMPLES / "three-jobs.yaml"
ROUNDS = 8
PAGES = ("/cluster", "/queue", "/jobs", "/tenants")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def committed_seq(db: Path) -> int:
    con = connect_served(db)
    if con is None:
        return -1
    try:
        return con.execute("SELECT last_seq FROM projector_meta").fetchone()[0]
    finally:
        con.close()


def reads(db: Path, base: str, job: str) -> dict[str, int]:
    """One round of mixed reads: exit codes of the CLI, HTTP statuses of the UI's pages."""
    out = {
        "jobs": cli("jobs", "--db", str(db)).returncode,
        "why": cli("why", job, "--db", str(db)).returncode,
        "sql": cli("sql", "SELECT count(*) FROM events", "--db", str(db)).returncode,
    }
    for page in (*PAGES, f"/jobs/{job}"):
        out[page] = get(base + page)
    return out


async def test_mixed_reads_while_jobs_arrive_never_block_the_projector(
    server, bus, procs: Processes, tmp_path: Path
) -> None:
    scenario = load(THREE)
    nodes = [n.name for n in scenario.nodes]
    data = tmp_path / "data"
    db = data / "projection.duckdb"
    await live_player.publish_config(bus, scenario)
    procs.start_all(nodes)
    ServiceProcesses.start(procs, "projector", "--data", str(data))
    assert await live_player.wait_for_nodes(bus, nodes, 30), procs.logs()
    await eventually_async(lambda: committed_seq(db) > 0, 60, "the projector to serve reads")

    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "gpuledger.services.cli", "ui", "--data", str(data)]
        + ["--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: get(base + "/healthz") == 200, 60, "the UI to answer")
        answers = []
        for i in range(ROUNDS):
            await submit(bus, f"read-{i}")  # jobs keep arriving while we read
            answers.append(await asyncio.to_thread(reads, db, base, f"read-{max(0, i - 1)}"))
        last = (await bus.js.stream_info("GPULEDGER")).state.last_seq
        # after the last publish the projection reaches the stream (lag 0)
        await eventually_async(
            lambda: committed_seq(db) >= last, 30, f"the projection to reach seq {last}"
        )
        final = await asyncio.to_thread(reads, db, base, f"read-{ROUNDS - 1}")
    finally:
        ui.terminate()
        ui.wait(30)
    for a in answers:
        assert a["jobs"] == 0 and a["sql"] == 0, answers
        assert a["why"] in (0, 1), answers  # a job submitted a moment ago may not be folded
        assert all(a[p] == 200 for p in PAGES), answers
    assert set(final.values()) <= {0, 200}, final
    listed = json.loads(cli("jobs", "--db", str(db), "-o", "json").stdout)
    assert {f"read-{i}" for i in range(ROUNDS)} <= {j["job_id"] for j in listed}
    log = (tmp_path / "projector.log").read_text()
    assert "projector.blocked" not in log, log[-3000:]
    assert procs.procs["projector"].poll() is None, log[-3000:]
