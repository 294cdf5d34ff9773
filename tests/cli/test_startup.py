"""Issue 32: the command line starts without importing what the command does not use.

Given the installed command line, when `gpuledger --version`, `gpuledger --help` or
`gpuledger jobs` runs in a fresh interpreter, then the modules it imported (read from
`sys.modules` as the process exits) hold nothing heavy: `--version` not even typer, the
command tree no database, dataframe, plotting, web or NATS library, and `jobs` only duckdb
(no pyarrow, numpy, the projector's writer or the scheduler's model). The import graph is the
specification; how long it takes is measured by `gpuledger bench cli`, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuledger.projections.store import rebuild
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.entry import LIGHT, light_app

ROOT = Path(__file__).resolve().parents[2]

HEAVY = (
    "duckdb",
    "pyarrow",
    "numpy",
    "pandas",
    "matplotlib",
    "starlette",
    "uvicorn",
    "jinja2",
    "nats",
    "structlog",
    "prometheus_client",
)
"""Third-party libraries no command loads before it runs (each costs tens of ms or more)."""
OWN_HEAVY = (
    "gpuledger.projections.store",  # the projector's writer (pyarrow)
    "gpuledger.projections.mappers",
    "gpuledger.services.domain.fold.ledger",  # the scheduler's model
    "gpuledger.services.placement",
    "gpuledger.services.runtime.supervisor",
    "gpuledger.services.runtime.bus",
)


def modules_after(*argv: str) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules a fresh interpreter holds when `gpuledger ARGV` exits, and its result."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules))))\n"
        f"sys.argv = ['gpuledger', *{list(argv)!r}]\n"
        "from gpuledger.services.cli.entry import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    head, sep, listed = done.stderr.rpartition("\nMODULES ")
    assert sep, done.stderr
    return set(json.loads(listed)), done


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


def test_version_is_answered_before_typer_or_any_command_is_imported():
    modules, done = modules_after("--version")
    assert done.returncode == 0 and done.stdout.startswith("gpuledger "), done.stderr
    assert loaded(modules, ("typer", "click", "rich", "msgspec", "yaml", "asyncio")) == []
    ours = {m for m in modules if m.startswith("gpuledger.")}
    assert ours == {
        "gpuledger.services",
        "gpuledger.services.cli",
        "gpuledger.services.cli.entry",
        "gpuledger.services.cli.version",
    }


def test_the_command_tree_imports_nothing_heavy():
    modules, done = modules_after("--help")
    assert done.returncode == 0 and "jobs" in done.stdout, done.stderr
    assert loaded(modules, HEAVY) == []
    assert loaded(modules, OWN_HEAVY) == []
    assert loaded(modules, ("gpuledger.events", "yaml", "asyncio")) == []


@pytest.fixture(scope="module")
def projection(tmp_path_factory) -> Path:
    """examples/three-jobs.yaml simulated and projected."""
    sim = simulate(load(ROOT / "examples" / "three-jobs.yaml"))
    db = tmp_path_factory.mktemp("startup") / "projection.duckdb"
    rebuild(sim.log, db)
    return db


def test_jobs_imports_duckdb_and_the_read_side_only(projection):
    modules, done = modules_after("jobs", "--db", str(projection))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) > 1  # the header and the scenario's jobs
    assert loaded(modules, HEAVY) == ["duckdb"]
    assert loaded(modules, OWN_HEAVY) == []
    assert "gpuledger.projections.reading" in modules
    # started as a one-command app (entry.LIGHT): the rest of the tree is not even imported
    assert loaded(modules, ("gpuledger.services.cli.main", "gpuledger.services.cli.up")) == []


def test_jobs_through_a_running_projector_imports_no_database_library(tmp_path):
    from gpuledger.projections.serving import ReadServer
    from gpuledger.projections.store import Projector

    sim = simulate(load(ROOT / "examples" / "three-jobs.yaml"))
    db = tmp_path / "projection.duckdb"
    with Projector(db) as pj:
        pj.run(sim.log)
        server = ReadServer(pj.store.con, db).start()
        try:
            modules, done = modules_after("jobs", "--db", str(db))
        finally:
            server.close()
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) > 1
    assert loaded(modules, HEAVY) == []
    assert loaded(modules, OWN_HEAVY) == []
    assert "gpuledger.projections.served" in modules
    assert "gpuledger.projections.reading" not in modules


@pytest.mark.parametrize("name", sorted(LIGHT))
def test_a_light_command_is_the_same_command_as_in_the_tree(name):
    import typer

    from gpuledger.services.cli.main import app

    def shape(cmd) -> list[tuple]:
        return [
            (p.name, tuple(p.opts), p.default, p.required, getattr(p, "help", None))
            for p in cmd.params
        ]

    full = typer.main.get_command(app).commands[name]
    light = typer.main.get_command(light_app(name)).commands[name]
    assert light.callback is not None and shape(light) == shape(full)
    assert light.help == full.help


def test_bench_cli_reports_the_two_start_up_figures_next_to_the_interpreter(projection):
    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", "bench", "cli", "--runs", "1"]
        + ["--db", str(projection), "--large-jobs", "0", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a goal missed on a busy machine
    result = json.loads(done.stdout)
    assert set(result["median_s"]) == {"python", "version", "jobs"}
    assert result["goal_s"] == {"version": 0.150, "jobs": 0.300}
    assert result["exit_codes"] == {"python": [0], "version": [0], "jobs": [0]}
    assert done.returncode == (0 if all(result["within_goal"].values()) else 1)


def test_what_a_ci_step_runs_imports_no_database_dataframe_plot_or_web_library():
    # submit, status JOB, cancel, scale: the command tree plus the client side of the bus
    code = (
        "import json, sys\n"
        "import gpuledger.services.cli.main\n"
        "from gpuledger.services.domain.inputs.jobfile import job_spec\n"
        "from gpuledger.services.domain.tooling.stamp import submission\n"
        "from gpuledger.services.runtime import client_requests, bus, auth\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout))
    assert "nats" in modules  # it does talk to NATS
    assert loaded(modules, tuple(m for m in HEAVY if m not in ("nats", "structlog"))) == []
    # no projector, no scheduler state (job files are checked against the placement model)
    assert loaded(modules, OWN_HEAVY[:3]) == []
