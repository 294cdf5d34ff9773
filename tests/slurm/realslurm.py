"""A real Slurm 22.05 cluster on loopback, in a private temporary directory, for tests.

Debian's `slurm-wlm` (slurmctld, slurmd), `slurmdbd` and `mariadb-server` packages, started
without systemd: every daemon runs in the foreground (`-D`) as a child process and is
stopped by its PID. Everything the cluster needs lives under one directory:

- MariaDB on a Unix socket only (`mariadb-install-db` into a private datadir, `mariadbd
  --skip-networking --socket=...`); slurmdbd reaches it through `MYSQL_UNIX_PORT`;
- `munged` with a private key and socket (`AuthInfo=socket=...`);
- slurmdbd, slurmctld and two `slurmd -N <name>` on one host, each on its own free loopback
  port; `SlurmdParameters=config_overrides` lets nodes declare more CPUs than the host has;
- GPU gres that need no GPU: Slurm 22.05 drops GPUs whose gres.conf line has no `File=`, so
  every GPU points at its own fake character device (major 1, minor 3, as /dev/null) made with
  `mknod` in the private directory. Node `n1` has 4 untyped GPUs (`Name=gpu Count=4`), node
  `n2` MIG-named types (`gpu:1g.10gb:4`, `gpu:3g.40gb:1`).

`RealSlurm.unavailable()` says precisely which part cannot run here and why (not root, a
binary missing, mknod refused), so a test can skip with that reason. Readiness is polled
(`sacctmgr`, `sinfo`), never slept for.

Run `python -m tests.slurm.workload OUTDIR` (as root) to start a cluster, run the workload
of `workload.py` and write a dump like `tests/fixtures/slurm-real/`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tests.waiting import NotReached, eventually

T = TypeVar("T")

CLUSTER = "glt"
BINARIES = (
    "mariadb-install-db",
    "mariadbd",
    "munged",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sacct",
    "sacctmgr",
    "sinfo",
    "squeue",
    "scontrol",
    "scancel",
)
# apt packages that provide the binaries (for skip messages and .ci/run)
PACKAGES = "slurm-wlm slurmdbd mariadb-server"

# name, CPUs, memory MB, gres for slurm.conf, gres.conf lines (device files filled in)
NODES = (
    ("n1", 16, 64000, "gpu:4", [("", 4)]),
    ("n2", 16, 64000, "gpu:1g.10gb:4,gpu:3g.40gb:1", [("1g.10gb", 4), ("3g.40gb", 1)]),
)


# the production-like site (`RealSlurm(production=True)`): slurm.conf lines, sacctmgr commands
PRODUCTION_CONF = """PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightFairshare=2000
PriorityWeightQOS=3000
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityMaxAge=00:10:00
PriorityDecayHalfLife=00:10:00
PriorityCalcPeriod=1
"""
PRODUCTION_ACCOUNTS = (
    ("add", "qos", "high", "Priority=100"),
    ("modify", "qos", "normal", "set", "Priority=10"),
    ("add", "account", "ml", "Description=ml", "Organization=science"),
    ("add", "user", "root", "Account=ml"),
    ("modify", "account", "physics", "set", "Fairshare=50"),
    ("modify", "account", "bio", "set", "Fairshare=30"),
    ("modify", "account", "ml", "set", "Fairshare=20"),
    ("modify", "user", "root", "set", "QOS=normal,high"),
)


class SlurmUnavailable(Exception):
    """A part of the real-Slurm harness cannot run on this machine (the message says which)."""


class SlurmFailed(Exception):
    """A daemon or command of the harness failed; the message holds its log tail."""


class NotReady(Exception):
    """Raised by a readiness probe: not yet, and why (kept as the last answer)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(
    fn: Callable[[], T],
    what: str,
    timeout_s: float = 60.0,
    every_s: float = 0.2,
    details: Callable[[], str] = lambda: "",
) -> T:
    """Call fn until it returns something truthy (the suite's `eventually`, so its limits
    scale on a loaded machine); SlurmFailed naming `what` and the daemons' `details()` after."""
    try:
        return eventually(
            fn,
            timeout_s,
            what,
            interval_s=every_s,
            ignoring=(OSError, subprocess.SubprocessError, NotReady),
        )
    except NotReached as exc:
        raise SlurmFailed(f"{exc}\n{details()}") from None


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log: Path

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@dataclass
class RealSlurm:
    """Start with `start()` (or `with RealSlurm() as s:`); `stop()` ends every daemon by PID."""

    root: Path | None = None
    daemons: list[Daemon] = field(default_factory=list)
    _own_root: bool = False
    production: bool = False
    """The production-like site (`tests/slurm/production.py`): multifactor priority with
    fair share, age and QOS weights, a third account `ml` and the
    QOS `high`; the slurm.conf lines are `PRODUCTION_CONF`."""

    @staticmethod
    def unavailable() -> str | None:
        """Why this machine cannot run the harness, or None when it can."""
        if os.name != "posix":
            return "real Slurm: needs Linux"
        missing = [b for b in BINARIES if shutil.which(b) is None]
        if missing:
            return (
                f"real Slurm: {', '.join(missing)} not installed "
                f"(apt-get install {PACKAGES}; .ci/run does so)"
            )
        if os.geteuid() != 0:
            return (
                "real Slurm: needs root (slurmd starts jobs as their user, munged and "
                "mknod of the fake GPU devices need it); running as uid "
                f"{os.geteuid()}"
            )
        with tempfile.TemporaryDirectory(prefix="glslurm-probe-") as d:
            try:
                os.mknod(Path(d) / "nvidia0", 0o666 | 0o020000, os.makedev(1, 3))
            except OSError as exc:
                return (
                    "real Slurm: mknod of a fake GPU character device (1,3) refused "
                    f"({exc.strerror}); Slurm 22.05 drops GPUs without File="
                )
        return None

    # -- paths and environment -------------------------------------------------------------

    @property
    def conf(self) -> Path:
        assert self.root is not None
        return self.root / "etc" / "slurm.conf"

    def env(self) -> dict[str, str]:
        assert self.root is not None
        return {
            **os.environ,
            "SLURM_CONF": str(self.conf),
            "MYSQL_UNIX_PORT": str(self.root / "mysql.sock"),
            "TZ": "UTC",
            "SLURM_TIME_FORMAT": "standard",
        }

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        p = subprocess.run(
            list(args), env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if check and p.returncode != 0:
            raise SlurmFailed(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> RealSlurm:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        reason = self.unavailable()
        if reason:
            raise SlurmUnavailable(reason)
        if self.root is None:
            # short path: Unix sockets are limited to 108 bytes
            self.root = Path(tempfile.mkdtemp(prefix="glslurm-"))
            self._own_root = True
        try:
            self._layout()
            self._start_mariadb()
            self._start_munge()
            self._start_slurmdbd()
            self._start_slurmctld()
            self._start_slurmds()
        except BaseException:
            self.stop()
            raise

    @property
    def jobs_dir(self) -> Path:
        """Working directory of every job (`sbatch --chdir`): cleanup finds leftovers by it."""
        assert self.root is not None
        return self.root / "jobs"

    def _steps_running(self, job: str = "*") -> list[Path]:
        """slurmd's per-step sockets (`<node>_<job>.<step>`): one per live slurmstepd (of
        `job`, or of every job)."""
        assert self.root is not None
        return [p for p in (self.root / "spool").glob(f"*/*_{job}.*") if p.is_socket()]

    def steps_ended(self, job: str) -> bool:
        """Whether no step of `job` is alive on any node (a requeued run fully torn down)."""
        return not self._steps_running(job)

    def _leftovers(self) -> list[int]:
        """PIDs of processes working in this cluster's directory (stray slurmstepd, jobs)."""
        assert self.root is not None
        mine = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if cwd == str(self.root) or cwd.startswith(f"{self.root}/"):
                mine.append(int(proc.name))
        return mine

    def stop(self) -> None:
        stray: SlurmFailed | None = None
        if self.root is not None and any(d.name.startswith("slurmd") for d in self.daemons):
            # let every job step finish reporting before its slurmd goes away (a slurmstepd
            # whose slurmd is gone retries for minutes)
            try:
                self.run("scancel", "--full", "--user=root", check=False)
                poll(lambda: not self._steps_running(), "job steps to end", timeout_s=20)
            except (SlurmFailed, subprocess.SubprocessError, OSError):
                pass  # the leftovers are killed below
        for d in reversed(self.daemons):
            if d.proc.poll() is None:
                d.proc.send_signal(signal.SIGTERM)
        for d in reversed(self.daemons):
            try:
                d.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                d.proc.kill()
                d.proc.wait(timeout=10)
        self.daemons.clear()
        if self.root is not None:
            for pid in self._leftovers():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                poll(lambda: not self._leftovers(), "stray job processes to exit", timeout_s=10)
            except SlurmFailed as exc:
                stray = exc
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        if stray is not None:
            raise stray

    def _spawn(self, name: str, argv: list[str]) -> Daemon:
        assert self.root is not None
        log = self.root / "log" / f"{name}.out"
        out = open(log, "ab")
        try:
            proc = subprocess.Popen(
                argv,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            out.close()
        d = Daemon(name, proc, log)
        self.daemons.append(d)
        return d

    def _alive(self, d: Daemon) -> None:
        if d.proc.poll() is not None:
            raise SlurmFailed(f"{d.name} exited with {d.proc.returncode}:\n{d.tail()}")

    # -- the parts ---------------------------------------------------------------------------

    def _layout(self) -> None:
        r = self.root
        assert r is not None
        for sub in ("etc", "log", "state", "spool", "dev", "munge", "run", "jobs"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r, 0o755)
        self.ports = {
            "ctld": free_port(),
            "dbd": free_port(),
            **{name: free_port() for name, *_ in NODES},
        }
        gres_lines = []
        node_lines = []
        dev = 0
        for name, cpus, mem, gres, types in NODES:
            (r / "spool" / name).mkdir(exist_ok=True)
            node_lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.ports[name]} CPUs={cpus} RealMemory={mem} Gres={gres} State=UNKNOWN"
            )
            for gtype, count in types:
                first = dev
                for _ in range(count):
                    os.mknod(r / "dev" / f"nvidia{dev}", 0o666 | 0o020000, os.makedev(1, 3))
                    dev += 1
                files = (
                    f"{r}/dev/nvidia{first}" if count == 1 else f"{r}/dev/nvidia[{first}-{dev - 1}]"
                )
                typ = f" Type={gtype}" if gtype else ""
                gres_lines.append(f"NodeName={name} Name=gpu{typ} Count={count} File={files}")
        (r / "etc" / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        (r / "etc" / "slurm.conf").write_text(
            f"""ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ports["ctld"]}
SlurmctldParameters=enable_configless
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.sock
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.ports["dbd"]}
AccountingStoragePass={r}/munge/munge.sock
AccountingStorageTRES=gres/gpu,gres/gpu:1g.10gb,gres/gpu:3g.40gb
AccountingStorageEnforce=associations
JobCompType=jobcomp/none
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
MinJobAge=2
KillWait=2
InactiveLimit=0
MessageTimeout=10
DefMemPerCPU=1000
{PRODUCTION_CONF if self.production else ""}{chr(10).join(node_lines)}
PartitionName=low Nodes=n1,n2 Default=YES PriorityTier=1 PreemptMode=REQUEUE MaxTime=10
PartitionName=high Nodes=n1,n2 PriorityTier=10 PreemptMode=OFF MaxTime=10
"""
        )
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text(
            f"""AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.ports["dbd"]}
SlurmUser=root
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
"""
        )
        os.chmod(dbd, 0o600)

    def _start_mariadb(self) -> None:
        r = self.root
        assert r is not None
        data = r / "mysql"
        p = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if p.returncode != 0:
            raise SlurmFailed(f"mariadb-install-db: exit {p.returncode}: {p.stderr[-2000:]}")
        d = self._spawn(
            "mariadbd",
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={r}/mysql.sock",
                f"--pid-file={r}/run/mariadbd.pid",
                "--skip-networking",
                "--user=root",
                "--innodb-buffer-pool-size=128M",
                "--innodb-log-file-size=64M",
                # slurmdbd's schema needs innodb_lock_wait_timeout >= 900 to stop warning
                "--innodb-lock-wait-timeout=900",
            ],
        )

        def ready() -> bool:
            self._alive(d)
            return (r / "mysql.sock").exists()

        poll(ready, "mariadbd's socket")

    def _start_munge(self) -> None:
        r = self.root
        assert r is not None
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(r / "munge", 0o700)
        d = self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={r}/munge/munge.sock",
                f"--pid-file={r}/run/munged.pid",
                f"--seed-file={r}/munge/munge.seed",
                "--num-threads=2",
            ],
        )

        def ready() -> bool:
            self._alive(d)
            return (r / "munge" / "munge.sock").exists()

        poll(ready, "munged's socket")

    def _start_slurmdbd(self) -> None:
        r = self.root
        assert r is not None
        d = self._spawn("slurmdbd", ["slurmdbd", "-D"])

        def ready() -> bool:
            self._alive(d)
            p = subprocess.run(
                ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"],
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=15,
            )
            if p.returncode != 0:
                raise NotReady(p.stderr.strip())
            return True

        poll(ready, "slurmdbd (sacctmgr show cluster)", details=d.tail)

    def _start_slurmctld(self) -> None:
        r = self.root
        assert r is not None
        d = self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])

        def registered() -> bool:
            self._alive(d)
            out = self.run("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster,controlport")
            return any(
                line.split("|")[0] == CLUSTER and line.split("|")[1] not in ("", "0")
                for line in out.splitlines()
            )

        poll(registered, "slurmctld to register its cluster with slurmdbd")
        # associations: the root user in account `physics` (default) and `bio`
        for args in (
            ("add", "account", "physics", "Description=physics", "Organization=science"),
            ("add", "account", "bio", "Description=bio", "Organization=science"),
            ("add", "user", "root", "Account=physics", "DefaultAccount=physics"),
            ("add", "user", "root", "Account=bio"),
        ):
            self.run("sacctmgr", "-i", *args)
        if self.production:  # shares 50/30/20, and a QOS of higher priority
            for args in PRODUCTION_ACCOUNTS:
                self.run("sacctmgr", "-i", *args)

    def _start_slurmds(self) -> None:
        r = self.root
        assert r is not None
        for name, *_ in NODES:
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf)])

        def idle() -> bool:
            for d in self.daemons:
                self._alive(d)
            out = self.run("sinfo", "--Node", "--noheader", "--format=%N|%t")
            states = dict(line.split("|") for line in out.split() if "|" in line)
            return all(states.get(name) == "idle" for name, *_ in NODES)

        poll(idle, "both slurmd nodes idle in sinfo")
