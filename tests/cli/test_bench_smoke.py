"""CI smoke runs of every `gpuledger bench` subcommand at small sizes (seconds each).

Each writes its JSON (`--json`), which carries the machine; the tests check that every bench
runs to the end and reports what it measured (positive rates, the goals it compares them
with), never how fast it was: a speed depends on the machine and its load, and belongs to the
bench's own JSON (`goals_met`) and docs/benchmarks.md, not to a pass/fail of the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPENB = ROOT / "tests" / "fixtures" / "openb"


def bench(tmp_path: Path, *args: str, timeout: float = 300) -> dict:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", "bench", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    first = data[0] if isinstance(data, list) else data
    assert first["machine"]["cores"] >= 1 and first["machine"]["python"]
    return data


def test_replay_smoke(tmp_path):
    r = bench(tmp_path, "replay", "--trace", str(OPENB), "--runs", "1")
    assert r["events"] > 5000 and r["deterministic"]
    assert r["events_per_s"]["median"] > 0
    # the whole `gpuledger replay` command, timed as a user meets it: the report carries the
    # figure (min/median/max), the bench judges it, not the suite
    assert {"min", "median", "max"} <= set(r["command"]["seconds"])
    assert {"min", "median", "max"} <= set(r["command"]["events_per_s"])


def test_replay_smoke_with_a_baseline(tmp_path):
    # this checkout against itself: the ratio is measured in the same run, output identical
    r = bench(
        tmp_path, "replay", "--trace", str(OPENB), "--runs", "1", "--baseline", sys.executable
    )
    assert r["baseline"]["same_output"] and r["baseline"]["ratio_median"] > 0
    assert {"min", "median", "max"} <= set(r["baseline"]["command_ratio"])


def test_fleet_smoke(tmp_path):
    r = bench(tmp_path, "fleet", "--nodes", "40", "--jobs", "400", "--policy", "default")
    assert r["results"][0]["decisions_per_s"] > 0


def test_openb_smoke(tmp_path):
    r = bench(
        tmp_path,
        "openb",
        "--trace",
        str(OPENB),
        "--policy",
        "default",
        "--seeds",
        "42",
        "--workers",
        "1",
    )
    assert r["placements"] > 0 and r["placements_per_s"] > 0


def test_projector_smoke(tmp_path):
    r = bench(tmp_path, "projector", "--events", "5000", "--rebuild", "5000")
    assert r["sustained_events_per_s"] > 0 and r["rebuild_events_per_s"] > 0
    assert 0 < r["peak_rss_mb"] < 2_000


@pytest.mark.integration
def test_latency_smoke_with_a_profile(tmp_path):
    r = bench(
        tmp_path,
        "latency",
        "--rate",
        "50",
        "--duration",
        "2",
        "--burst",
        "200",
        "--nodes",
        "20",
        "--timeout",
        "240",
        "--profile",
        str(tmp_path / "prof"),
    )
    assert r["placed"] == r["submitted"] and r["burst_placed"] == 200
    assert r["p99_ms"] > 0 and r["drain_per_s"] > 0
    assert r["goals"] == {"p99_ms": 20.0, "drain_per_s": 2_000.0}
    assert r["goals_met"]["p99_ms"] == (r["p99_ms"] <= 20)
    assert r["goals_met"]["drain_per_s"] == (r["drain_per_s"] >= 2_000)
    assert sorted(p.name for p in (tmp_path / "prof").glob("*.prof"))


@pytest.mark.integration
def test_latency_past_its_time_bound_stops_with_exit_4_and_leaves_no_process(tmp_path):
    # Given a run that cannot end within its bound (60 s of steady load, 6 s allowed)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its services' files live under tmp_path
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuledger.services.cli",
            "bench",
            "latency",
            "--rate",
            "20",
            "--duration",
            "60",
            "--burst",
            "10",
            "--nodes",
            "5",
            "--timeout",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    # Then it stops at the bound with one line, and has stopped its nats-server and services
    assert done.returncode == 4, done.stderr[-3000:]
    assert (
        done.stderr.strip().splitlines()[-1] == "error: the latency bench timed out (see --timeout)"
    )
    left = [p for p in Path("/proc").glob("[0-9]*") if str(tmp_path) in _cmdline(p)]
    assert left == []


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone meanwhile, or not ours to read
        return ""


@pytest.mark.integration
def test_restart_smoke(tmp_path):
    r = bench(tmp_path, "restart", "--events", "2000")
    assert r["machine"]["cores"] >= 1


def test_projector_smoke_with_a_baseline(tmp_path):
    # this checkout against itself, each run in a fresh process: the ratios come back
    r = bench(
        tmp_path, "projector", "--events", "5000", "--rebuild", "5000", "--baseline", sys.executable
    )
    assert len(r["runs"]) == 1 and len(r["baseline"]["runs"]) == 1
    assert r["baseline"]["sustained_events_per_s"]["ratio_median"] > 0
    assert r["baseline"]["peak_rss_mb"]["baseline_median"] > 0


def test_arrays_smoke(tmp_path):
    # given one tenant's 3 arrays of 500 tasks beside 3 jobs of another (limits lifted)
    r = bench(tmp_path, "arrays", "--tasks", "500", "--others", "3")
    runs = {x["label"]: x for x in r["runs"]}
    assert [x["label"] for x in r["runs"]] == ["idle", "small", "flood"]
    # then the other tenant's jobs are all placed in every run, at once (no borrowing)
    assert {x["other_placed"] for x in runs.values()} == {3}
    assert runs["flood"]["other_sim_p99_s"] == runs["idle"]["other_sim_p99_s"] == 0
    # and the fold holds a window of the 1,500 tasks, not a record each
    assert runs["flood"]["tasks_queued"] == 1500
    assert runs["flood"]["max_job_records"] < 3 + 3 + 3 * 2 * 32
    assert set(r["ratios"]["flood"]) == {"other_sim_p99", "other_wall_p99", "rss", "job_records"}
