"""Helpers for integration tests: every service as its own OS process on a real nats-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuledger.services.runtime.processes import ServiceProcesses

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def submission(job_id: str, tenant: str) -> bytes:
    """A raw JobSubmitted (1 GPU, 1 h) as a CI step publishes it on gl.submit.TENANT.JOB."""
    return json.dumps(
        {
            "type": "JobSubmitted.v1",
            "event_id": f"sub-{job_id}",
            "job": {
                "job_id": job_id,
                "tenant": tenant,
                "resources": {"gpus": 1},
                "duration_s": 3600,
            },
        }
    ).encode()


def cli(
    *args: str, check: bool = False, timeout: float = 60, stdin: str | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        input=stdin,
    )


def start_up(
    cwd: Path, *args: str, level: str = "info", text: bool = True, stdout=subprocess.PIPE
) -> subprocess.Popen:
    """`gpuledger up ARGS` in `cwd`, its output (`level` lines and up) on one pipe (text, or
    bytes), or wherever `stdout` says."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpuledger.services.cli", "up", *args],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=text,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GPULEDGER_LOG_LEVEL": level},
    )


def status(cwd: Path) -> dict:
    """`gpuledger status -o json` in `cwd` ({} while it prints nothing)."""
    out = cli("status", "-o", "json", cwd=cwd)
    return json.loads(out.stdout) if out.stdout.strip() else {}


class Processes(ServiceProcesses):
    """The control plane and simulated agents of one test, logging into the test's tmp dir."""

    def __init__(self, server, config: Path, log_dir: Path) -> None:
        """`server`: an EmbeddedNats (each service runs as its own identity), or a URL."""
        url_or_access = server if isinstance(server, str) else server.access()
        self.server = None if isinstance(server, str) else server
        super().__init__(url_or_access, config=config, log_dir=log_dir)

    def start(
        self,
        role: str,
        node: str | None = None,
        *args: str,  # type: ignore[override]  # adds the node argument
        name: str | None = None,
    ):
        """`role` (named `name`, default the role or node: give replicas distinct names)."""
        if node is None:
            return super().start(role, *args, name=name)
        if self.server is not None:
            self.server.add_principals(f"node:{node}")
        return super().start(role, "--node", node, *args, name=name or node)

    def start_all(self, nodes: list[str]) -> None:
        for role in ("admission", "quota", "scheduler", "preemption"):
            self.start(role)
        for node in nodes:
            self.start("node-agent", node)
