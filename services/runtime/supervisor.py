"""Supervision for `gpuledger up`: every service is started, checked, restarted and reported.

- In-process services (asyncio tasks) and child processes (`up --processes`) are supervised
  the same way: a crash is reported in one error line (`service.crashed`: name, exit, last
  error, restart number, back-off) and the service is restarted after an exponential
  back-off (1 s doubling to 30 s; reset once it ran `stable_s`). A child that exits with code
  0 (a planned stop: SIGTERM) is restarted after the first back-off step and reported in one
  info line (`service.restarting`), its last error kept as it was.
- Children are started with absolute paths and must become ready (they write their first
  heartbeat once connected) within `ready_timeout_s` (`start_overdue`: of wall time once the
  child has also had `READY_CPU_S` of CPU, so a host whose cores are all busy starts them
  late rather than not at all; ten times it whatever the CPU); one that exits or hangs at
  start makes `up` fail with the child's own error line (`StartFailed`).
- `up` keeps `<data>/status.json` current (once a second): per service its state
  (starting | running | blocked | restarting | failed | stopped), pid, restarts, folded
  sequence, last error, plus the stream's last sequence. `gpuledger status` and the stale-read
  warnings of `jobs`/`why`/`nodes`/`sql` read it; no lock, no NATS needed to read it.
- A child reports its folded sequence through a heartbeat file named by the
  `GPULEDGER_HEARTBEAT_FILE` environment variable (`heartbeat_task`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from gpuledger.services.runtime.lease import HOLDER_ENV
from gpuledger.services.runtime.status_file import (  # noqa: F401 - re-exported
    STATUS_FILE,
    now_ms,
    pid_alive,
    read_json,
    staleness,
    write_json_atomic,
    write_json_keeping,
)

HEARTBEAT_ENV = "GPULEDGER_HEARTBEAT_FILE"
BACKOFF_S = (1.0, 30.0)

log = structlog.get_logger("gpuledger.supervisor")


# ---------------------------------------------------------------------- status board


@dataclass
class ServiceState:
    """One supervised service as `gpuledger status` shows it."""

    name: str
    role: str
    state: str = "starting"
    pid: int | None = None
    restarts: int = 0
    folded_seq: int | None = None
    """Last stream sequence the service folded (the projector: committed)."""
    last_error: str | None = None
    last_exit_at_ms: int | None = None
    started_at_ms: int | None = None
    detail: str | None = None
    """Why it is not running normally (e.g. who blocks the projector)."""
    lease: str | None = None
    """A control-plane service: `leader` (holds its leader lease and decides) or `standby`
    (folds, ready to take over); None for services without a lease."""
    behind_since_ms: int | None = None
    """When `up` first saw the stream hold an event this service has not folded yet (None:
    it has folded everything `up` has seen): how stale what it serves is."""
    progress_at_ms: int | None = None
    """When `up` last saw this service's folded sequence move (or saw it caught up)."""


@dataclass
class StatusBoard:
    """The document `up` keeps in `<data>/status.json`."""

    path: Path | None
    url: str
    mode: str
    services: dict[str, ServiceState] = field(default_factory=dict)
    stream_last_seq: int | None = None
    stream_error: str | None = None
    nats_nodes: list[dict[str, Any]] = field(default_factory=list)
    """The NATS nodes holding the stream (`status_file.nats_nodes`), as last asked."""
    store: dict[str, Any] | None = None
    """The store's state as `up`'s probe last saw it (`StoreWatch.document`: `state` ok | full
    | unknown, `error`, `action`, `since_ms`, `write_errors`, `restarts`); None: not probed."""
    nats_reload_error: str | None = None
    """Why the embedded server refused its last credential reload (None: it did not)."""
    samples: deque = field(default_factory=lambda: deque(maxlen=3600))
    """(time ms, stream last seq) each time the stream's last sequence grew."""

    def saw_stream(self, last_seq: int, at_ms: int | None = None) -> None:
        if not self.samples or last_seq > self.samples[-1][1]:
            self.samples.append((now_ms() if at_ms is None else at_ms, last_seq))
        self.stream_last_seq = last_seq

    def add(self, name: str, role: str) -> ServiceState:
        self.services[name] = st = ServiceState(name, role)
        return st

    def document(self) -> dict[str, Any]:
        rows = []
        now = now_ms()
        for st in self.services.values():
            row = asdict(st)
            row["lag"] = lag(self.stream_last_seq, st.folded_seq)
            st.behind_since_ms = next(
                (
                    at
                    for at, seq in self.samples
                    if st.folded_seq is not None and seq > st.folded_seq
                ),
                None,
            )
            row["behind_since_ms"] = st.behind_since_ms
            row.update(progress(st, row["lag"], now))
            rows.append(row)
        return {
            "updated_at_ms": now_ms(),
            "up_pid": os.getpid(),
            "nats_url": self.url,
            "mode": self.mode,
            "stream_last_seq": self.stream_last_seq,
            "stream_error": self.stream_error,
            "nats_nodes": self.nats_nodes,
            "store": self.store,
            "nats_reload_error": self.nats_reload_error,
            "services": rows,
        }

    def write(self) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            write_json_keeping(self.path, self.document())


