"""The compiled build (setup.py, ``GPULEDGER_COMPILE=1``): what it compiles and what it
refuses. Compiling needs Cython and a C compiler, which CI does not install; the replay's
sha256 (`gpuledger bench replay --baseline`) compares a compiled build with the pure one."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from gpuledger.replay.bench.info import compiled_modules, machine

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "services", "replay", "projections")


def _compiled_sources() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "COMPILED" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no COMPILED")


def _setup(*args: str, flag: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEDGER_COMPILE": flag}
    return subprocess.run(
        [sys.executable, "setup.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_compiled_sources_are_synchronous_modules_of_the_package():
    sources = _compiled_sources()
    assert "services/placement/fleet.py" in sources and "services/domain/fold/ledger.py" in sources
    for path in sources:
        text = (ROOT / path).read_text()
        assert path.split("/")[0] in PACKAGES, path
        # asyncio's introspection of coroutine functions is not relied on in compiled code
        assert not any(isinstance(n, ast.AsyncFunctionDef) for n in ast.walk(ast.parse(text))), path


def test_an_unknown_value_of_the_flag_is_refused_in_one_line():
    done = _setup("--name", flag="yes")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "GPULEDGER_COMPILE='yes': expected 1 (compile) or 0 (pure Python)"
    )


def _built_files() -> list[Path]:
    return sorted(
        p for top in PACKAGES for p in (ROOT / top).rglob("*") if p.suffix in (".c", ".so")
    )


def test_compiling_into_the_source_tree_is_refused_before_anything_is_written():
    before = _built_files()
    done = _setup("build_ext", "--inplace", flag="1")
    assert done.returncode != 0
    assert "compiles a regular install only (pip install .)" in done.stderr
    assert _built_files() == before


def test_without_the_flag_nothing_is_compiled_and_the_benchmarks_say_so():
    assert _setup("--name", flag="0").stdout.strip() == "gpuledger"
    assert compiled_modules() == []  # the suite runs on the editable, pure-Python install
    assert machine()["compiled_modules"] == 0


def test_a_pure_build_drops_the_compiled_modules_an_earlier_build_left(tmp_path):
    # Given a build directory in which a compiled build left extension modules
    lib = tmp_path / "lib"
    stale = lib / "gpuledger" / "services" / "placement" / "fleet.cpython-311-x86_64-linux-gnu.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\x7fELF")
    kept = lib / "gpuledger" / "services" / "placement" / "notes.txt"
    kept.write_text("not a module")
    # When a pure build copies the sources there
    done = _setup("build_py", "--build-lib", str(lib), flag="0")
    # Then the wheel-to-be holds fleet.py and no stale fleet extension to shadow it
    assert done.returncode == 0, done.stderr[-2000:]
    assert (lib / "gpuledger" / "services" / "placement" / "fleet.py").exists()
    assert not stale.exists() and kept.exists()
