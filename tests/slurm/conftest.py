"""`slurm_dump`: a real Slurm cluster runs the workload once per test session and exports it.

Under pytest-xdist every worker asks for the dump; the first one (holding an flock on a file in
the session's shared temporary directory) starts the cluster, runs the workload, exports and
stops every daemon; the others wait on the lock and read the files it wrote. A machine that
cannot run the harness skips with `RealSlurm.unavailable()`'s reason.
"""

from __future__ import annotations

import fcntl
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.slurm.realslurm import RealSlurm
from tests.slurm.workload import export, run_workload


@dataclass(frozen=True)
class SlurmDump:
    dir: Path
    jobs: dict[str, str]  # job id by workload name
    commands: dict[str, list[str]]  # the command line that wrote each file
    version: str

    @property
    def sacct(self) -> Path:
        return self.dir / "sacct.txt"

    @property
    def sinfo(self) -> Path:
        return self.dir / "sinfo.txt"


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
    return SlurmDump(out, d["jobs"], d["commands"], d["version"])