STALLED_AFTER_S = 60
"""A running service that has folded nothing for this long while the stream holds messages it
has not folded is shown `stalled`, not `running` (issue 44: a leader stuck at one position
read `running ... leader` for minutes)."""


def progress(st: ServiceState, behind: int | None, now: int) -> dict[str, Any]:
    """The row fields that say whether `st` makes progress: `idle_s` (seconds since its folded
    sequence last moved, or since the oldest message it has not folded arrived if later; 0
    when caught up) and, past
    STALLED_AFTER_S, `state: stalled` with a one-line `detail`."""
    if not behind or st.progress_at_ms is None:
        return {"idle_s": 0}
    # nothing was there to fold before the oldest message it has not folded arrived
    since = max(st.progress_at_ms, st.behind_since_ms or 0)
    idle_s = max(0, now - since) // 1000
    if st.state != "running" or idle_s < STALLED_AFTER_S:
        return {"idle_s": idle_s}
    return {
        "idle_s": idle_s,
        "state": "stalled",
        "detail": f"no progress for {idle_s}s at seq {st.folded_seq} with {behind} to fold"
        " (see its log; stopping it hands the lease to a standby)",
    }


def lag(stream_last_seq: int | None, folded_seq: int | None) -> int | None:
    """Events the service has not folded yet (None when either side is unknown)."""
    if stream_last_seq is None or folded_seq is None:
        return None
    return max(0, stream_last_seq - folded_seq)


# ---------------------------------------------------------------------- child errors


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Busy|Gap)\b.*")


def last_error_line(text: str) -> str | None:
    """The child's own account of why it stopped, from the tail of its output: an
    `error: ...` line, a structlog error record, or the last line of a traceback."""
    for line in reversed(text.splitlines()[-200:]):
        line = line.strip()
        if not line:
            continue
        if line.startswith("error: "):
            return line[len("error: ") :]
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("level") in ("error", "critical", "exception"):
                exc = str(rec.get("exception") or rec.get("error") or "").strip().splitlines()
                return f"{rec.get('event')}: {exc[-1]}" if exc else str(rec.get("event"))
            continue
        if _EXC_LINE.match(line):
            return line
    return None


def exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with code {code}"


# ---------------------------------------------------------------------- heartbeats


def heartbeat_task(
    sample: Callable[[], dict[str, Any] | None], interval_s: float = 1.0
) -> asyncio.Task | None:
    """In a child started by `up`: write `sample()` (plus pid and time) to the file named by
    $GPULEDGER_HEARTBEAT_FILE now and every `interval_s` (a None sample: not ready yet, no
    beat). None when not supervised."""
    target = os.environ.get(HEARTBEAT_ENV)
    if not target:
        return None
    path = Path(target)

    def beat() -> None:
        fields = sample()
        if fields is not None:
            with contextlib.suppress(OSError):
                write_json_atomic(path, {**fields, "pid": os.getpid(), "at_ms": now_ms()})

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_s)
            beat()

    beat()  # the first beat is the readiness signal
    return asyncio.get_running_loop().create_task(loop(), name="heartbeat")


def host_sample(host: Any) -> Callable[[], dict[str, Any]]:
    """Heartbeat fields of a runtime Host."""

    def sample() -> dict[str, Any]:
        state, detail, lease = host_condition(host)
        return {"state": state, "folded_seq": host.folded_seq, "detail": detail, "lease": lease}

    return sample


def host_condition(host: Any) -> tuple[str, str | None, str | None]:
    """`(state, detail, lease)` of a runtime Host for `gpuledger status`: `unauthorized` (no
    lease) while the server refuses its key, else `refusing` with the gap it is stuck on, else
    `running`."""
    refused = getattr(getattr(host, "bus", None), "auth_failure", None)
    if refused:
        return "unauthorized", refused, None
    return ("refusing" if host.gap else "running"), host.gap, lease_role(host)


