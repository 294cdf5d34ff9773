"""`gpuledger up` as an operator runs it: one terminal runs the scheduler, another submits
jobs (finding the embedded NATS by itself) and reads them back with `jobs` and `why`."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.integration.cluster import EXAMPLES, ROOT, cli, start_up
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def test_up_then_submit_wait_jobs_and_a_clean_stop(tmp_path):
    up = start_up(
        tmp_path, "--config", str(EXAMPLES / "three-jobs.yaml"), level="warning", text=False
    )
    url_file = tmp_path / ".gpuledger" / "nats-url"
    try:
        eventually(url_file.exists, 30, "up to record its NATS URL", interval_s=0.2)
        (tmp_path / "job.yaml").write_text("id: first\ntenant: team-a\ngpus: 4\nduration: 1\n")
        (tmp_path / "bad.yaml").write_text("id: second\ntenant: team-z\ngpus: 1\n")
        ok = cli("submit", "job.yaml", "--wait", cwd=tmp_path)
        bad = cli("submit", "bad.yaml", "--wait", cwd=tmp_path)
        assert ok.returncode == 0 and "admitted first" in ok.stdout, ok.stderr
        assert bad.returncode == 1 and "UnknownTenant" in bad.stderr

        def jobs() -> dict | None:
            out = cli("jobs", "-o", "json", cwd=tmp_path)
            if out.returncode != 0:
                return None
            rows = {j["job_id"]: j["state"] for j in json.loads(out.stdout)}
            return rows if rows.get("first") == "completed" else None

        rows = eventually(jobs, 30, "first to complete", interval_s=0.5)
        assert rows == {"first": "completed", "second": "rejected"}
        why = cli("why", "second", cwd=tmp_path)
        assert why.returncode == 0 and "UnknownTenant" in why.stdout

        watcher = subprocess.Popen(
            [sys.executable, "-m", "gpuledger.services.cli", "jobs", "-w", "--interval", "0.3"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        seen: list[str] = []
        reader = threading.Thread(
            target=lambda: seen.extend(iter(watcher.stdout.readline, "")), daemon=True
        )
        reader.start()

        def watched_until(predicate, timeout_s: float = 30) -> bool:
            return eventually(lambda: predicate(list(seen)), timeout_s, "the watched table")

        # the first table is on screen before the third job exists (no fixed sleeps: a loaded
        # machine only makes this slower)
        assert watched_until(lambda lines: any(line.startswith("second") for line in lines))
        (tmp_path / "third.yaml").write_text("id: third\ntenant: team-a\ngpus: 2\nduration: 1\n")
        assert cli("submit", "third.yaml", "--wait", cwd=tmp_path).returncode == 0
        assert watched_until(
            lambda lines: any(
                line.startswith("third") and line.split()[3] == "completed" for line in lines
            )
        ), seen
        watcher.send_signal(signal.SIGINT)
        watcher.wait(10)
        reader.join(5)
        watched = "".join(seen)
        first_table, _, changes = watched.partition("second")
        assert "NAME" in first_table and "third" not in first_table
        assert [line.split()[3] for line in changes.splitlines() if line.startswith("third")][
            -1
        ] == "completed"
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(30)
    assert code == 0, up.stdout.read().decode()[-2000:]
    assert not url_file.exists()
