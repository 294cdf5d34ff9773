"""Helpers for integration tests: every service as its own OS process on a real nats-server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def cli(*args: str, check: bool = False, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=check, input=stdin,
    )


class Processes:
    """Starts `gpuledger run ROLE` processes and stops them all at the end."""

    def __init__(self, url: str, config: Path, log_dir: Path) -> None:
        self.url, self.config, self.log_dir = url, config, log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, role: str, node: str | None = None) -> subprocess.Popen:
        name = node or role
        args = [sys.executable, "-m", "services.cli", "run", role, "--nats-url", self.url, "--config", str(self.config)]
        if node:
            args += ["--node", node]
        log = open(self.log_dir / f"{name}.log", "ab")
        proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "GPULEDGER_LOG_JSON": "1"})
        self.procs[name] = proc
        return proc

    def start_all(self, nodes: list[str]) -> None:
        for role in ("admission", "quota", "scheduler", "preemption"):
            self.start(role)
        for node in nodes:
            self.start("node-agent", node)

    def kill9(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.log_dir.glob("*.log")))