def lease_role(host: Any) -> str | None:
    """`leader` / `standby` for a host with a leader lease, None without one."""
    if getattr(host, "lease", None) is None:
        return None
    return "leader" if host.lease.held else "standby"


# ---------------------------------------------------------------------- back-off


@dataclass
class Backoff:
    """Exponential restart delay, reset after a run of `stable_s` seconds."""

    first_s: float = BACKOFF_S[0]
    max_s: float = BACKOFF_S[1]
    stable_s: float = 60.0
    _next: float = 0.0

    def after_run(self, ran_s: float) -> float:
        if ran_s >= self.stable_s or self._next == 0.0:
            self._next = self.first_s
        else:
            self._next = min(self._next * 2, self.max_s)
        return self._next


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; True when `stop` was set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


def report_planned_restart(st: ServiceState, how: str, retry_in_s: float) -> None:
    """The one line a planned stop produces: a child that exited with code 0 while the cluster
    runs was asked to stop (SIGTERM: an operator's `kill`, a deploy) and stopped cleanly, so it
    is restarted promptly and logged at info, not as a crash."""
    log.info(
        "service.restarting",
        service=st.name,
        exit=how,
        restart=st.restarts + 1,
        retry_in_s=retry_in_s,
    )


def report_crash(st: ServiceState, how: str, retry_in_s: float) -> None:
    """The one line a crash produces."""
    log.error(
        "service.crashed",
        service=st.name,
        exit=how,
        error=st.last_error,
        restart=st.restarts + 1,
        retry_in_s=retry_in_s,
    )


# ---------------------------------------------------------------------- in-process


async def supervise_task(
    st: ServiceState,
    run: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    backoff: Backoff | None = None,
) -> None:
    """Run `run()` until `stop`; restart it after a crash (or an unexpected return) with
    back-off, reporting each restart in one line."""
    backoff = backoff or Backoff()
    st.pid = os.getpid()
    while not stop.is_set():
        started = time.monotonic()
        st.state, st.started_at_ms = "running", now_ms()
        try:
            await run()
            if stop.is_set():
                break
            how, st.last_error = "returned", "returned while the cluster runs"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a supervisor keeps the service alive
            how, st.last_error = "raised", f"{type(exc).__name__}: {exc}"[:500]
        st.last_exit_at_ms = now_ms()
        delay = backoff.after_run(time.monotonic() - started)
        report_crash(st, how, delay)
        st.state = "restarting"
        if await sleep_or_stop(stop, delay):
            break
        st.restarts += 1
    st.state = "stopped"


# ---------------------------------------------------------------------- processes


class StartFailed(RuntimeError):
    """A child exited (or never became ready) at start."""

    def __init__(self, name: str, error: str, code: int) -> None:
        self.name, self.error, self.code = name, error, code
        super().__init__(f"{name} failed to start: {error}")


@dataclass
class Child:
    name: str
    role: str
    args: tuple[str, ...]
    st: ServiceState
    proc: Any = None
    log_offset: int = 0
    started: float = 0.0
    restart_at: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    holder: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    """The leader-lease holder id every incarnation of this child uses (`HOLDER_ENV`): one
    starts only after the previous one exited, so a restarted leader takes its lease back at
    once instead of waiting out its dead predecessor's TTL."""


