"""Packages: the repository's top-level folders install under the `gpuledger` namespace.

`events/`, `services/`, `replay/` and `projections/` become `gpuledger.events`, ... (there is
no `gpuledger/__init__.py`: `gpuledger` is a PEP 420 namespace). Everything else about the
project is in pyproject.toml."""

from setuptools import find_packages, setup

TOP = ("events", "services", "replay", "projections")

setup(
    packages=[f"gpuledger.{p}" for p in find_packages(include=[*TOP, *(f"{t}.*" for t in TOP)])],
    package_dir={f"gpuledger.{t}": t for t in TOP},
)
