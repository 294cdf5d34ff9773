"""Packages: the repository's top-level folders install under the `gpuledger` namespace.

`events/`, `services/`, `replay/` and `projections/` become `gpuledger.events`, ... (there is
no `gpuledger/__init__.py`: `gpuledger` is a PEP 420 namespace). Everything else about the
project is in pyproject.toml.

The compiled build: with ``GPULEDGER_COMPILE=1`` (0 or unset: pure Python), a regular install
also compiles the modules of the deciding and folding hot path (`COMPILED`), their Python
source unchanged, with Cython into extension modules that are imported instead of their
``.py`` (which the wheel still holds). An editable install is refused with the flag: its
extension modules would sit beside the sources and shadow every later edit of them."""

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

TOP = ("events", "services", "replay", "projections")

COMPILED = (
    "events/ids.py",
    "events/subjects.py",
    "replay/simulator.py",
    "services/admission/decider.py",
    "services/domain/fold/aggregate.py",
    "services/domain/fold/allocations.py",
    "services/domain/fold/arrays.py",
    "services/domain/fold/intake.py",
    "services/domain/fold/jobs.py",
    "services/domain/fold/keys.py",
    "services/domain/fold/ledger.py",
    "services/domain/fold/members.py",
    "services/domain/fold/mig.py",
    "services/domain/fold/nodes.py",
    "services/domain/fold/queue.py",
    "services/domain/fold/records.py",
    "services/domain/fold/replicas.py",
    "services/domain/fold/resize.py",
    "services/domain/fold/tenants.py",
    "services/domain/fold/timeindex.py",
    "services/domain/policy/queue.py",
    "services/domain/policy/quota.py",
    "services/domain/policy/shapes.py",
    "services/domain/tooling/deciding.py",
    "services/domain/tooling/placement_adapter.py",
    "services/domain/tooling/stamp.py",
    "services/node_agent/simulated.py",
    "services/placement/default.py",
    "services/placement/feasibility.py",
    "services/placement/fleet.py",
    "services/placement/fragmentation.py",
    "services/placement/index.py",
    "services/placement/memo.py",
    "services/placement/search.py",
    "services/placement/scorers.py",
    "services/placement/state.py",
    "services/placement/trial.py",
    "services/preemption/decider.py",
    "services/quota/decider.py",
    "services/scheduler/decider.py",
    "services/scheduler/phase.py",
    "services/scheduler/phases/endings.py",
    "services/scheduler/phases/grow.py",
    "services/scheduler/phases/lost_nodes.py",
    "services/scheduler/phases/place.py",
    "services/scheduler/phases/settle.py",
    "services/scheduler/phases/start_timeout.py",
    "services/scheduler/phases/time_limits.py",
    "services/scheduler/reservation.py",
    "services/scheduler/round.py",
    "services/scheduler/stage.py",
    "services/scheduler/stages/array_cap.py",
    "services/scheduler/stages/dependencies.py",
    "services/scheduler/stages/mig_layout.py",
    "services/scheduler/stages/model_guarantee.py",
    "services/scheduler/stages/model_limits.py",
    "services/scheduler/stages/nominations.py",
    "services/scheduler/stages/quota.py",
    "services/scheduler/stages/regeometry.py",
    "services/scheduler/stages/releasing.py",
    "services/scheduler/stages/reservation.py",
    "services/scheduler/stages/reserve.py",
    "services/scheduler/stages/spread.py",
)
"""Sources (repository paths) of the compiled build: what `gpuledger bench replay` spends its
time in. Python semantics are kept (`annotation_typing` off: annotations are not checked as
C types, so a msgspec Struct class still passes where `type` is annotated)."""

COMPILE_ENV = "GPULEDGER_COMPILE"


class BuildCompiled(build_ext):
    """`build_ext` that turns the `COMPILED` sources into C with Cython first (a build
    requirement, pyproject.toml), and refuses to put extension modules into the source tree."""

    def finalize_options(self) -> None:
        modules = self.distribution.ext_modules
        if modules:
            if self.inplace or self.editable_mode:
                raise SystemExit(
                    f"{COMPILE_ENV}=1 compiles a regular install only (pip install .): in an "
                    "editable one the compiled modules would shadow later edits of their sources"
                )
            from Cython.Build import cythonize

            cores = os.cpu_count() or 1
            modules[:] = cythonize(
                modules,
                build_dir="build/cython",
                quiet=True,
                nthreads=cores,
                compiler_directives={"language_level": 3, "annotation_typing": False},
            )
            self.parallel = self.parallel or cores
        super().finalize_options()


class BuildPy(build_py):
    """`build_py` that also deletes the extension modules an earlier build left in the build
    directory and this one does not make (pip builds in the source tree's `build/`): after a
    compiled build, a pure one would otherwise put them into its wheel, where they would
    shadow their sources (so would a module dropped from `COMPILED`)."""

    def run(self) -> None:
        super().run()
        made = {ext.name for ext in self.distribution.ext_modules or ()}
        for path in sorted(Path(self.build_lib).rglob("*")):
            if path.name.endswith(tuple(EXTENSION_SUFFIXES)):
                rel = path.relative_to(self.build_lib)
                if ".".join((*rel.parent.parts, path.name.split(".")[0])) not in made:
                    path.unlink()


compile_flag = os.environ.get(COMPILE_ENV, "")
if compile_flag not in ("", "0", "1"):
    raise SystemExit(f"{COMPILE_ENV}={compile_flag!r}: expected 1 (compile) or 0 (pure Python)")
compile_requested = compile_flag == "1"

setup(
    packages=[f"gpuledger.{p}" for p in find_packages(include=[*TOP, *(f"{t}.*" for t in TOP)])],
    package_dir={f"gpuledger.{t}": t for t in TOP},
    ext_modules=[Extension("gpuledger." + path[:-3].replace("/", "."), [path]) for path in COMPILED]
    if compile_requested
    else [],
    cmdclass={"build_ext": BuildCompiled, "build_py": BuildPy},
)
