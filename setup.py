"""Packages: the repository's top-level folders install under the `gpuledger` namespace.

`events/`, `services/`, `replay/` and `projections/` become `gpuledger.events`, ... (there is
no `gpuledger/__init__.py`: `gpuledger` is a PEP 420 namespace). Everything else about the
project is in pyproject.toml. The install is pure Python (a Cython build of the deciding path
was removed: in paired runs it was no faster, docs/benchmarks.md)."""

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

TOP = ("events", "services", "replay", "projections")


class BuildPy(build_py):
    """`build_py` that deletes the extension modules a build of an older checkout (the removed
    compiled build) left in the build directory (pip builds in the source tree's `build/`):
    they would go into the wheel and shadow their sources."""

    def run(self) -> None:
        super().run()
        for path in sorted(Path(self.build_lib).rglob("*")):
            if path.name.endswith(tuple(EXTENSION_SUFFIXES)):
                path.unlink()


setup(
    packages=[f"gpuledger.{p}" for p in find_packages(include=[*TOP, *(f"{t}.*" for t in TOP)])],
    package_dir={f"gpuledger.{t}": t for t in TOP},
    cmdclass={"build_py": BuildPy},
)