READY_CPU_S = 10.0
"""CPU seconds a child may use before its heartbeat is overdue: ten times what a child needs
to import, connect and beat on the 2-core development machine (about 1 s)."""


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) used by process `pid` so far, from /proc; None where there is
    no /proc (or the process is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_overdue(wall_s: float, cpu_s: float | None, ready_timeout_s: float) -> bool:
    """Whether a child not ready after `wall_s` (having used `cpu_s` of CPU; None: unknown)
    has had its chance: `ready_timeout_s` of wall time and `READY_CPU_S` of CPU, or ten times
    the timeout whatever the CPU (a child blocked without using any)."""
    if wall_s <= ready_timeout_s:
        return False
    return cpu_s is None or cpu_s >= READY_CPU_S or wall_s > 10 * ready_timeout_s


class ProcessSupervisor:
    """Children of `up --processes` (through ServiceProcesses): started with a heartbeat file
    each, checked for readiness, restarted with back-off when they exit."""

    def __init__(
        self, procs: Any, board: StatusBoard, heartbeat_dir: Path, *, ready_timeout_s: float = 30.0
    ) -> None:
        self.procs, self.board = procs, board
        self.heartbeat_dir = heartbeat_dir
        self.ready_timeout_s = ready_timeout_s
        self.children: dict[str, Child] = {}
        heartbeat_dir.mkdir(parents=True, exist_ok=True)

    def add(self, role: str, *args: str, name: str | None = None) -> None:
        name = name or role
        self.children[name] = Child(name, role, args, self.board.add(name, role))

    def _heartbeat(self, c: Child) -> Path:
        return self.heartbeat_dir / f"{c.name}.json"

    def _log(self, c: Child) -> Path | None:
        return None if self.procs.log_dir is None else self.procs.log_dir / f"{c.name}.log"

    def _spawn(self, c: Child) -> None:
        self._heartbeat(c).unlink(missing_ok=True)
        logf = self._log(c)
        c.log_offset = logf.stat().st_size if logf is not None and logf.exists() else 0
        c.proc = self.procs.start(
            c.role,
            *c.args,
            name=c.name,
            env={
                HEARTBEAT_ENV: str(self._heartbeat(c)),
                HOLDER_ENV: f"{c.role}/{c.name}/{c.holder}",
            },
        )
        c.started, c.restart_at = time.monotonic(), None
        c.st.pid, c.st.state, c.st.started_at_ms = c.proc.pid, "starting", now_ms()

    def _child_error(self, c: Child, code: int) -> str:
        """How the child ended, with its own last error line from this run's output."""
        logf = self._log(c)
        said = None
        if logf is not None and logf.exists():
            with open(logf, "rb") as f:
                f.seek(c.log_offset)
                said = last_error_line(f.read()[-65536:].decode("utf-8", "replace"))
        return exit_text(code) if said is None else f"{exit_text(code)}: {said}"

    def _refresh(self, c: Child) -> bool:
        """Update the row from the child's heartbeat; True once it has beaten."""
        hb = read_json(self._heartbeat(c))
        if hb is None or hb.get("pid") != c.proc.pid:
            return False
        folded = hb.get("folded_seq", c.st.folded_seq)
        if folded != c.st.folded_seq or c.st.progress_at_ms is None:
            c.st.progress_at_ms = now_ms()
        c.st.folded_seq = folded
        c.st.state = hb.get("state", "running")
        c.st.detail = hb.get("detail")
        c.st.lease = hb.get("lease")
        return True

    async def start(self) -> None:
        """Start every child and wait until each is ready; StartFailed (with the child's own
        error) on the first that exits or does not beat within `ready_timeout_s`."""
        for c in self.children.values():
            self._spawn(c)
        waiting = set(self.children)
        while waiting:
            for name in sorted(waiting):
                c = self.children[name]
                code = c.proc.poll()
                if code is not None:
                    c.st.state, c.st.last_error = "failed", self._child_error(c, code)
                    c.st.last_exit_at_ms = now_ms()
                    self.board.write()
                    raise StartFailed(name, c.st.last_error, code)
                if self._refresh(c):
                    waiting.discard(name)
            for name in sorted(waiting):
                c = self.children[name]
                wall, cpu = time.monotonic() - c.started, cpu_seconds(c.proc.pid)
                if start_overdue(wall, cpu, self.ready_timeout_s):
                    c.st.state = "failed"
                    used = "" if cpu is None else f", {cpu:.1f}s of CPU"
                    raise StartFailed(
                        name, f"not ready after {wall:.0f}s{used} (no heartbeat; see its log)", 1
                    )
            self.board.write()
            await asyncio.sleep(0.1)

    def poll(self) -> None:
        """One supervision round: notice exits, restart what is due, refresh the rows."""
        now = time.monotonic()
        for c in self.children.values():
            if c.restart_at is not None:
                if now >= c.restart_at:
                    c.st.restarts += 1
                    self._spawn(c)
                continue
            code = c.proc.poll()
            if code is None:
                self._refresh(c)
                continue
            c.st.last_exit_at_ms = now_ms()
            if code == 0:  # a planned stop (SIGTERM, exit 0): no error, no back-off growth
                delay = c.backoff.first_s
                report_planned_restart(c.st, exit_text(code), delay)
            else:
                c.st.last_error = self._child_error(c, code)
                delay = c.backoff.after_run(now - c.started)
                report_crash(c.st, exit_text(code), delay)
            c.st.state, c.st.pid, c.restart_at = "restarting", None, now + delay

    def stop(self) -> None:
        self.procs.stop()
        for c in self.children.values():
            c.st.state = "stopped"


# ---------------------------------------------------------------------- stale reads
