"""A build of the package ships the Python sources only: an extension module that a build of
an older checkout (the removed Cython build) left in the build directory is not put into the
wheel, where it would shadow its source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_build_drops_the_extension_modules_an_older_build_left(tmp_path):
    # Given a build directory in which an older, compiled build left an extension module
    lib = tmp_path / "lib"
    stale = lib / "gpuledger" / "services" / "placement" / "fleet.cpython-311-x86_64-linux-gnu.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\x7fELF")
    kept = lib / "gpuledger" / "services" / "placement" / "notes.txt"
    kept.write_text("not a module")
    # When a build copies the sources there
    done = subprocess.run(
        [sys.executable, "setup.py", "build_py", "--build-lib", str(lib)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    # Then the wheel-to-be holds fleet.py and no stale extension to shadow it
    assert done.returncode == 0, done.stderr[-2000:]
    assert (lib / "gpuledger" / "services" / "placement" / "fleet.py").exists()
    assert not stale.exists() and kept.exists()
