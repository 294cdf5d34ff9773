"""Sweeps on Dask: a real `distributed.LocalCluster` (a scheduler and two worker processes on
127.0.0.1) runs the variants; the decision logs are byte-for-byte those of the in-process run
(same sha256), and a worker killed mid-task loses nothing: its task runs again elsewhere and
gives the same log."""

from __future__ import annotations

import json
import os
import signal
import threading
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.replay.logio import read_log
from gpuledger.replay.sweep.executors import DaskExecutor, InProcess, local_cluster
from gpuledger.replay.sweep.run import run_sweep
from gpuledger.replay.sweep.spec import load
from gpuledger.replay.sweep.task import run_variant
from gpuledger.replay.whatif import external_inputs
from gpuledger.services.cli.main import app
from tests.replay.test_sweep import SWEEP
from tests.waiting import eventually

pytestmark = pytest.mark.dask


@pytest.fixture(scope="module")
def cluster():
    """An existing Dask cluster, as a platform team runs one: we reach it by its address."""
    with local_cluster(2) as c:
        yield c


def worker_pids(executor) -> set[int]:
    """The process ids of the cluster's live workers, as they answer now."""
    return set(executor.client.run(os.getpid).values())


def digests(result) -> dict[str, str]:
    return {r.label: r.sha256 for r in result.results}


def test_every_executor_gives_byte_identical_decision_logs(demo_log, cluster, tmp_path):
    inputs = external_inputs(read_log(demo_log))
    variants = load(SWEEP)
    here = run_sweep(inputs, variants, InProcess())
    remote = DaskExecutor(scheduler=cluster.scheduler_address)
    try:
        there = run_sweep(inputs, variants, remote)
    finally:
        remote.close()
    assert there.failed == [] and len(there.results) == 5
    assert digests(there) == digests(here)
    workers = {r.worker for r in there.results}
    assert f"pid {os.getpid()}" not in workers  # ran in the cluster's worker processes


def test_whatif_workers_2_starts_a_local_cluster_and_reports_the_same_sweep(demo_log, tmp_path):
    reports = {}
    for workers in (1, 2):
        js = tmp_path / f"w{workers}.json"
        r = CliRunner().invoke(
            app,
            [
                "whatif", str(demo_log), "--sweep", str(SWEEP), "--workers", str(workers),
                "--rank", "wait_p99:latency-critical", "--out", str(tmp_path / "r.html"),
                "--json", str(js),
            ],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        reports[workers] = json.loads(js.read_text())
    assert reports[2]["executor"] == "dask LocalCluster (2 worker processes)"
    assert reports[2]["ranking"] == reports[1]["ranking"]
    assert {k: v["sha256"] for k, v in reports[2]["variants"].items()} == {
        k: v["sha256"] for k, v in reports[1]["variants"].items()
    }


def held(inputs, variant, keep_log=False, *, gate: str):
    """`run_variant`, held at its start until the test opens the gate: the first attempt of
    `fgd/g2` writes its worker's pid, so the test can kill that worker mid-task."""
    gate_dir = Path(gate)
    if variant.label == "fgd/g2" and not (gate_dir / "open").exists():
        (gate_dir / "pid").write_text(str(os.getpid()))
        eventually(
            lambda: (gate_dir / "open").exists(), timeout_s=600, what="the test to open the gate"
        )
    return run_variant(inputs, variant, keep_log)


def test_a_worker_killed_mid_task_loses_nothing(demo_log, cluster, tmp_path):
    inputs = external_inputs(read_log(demo_log))
    variants = load(SWEEP)
    expected = digests(run_sweep(inputs, variants, InProcess()))
    executor = DaskExecutor(scheduler=cluster.scheduler_address)
    box = {}

    def sweep():
        box["result"] = run_sweep(
            inputs, variants, executor, task=partial(held, gate=str(tmp_path))
        )

    runner = threading.Thread(target=sweep)
    runner.start()
    try:
        pid = int(
            eventually(
                lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(),
                what="the held task to start",
            )
        )
        os.kill(pid, signal.SIGKILL)  # the worker process dies with the task on it
        eventually(
            lambda: worker_pids(executor) and pid not in worker_pids(executor),
            what="the cluster to replace the killed worker",
            ignoring=(OSError,),
        )
        (tmp_path / "open").touch()
        runner.join(timeout=600)
    finally:
        (tmp_path / "open").touch()
        runner.join(timeout=600)
        executor.close()
    result = box["result"]
    assert result.failed == []
    assert digests(result) == expected
    assert next(r for r in result.results if r.label == "fgd/g2").worker != f"pid {pid}"


def test_an_unreachable_scheduler_is_one_line_and_exit_3(demo_log, tmp_path):
    r = CliRunner().invoke(
        app,
        ["whatif", str(demo_log), "--sweep", str(SWEEP), "--scheduler", "tcp://127.0.0.1:1",
         "--out", str(tmp_path / "r.html")],
    )  # fmt: skip
    assert r.exit_code == 3
    # the command's own output is one line; the runner also catches this process's log
    # records (another test's Dask cluster in the same worker logs as structlog JSON)
    lines = [ln for ln in r.output.strip().splitlines() if not ln.startswith('{"event"')]
    assert len(lines) == 1, r.output  # however Dask words it (its text spans lines under load)
    (line,) = lines
    assert line.startswith("error: cannot reach the Dask scheduler tcp://127.0.0.1:1: ")
    assert not (tmp_path / "r.html").exists()


def _pid(_shared) -> int:
    return os.getpid()


def _count(shared) -> int:
    return len(shared)


def test_the_shared_inputs_survive_the_death_of_the_only_worker_holding_them():
    # given a one-worker cluster whose only worker holds the shared inputs
    executor = DaskExecutor(workers=1)
    try:
        shared = executor.share(list(range(1_000)))
        executor.submit("where", _pid, shared)
        (where,) = list(executor.as_completed())
        # when that worker dies and its nanny starts a new, empty one
        os.kill(where.value, signal.SIGKILL)
        eventually(
            lambda: worker_pids(executor) - {where.value},
            what="a fresh worker in place of the killed one",
            ignoring=(OSError,),
        )
        executor.submit("count", _count, shared)
        (count,) = list(executor.as_completed())
    finally:
        executor.close()
    # then the inputs are computed again, not lost: the task reads all of them
    assert (count.error, count.value) == (None, 1_000)
