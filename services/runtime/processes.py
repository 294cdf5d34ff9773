"""Services as child processes: `gpuledger run ROLE ...` started, killed and stopped.

One launcher for every place that runs services as separate OS processes (`up --processes`,
`demo --processes`, benchmarks, integration tests). Children log to `<log_dir>/<name>.log`
(JSON lines) when a log directory is given, else to the parent's stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from gpuledger.services.runtime.auth import NatsAccess, principal_of

ROOT = Path(__file__).resolve().parents[2]


def run_command(
    role: str, url: str, *args: str, config: Path | None = None, profile: Path | None = None
) -> list[str]:
    """The argv of `gpuledger run ROLE --nats-url URL [--config F] ARGS` (optionally under
    cProfile, writing `profile`)."""
    cmd = [sys.executable]
    if profile is not None:
        cmd += ["-m", "cProfile", "-o", str(profile)]
    cmd += ["-m", "gpuledger.services.cli", "run", role, "--nats-url", url, *args]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


class ServiceProcesses:
    """A named group of service processes."""

    def __init__(
        self,
        access: NatsAccess | str,
        *,
        config: Path | None = None,
        log_dir: Path | None = None,
        env: dict[str, str] | None = None,
        profile_dir: Path | None = None,
    ) -> None:
        # children run in ROOT: every path they are given must not depend on our cwd
        config = None if config is None else Path(config).resolve()
        log_dir = None if log_dir is None else Path(log_dir).resolve()
        self.access = NatsAccess(access) if isinstance(access, str) else access
        self.url, self.config, self.log_dir, self.profile_dir = (
            self.access.url,
            config,
            log_dir,
            profile_dir,
        )
        self.env = {**os.environ, "GPULEDGER_LOG_JSON": "1", **(env or {})}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(
        self, role: str, *args: str, name: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """Start `gpuledger run ROLE ARGS` (paths in ARGS must be absolute) as `name`, with
        `env` added to the group's environment. The child runs as its own identity
        (`auth.principal_of`: its role, or `node:<name>` for `--node`) when the group's
        access has an auth directory."""
        name = name or role
        node = args[args.index("--node") + 1] if "--node" in args else None
        env = {**self.access.as_principal(principal_of(role, node)).child_env(), **(env or {})}
        profile = None if self.profile_dir is None else self.profile_dir / f"{name}.prof"
        out = None if self.log_dir is None else open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            run_command(role, self.url, *args, config=self.config, profile=profile),
            cwd=ROOT,
            stdout=out,
            stderr=None if out is None else subprocess.STDOUT,
            env={**self.env, **env},
        )
        if out is not None:
            out.close()  # the child holds its own descriptor
        self.procs[name] = proc
        return proc

    def kill9(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self, name: str | None = None, timeout_s: float = 10) -> None:
        """Terminate one process (or all), then kill whatever did not exit in time."""
        procs = [self.procs.pop(name)] if name is not None else list(self.procs.values())
        if name is None:
            self.procs.clear()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()

    def logs(self, tail: int = 3000) -> str:
        if self.log_dir is None:
            return ""
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-tail:]}" for p in sorted(self.log_dir.glob("*.log"))
        )
