"""`slurm_dump`: a real Slurm cluster runs the workload once per test session and exports it.

Under pytest-xdist every worker asks for the dump; the first one (holding an flock on a file in
the session's shared temporary directory) starts the cluster, runs the workload, exports and
stops every daemon; the others wait on the lock and read the files it wrote. A machine that
cannot run the harness skips with `RealSlurm.unavailable()`'s reason.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.slurm.realslurm import RealSlurm
from tests.slurm.workload import export, run_workload

COMMITTED = Path(__file__).parents[1] / "fixtures" / "slurm-real"


@dataclass(frozen=True)
class SlurmDump:
    dir: Path
    jobs: dict[str, str]  # job id by workload name (an array: its base id)
    version: str
    live: bool  # written by this session's cluster (else the committed dump)

    @property
    def sacct(self) -> Path:
        return self.dir / "sacct.txt"

    @property
    def sinfo(self) -> Path:
        return self.dir / "sinfo.txt"


@pytest.fixture(scope="session")
def real_slurm() -> Iterator[RealSlurm]:
    """A started cluster for this session (this worker); every daemon stopped at the end."""
    reason = RealSlurm.unavailable()
    if reason:
        pytest.skip(reason)
    with RealSlurm() as s:
        yield s


@pytest.fixture(scope="session")
def slurm_dump(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> SlurmDump:
    reason = RealSlurm.unavailable()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    out = shared / "slurm-real-dump"
    meta = out / "dump.json"
    failed = shared / "slurm-real-dump.failed"
    with open(shared / "slurm-real-dump.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            pytest.fail(f"the real Slurm workload failed in another worker: {failed.read_text()}")
        if not meta.exists():
            start = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
            try:
                with RealSlurm() as s:
                    w = run_workload(s, start)
                    commands = export(s, start, out)
                    version = s.run("sinfo", "--version").strip()
            except Exception as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}")
                raise
            meta.write_text(json.dumps({"jobs": w.jobs, "commands": commands, "version": version}))
    d = json.loads(meta.read_text())
    return SlurmDump(out, d["jobs"], d["version"], live=True)


def committed_dump() -> SlurmDump:
    """`tests/fixtures/slurm-real/`, written by an earlier run of the same workload (before it
    gained the job `dep`); job ids by name from its JobName column."""
    lines = (COMMITTED / "sacct.txt").read_text().splitlines()
    header = lines[0].split("|")
    jobs = {}
    for text in lines[1:]:
        row = dict(zip(header, text.split("|"), strict=True))
        if "." not in row["JobID"]:
            jobs.setdefault(row["JobName"], row["JobID"].split("_")[0])
    return SlurmDump(COMMITTED, jobs, "slurm-wlm 22.05.8", live=False)


@pytest.fixture(scope="module", params=[pytest.param("live", marks=pytest.mark.slurm), "committed"])
def dump(request: pytest.FixtureRequest) -> SlurmDump:
    """The live dump of this session (marker `slurm`), then the committed one (no Slurm
    needed: runs on every machine)."""
    if request.param == "live":
        return request.getfixturevalue("slurm_dump")
    return committed_dump()
