"""`gpuledger up` is never down for good: readers of the projection cannot stop the projector
(issue 11 cases 4 and 10), and `up --processes` supervises its children (case 5): relative
paths work from any directory, a child that cannot start fails `up` at once with its error,
a killed child is restarted and reported, and `gpuledger status` shows it all."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
from pathlib import Path

import duckdb
import pytest

from tests.integration.cluster import EXAMPLES, cli, start_up, status
from tests.waiting import eventually

pytestmark = pytest.mark.integration

JOB = "id: {id}\ntenant: team-a\ngpus: 2\nduration: 1\n"


def service(doc: dict, name: str) -> dict:
    return next(s for s in doc.get("services", []) if s["name"] == name)


wait_for = functools.partial(eventually, interval_s=0.3)


def all_running(cwd: Path) -> dict | None:
    doc = status(cwd)
    rows = doc.get("services", [])
    return doc if rows and all(s["state"] == "running" for s in rows) else None


def stop_up(up: subprocess.Popen) -> str:
    up.send_signal(signal.SIGTERM)
    out = up.communicate(timeout=60)[0]
    assert up.returncode == 0, out[-3000:]
    return out


def projection_seq(cwd: Path) -> int:
    out = cli("sql", "SELECT last_seq FROM projector_meta", "-f", "json", cwd=cwd)
    return json.loads(out.stdout)[0]["last_seq"] if out.returncode == 0 else -1


def test_readers_go_through_the_projector_and_never_block_it(tmp_path):
    """Case 10 and 4: while `up` runs, its projector holds the projection and serves reads: a
    process opening the file by hand is refused at once (naming the projector), CLI reads
    during projection answer through the projector, and it is never blocked nor restarted."""
    up = start_up(tmp_path, "--config", str(EXAMPLES / "three-jobs.yaml"))
    out = ""
    try:
        wait_for(lambda: all_running(tmp_path), 60, "every service running")
        db = tmp_path / ".gpuledger" / "projection.duckdb"
        wait_for(lambda: projection_seq(tmp_path) > 0, 30, "a first projection")
        with pytest.raises(duckdb.IOException, match=f"PID {up.pid}"):
            duckdb.connect(str(db), read_only=True)

        codes = []
        for i in range(6):
            (tmp_path / "job.yaml").write_text(JOB.format(id=f"read-{i}"))
            cli("submit", "job.yaml", cwd=tmp_path)
            for args in (
                ("jobs",),
                ("nodes",),
                ("why", f"read-{i}"),
                ("sql", "SELECT count(*) FROM events"),
            ):
                codes.append(cli(*args, cwd=tmp_path).returncode)
        assert set(codes) <= {0, 1}  # `why` may not see a job submitted a moment ago
        assert codes.count(0) >= len(codes) - 6
        doc = wait_for(lambda: _caught_up(tmp_path), 30, "the projection to catch up")
        assert service(doc, "projector")["restarts"] == 0
        listed = cli("jobs", "-o", "json", cwd=tmp_path)
        assert {f"read-{i}" for i in range(6)} <= {j["job_id"] for j in json.loads(listed.stdout)}
        assert "warning" not in listed.stderr
    finally:
        out = stop_up(up)
    assert '"projector.blocked"' not in out
    assert "service.crashed" not in out


def _caught_up(cwd: Path) -> dict | None:
    doc = status(cwd)
    row = service(doc, "projector") if doc else None
    if not row or row["state"] != "running" or doc["stream_last_seq"] is None:
        return None
    return doc if projection_seq(cwd) >= doc["stream_last_seq"] else None


def test_up_processes_with_a_relative_config_restarts_a_killed_child(tmp_path):
    """Case 5: relative --config from another directory works; a SIGKILLed child is restarted,
    reported in one line, and `gpuledger status` shows restarts=1 and the last error."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "cluster.yaml").write_text((EXAMPLES / "three-jobs.yaml").read_text())
    up = start_up(tmp_path, "--processes", "--config", "conf/cluster.yaml")
    out = ""
    try:
        doc = wait_for(lambda: all_running(tmp_path), 90, "every child running")
        assert {s["name"] for s in doc["services"]} >= {"scheduler", "projector", "n1", "n2"}
        table = cli("status", cwd=tmp_path)
        assert table.returncode == 0
        assert table.stdout.splitlines()[0].split() == [
            "NAME",
            "STATE",
            "PID",
            "RESTARTS",
            "SEQ",
            "LAG",
            "IDLE",
            "AGE",
            "LEASE",
            "LAST-ERROR",
        ]

        victim = service(doc, "scheduler")["pid"]
        os.kill(victim, signal.SIGKILL)
        doc = wait_for(lambda: _restarted(tmp_path, "scheduler"), 30, "the scheduler's restart")
        row = service(doc, "scheduler")
        assert (row["restarts"], row["last_error"]) == (1, "killed by SIGKILL")
        assert row["pid"] != victim
        table = cli("status", cwd=tmp_path).stdout
        line = next(x for x in table.splitlines() if x.startswith("scheduler"))
        assert line.split()[1:2] + line.split()[3:4] == ["running", "1"]
        assert line.endswith("killed by SIGKILL")

        # the restarted scheduler places work again
        (tmp_path / "job.yaml").write_text(JOB.format(id="after-restart"))
        assert cli("submit", "job.yaml", "--wait", cwd=tmp_path).returncode == 0
        wait_for(
            lambda: _job_state(tmp_path, "after-restart") == "completed", 60, "the job to complete"
        )
    finally:
        out = stop_up(up)
    crashes = [json.loads(x) for x in out.splitlines() if '"service.crashed"' in x]
    assert [(c["service"], c["exit"], c["restart"]) for c in crashes] == [
        ("scheduler", "killed by SIGKILL", 1)
    ]


def _restarted(cwd: Path, name: str) -> dict | None:
    doc = status(cwd)
    row = service(doc, name) if doc else None
    return doc if row and row["restarts"] == 1 and row["state"] == "running" else None


def _job_state(cwd: Path, job: str) -> str | None:
    out = cli("jobs", "-o", "json", cwd=cwd)
    if out.returncode != 0:
        return None
    return {j["job_id"]: j["state"] for j in json.loads(out.stdout)}.get(job)


def test_up_processes_fails_fast_with_the_childs_error(tmp_path):
    """Case 5: a child that cannot start makes `up` exit non-zero at once, with one line
    naming the child and its own error (here: the projection file is not a database)."""
    data = tmp_path / ".gpuledger"
    data.mkdir()
    (data / "projection.duckdb").write_text("not a database\n")
    up = start_up(tmp_path, "--processes", "--config", str(EXAMPLES / "three-jobs.yaml"))
    out = up.communicate(timeout=90)[0]
    assert up.returncode == 1
    errors = [x for x in out.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, out[-3000:]
    assert errors[0].startswith(
        "error: gpuledger up: projector failed to start: exited with code 1: "
    )
    assert "not a valid DuckDB database file" in errors[0]
    doc = json.loads((data / "status.json").read_text())
    assert not any(_alive(s["pid"]) for s in doc["services"] if s["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
