"""Test-wide settings: in CI (CI=true) hypothesis runs derandomized, so a run is
reproducible and a red build always reproduces; locally it keeps exploring new examples.

Two more profiles (`--hypothesis-profile=NAME`; counts per property in
tests/properties/profiles.py): `deep` runs at least 2,000 examples of every property with
a random seed; `ci-random` is the time-boxed randomized pass `.ci/run` runs after the main
suite, with the seed printed (`--hypothesis-seed`). Failures print the reproducing blob.

Tests clean up after themselves (issue 30): the run gets a temporary directory of its own
(`TMPDIR`, inherited by xdist workers and every process a test starts; pytest's own `tmp_path`
stays where it was), and when the run ends, a `gpuledger-*` file or directory left in it, or a
nats-server still running from it, fails the run with one line per leftover (the server is
killed, the leftovers removed). Key seeds in a leaked `gpuledger-auth-*` are what this is for.

Tests marked `long` (a minute or more) and `slurm` (they share one real Slurm cluster) run
first: xdist hands out tests in collection order, so a long test collected late would end the
run alone on one worker while the others idle."""

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile(
    "deep",
    max_examples=2000,
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci-random", derandomize=False, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

_RUN_TMP = "GPULEDGER_TEST_TMPDIR"


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller's directory
        base = os.environ.get(_RUN_TMP)
    else:
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
        base = tempfile.mkdtemp(prefix="gl-test-run-")
        os.environ[_RUN_TMP] = base
        config._gpuledger_run_tmp = base
    if base:
        os.environ["TMPDIR"] = base
        tempfile.tempdir = base


START_FIRST = ("long", "slurm")
"""Markers of the tests moved to the front of the collection, in this order."""


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        first = (i for i, name in enumerate(START_FIRST) if item.get_closest_marker(name))
        return next(first, len(START_FIRST))

    items.sort(key=rank)  # stable: the order within each rank is pytest's


def _servers_from(base: str) -> list[int]:
    """Pids of nats-server processes whose command line names a path under `base`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"nats-server") and any(base.encode() in a for a in argv):
            found.append(int(proc.name))
    return found


def leftovers(base: str) -> list[str]:
    """What the run left behind under `base`: one line each."""
    out = [f"nats-server pid {pid} still running" for pid in _servers_from(base)]
    out += [
        f"{entry} left in the temporary directory"
        for entry in sorted(Path(base).glob("gpuledger-*"))
    ]
    return out


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    base = getattr(session.config, "_gpuledger_run_tmp", None)
    if base is None:
        return
    left = leftovers(base)
    for pid in _servers_from(base):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(base, ignore_errors=True)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
        for line in left:
            msg = f"LEAK: a test left {line}"
            if reporter is not None:
                reporter.write_line(msg, red=True)
            else:
                print(msg)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
