"""Run assigned members as subprocesses, deliver checkpoint signals, report how they end.

Side effects are keyed by (allocation id, rank) and recorded in a state directory, so:

- ``start()`` of a member that this or an earlier agent already started (running or
  ended, until ``forget()``) is a no-op returning the existing member: nothing starts twice.
- A new ``Executor`` over the same state directory (agent restart) ``adopt()``s members
  still running (pid + kernel start time guard against pid reuse) and learns how the
  others ended from the exit file the member wrapper (``member_wrapper.py``) wrote.
- Nothing here kills or signals on its own: only ``request_checkpoint()`` and ``kill()``
  do, when the agent's decider says so. A silent control plane never stops work.

Members run in their own process group (the wrapper leads it), so they survive the agent
and signals reach the whole member. Output goes to ``<log_dir>/<allocation>-rank<r>.log``.
Checkpoint acknowledgements are markers written by the job (see ``checkpoint.py``).
``poll()`` returns each new ``CheckpointAcknowledged`` and each ``MemberOutcome`` once per
Executor instance (after a restart the latest ones are reported again; the lead's events
have deterministic ids, so a repeat is deduplicated).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal as signals
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpuledger.events.ids import job_name
from gpuledger.services.node_agent import checkpoint
from gpuledger.services.node_agent.outcome import Outcome, classify_exit

_WRAPPER = Path(__file__).with_name("member_wrapper.py")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


@dataclass(frozen=True)
class MemberLaunch:
    """What to run for one gang member."""

    allocation_id: str
    job_id: str
    rank: int
    world_size: int
    command: list[str] | str  # a list is exec'd as is; a string runs through /bin/sh
    visible_devices: tuple[str, ...]  # GPU or MIG UUIDs
    checkpoint_dir: Path
    resume: bool
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunningMember:
    """A snapshot of a member the executor knows about."""

    allocation_id: str
    rank: int
    pid: int | None
    log_path: Path
    started_at: float
    running: bool
    adopted: bool


class CheckpointAcknowledged(msgspec.Struct, frozen=True):
    """The job acknowledged a saved checkpoint (report as ``MemberCheckpointed``)."""

    allocation_id: str
    rank: int
    step: int
    path: str | None
    acknowledged_at: float


class MemberOutcome(msgspec.Struct, frozen=True):
    """How a member ended (report as ``MemberExited``). See ``outcome.py`` for the table."""

    allocation_id: str
    rank: int
    exit_code: int | None
    signal: int | None
    outcome: Outcome
    checkpoint_step: int | None


MemberEvent = CheckpointAcknowledged | MemberOutcome


class MemberRecord(msgspec.Struct):
    """The durable record of one member in the state directory."""

    allocation_id: str
    job_id: str
    rank: int
    world_size: int
    checkpoint_dir: str
    log_path: str
    exit_file: str
    started_at: float
    pid: int | None = None
    proc_start: int | None = None
    checkpoint_requested_at: float | None = None
    checkpoint_signal: int | None = None
    killed_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None


def member_key(allocation_id: str, rank: int) -> str:
    """The file-name key of a member; refuses ids that are not a single safe path token."""
    if not _ID.match(allocation_id):
        raise ValueError(f"unsafe allocation id {allocation_id!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    return f"{allocation_id}-rank{rank}"


def member_env(launch: MemberLaunch, base: Mapping[str, str]) -> dict[str, str]:
    """The member's environment: ``base``, then ``launch.env``, then ours (ours win). Pure."""
    env = dict(base)
    env.update(launch.env)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(launch.visible_devices),
            checkpoint.ENV_JOB_ID: job_name(launch.job_id),  # the id its tenant submitted
            checkpoint.ENV_ALLOCATION_ID: launch.allocation_id,
            checkpoint.ENV_RANK: str(launch.rank),
            checkpoint.ENV_WORLD_SIZE: str(launch.world_size),
            checkpoint.ENV_CHECKPOINT_DIR: str(launch.checkpoint_dir),
            checkpoint.ENV_RESUME: "1" if launch.resume else "0",
        }
    )
    return env


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if not running.

    A zombie counts as not running. Linux only; elsewhere None whenever unknown.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class _Member:
    key: str
    record: MemberRecord
    popen: subprocess.Popen[bytes] | None = None
    adopted: bool = False
    outcome: MemberOutcome | None = None
    reported_ack: tuple[int, float] | None = None
    reported_outcome: bool = False


class Executor:
    """Starts, signals and watches members; all state lives under ``state_dir``."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        python: str = sys.executable,
        clock: Callable[[], float] = time.time,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self._dir = Path(state_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._python = python
        self._clock = clock
        self._base_env = base_env
        self._members: dict[str, _Member] = {}
        self._pending: list[MemberEvent] = []  # collected by wait(), not yet polled

    # -- state files --------------------------------------------------------------
    def _record_path(self, key: str) -> Path:
        return self._dir / f"{key}.json"

    def _save(self, member: _Member) -> None:
        path = self._record_path(member.key)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(msgspec.json.encode(member.record))
        os.replace(tmp, path)

    def _load(self, key: str) -> _Member | None:
        if key in self._members:
            return self._members[key]
        try:
            record = msgspec.json.decode(self._record_path(key).read_bytes(), type=MemberRecord)
        except (OSError, msgspec.DecodeError):
            return None
        member = _Member(key, record, adopted=True)
        self._members[key] = member
        return member

    # -- liveness -----------------------------------------------------------------
    def _alive(self, member: _Member) -> bool:
        if member.record.finished_at is not None:
            return False
        if member.popen is not None:
            return member.popen.poll() is None
        if member.record.pid is None:
            return False
        return process_start_time(member.record.pid) == member.record.proc_start

    def _find_orphan(self, member: _Member) -> None:
        """A record without a pid: the agent died between writing it and starting the
        wrapper, or just after. Look for the wrapper by its unique exit-file argument."""
        needle = member.record.exit_file.encode()
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                if needle in argv and str(_WRAPPER).encode() in argv:
                    pid = int(entry.name)
                    member.record.pid = pid
                    member.record.proc_start = process_start_time(pid)
                    self._save(member)
                    return

    # -- public API ---------------------------------------------------------------
    def adopt(self) -> tuple[RunningMember, ...]:
        """Load every member recorded in the state directory; return those still running.
        Members that ended while no agent watched are reported by the next ``poll()``."""
        for path in sorted(self._dir.glob("*.json")):
            member = self._load(path.stem)
            if member is not None and member.record.pid is None and member.popen is None:
                self._find_orphan(member)
        self._refresh()
        return tuple(self._view(m) for m in self._sorted() if self._alive(m))

    def start(self, launch: MemberLaunch) -> RunningMember:
        """Start the member unless this allocation/rank was started before (then no-op)."""
        key = member_key(launch.allocation_id, launch.rank)
        existing = self._load(key)
        if existing is not None:
            if existing.record.pid is None and existing.popen is None:
                self._find_orphan(existing)
            return self._view(existing)
        launch.log_dir.mkdir(parents=True, exist_ok=True)
        launch.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        log_path = launch.log_dir / f"{key}.log"
        exit_file = self._dir / f"{key}.exit"
        record = MemberRecord(
            allocation_id=launch.allocation_id,
            job_id=launch.job_id,
            rank=launch.rank,
            world_size=launch.world_size,
            checkpoint_dir=str(launch.checkpoint_dir),
            log_path=str(log_path),
            exit_file=str(exit_file),
            started_at=self._clock(),
        )
        member = _Member(key, record)
        self._members[key] = member
        self._save(member)  # intent first: a crash from here on can never start it twice
        if isinstance(launch.command, str):
            argv = [self._python, str(_WRAPPER), str(exit_file), "--shell", launch.command]
        else:
            argv = [self._python, str(_WRAPPER), str(exit_file), "--", *launch.command]
        base = os.environ if self._base_env is None else self._base_env
        with open(log_path, "ab") as log:
            member.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=member_env(launch, base),
                start_new_session=True,
                close_fds=True,
            )
        record.pid = member.popen.pid
        record.proc_start = process_start_time(record.pid)
        self._save(member)
        return self._view(member)

    def request_checkpoint(
        self, allocation_id: str, rank: int, signal: int = signals.SIGTERM
    ) -> bool:
        """Ask the member to checkpoint and exit. False if it is not running."""
        member = self._load(member_key(allocation_id, rank))
        if member is None or not self._alive(member):
            return False
        if member.record.checkpoint_requested_at is None:
            member.record.checkpoint_requested_at = self._clock()
        member.record.checkpoint_signal = int(signal)
        self._save(member)  # record before signalling: the outcome depends on it
        return self._signal(member, signal)

    def kill(self, allocation_id: str, rank: int) -> bool:
        """SIGKILL the member's process group (the deadline passed). False if not running."""
        member = self._load(member_key(allocation_id, rank))
        if member is None or not self._alive(member):
            return False
        member.record.killed_at = self._clock()
        self._save(member)
        return self._signal(member, signals.SIGKILL)

    def _signal(self, member: _Member, signum: int) -> bool:
        assert member.record.pid is not None
        try:
            os.killpg(member.record.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def checkpoint_acknowledged(self, allocation_id: str, rank: int) -> int | None:
        """The latest step this allocation's member acknowledged, or None."""
        member = self._load(member_key(allocation_id, rank))
        if member is None:
            return None
        marker = self._marker(member)
        return None if marker is None else int(marker["step"])

    def _marker(self, member: _Member) -> dict | None:
        data = checkpoint.read_marker(
            checkpoint.marker_path(member.record.checkpoint_dir, member.record.rank)
        )
        if data is None or data.get("allocation_id") != member.record.allocation_id:
            return None  # missing, or left by an earlier allocation of the same job
        return data

    def members(self) -> tuple[RunningMember, ...]:
        return tuple(self._view(m) for m in self._sorted())

    def poll(self) -> tuple[MemberEvent, ...]:
        """New checkpoint acknowledgements and outcomes since the last poll."""
        self._refresh()
        events, self._pending = tuple(self._pending), []
        return events

    async def events(self, interval: float = 0.1) -> AsyncIterator[MemberEvent]:
        """Poll forever, yielding events as they happen."""
        while True:
            for event in self.poll():
                yield event
            await asyncio.sleep(interval)

    async def wait(
        self, allocation_id: str, rank: int, timeout: float | None = None, interval: float = 0.02
    ) -> MemberOutcome:
        """Wait until the member has ended; does not consume ``poll()``'s events."""
        key = member_key(allocation_id, rank)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            member = self._load(key)
            if member is None:
                raise KeyError(key)
            self._pending.extend(self._collect(member))
            if member.outcome is not None:
                return member.outcome
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"member {key} still running after {timeout}s")
            await asyncio.sleep(interval)

    def forget(self, allocation_id: str, rank: int) -> None:
        """Drop an ended member's records once its end is durably reported. Refuses a
        running member (the agent never drops running work)."""
        key = member_key(allocation_id, rank)
        member = self._load(key)
        if member is None:
            return
        if self._alive(member):
            raise RuntimeError(f"member {key} is still running")
        for path in (self._record_path(key), Path(member.record.exit_file)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._members.pop(key, None)

    # -- internals ----------------------------------------------------------------
    def _sorted(self) -> list[_Member]:
        return [self._members[k] for k in sorted(self._members)]

    def _view(self, m: _Member) -> RunningMember:
        return RunningMember(
            m.record.allocation_id,
            m.record.rank,
            m.record.pid,
            Path(m.record.log_path),
            m.record.started_at,
            self._alive(m),
            m.adopted,
        )

    def _refresh(self) -> None:
        """Collect new events of every member into the pending queue."""
        for member in self._sorted():
            self._pending.extend(self._collect(member))

    def _collect(self, member: _Member) -> list[MemberEvent]:
        """Detect a new acknowledgement and the member's end; return unreported events."""
        events: list[MemberEvent] = []
        alive = self._alive(member)  # before reading the marker: no ack can be missed
        marker = self._marker(member)
        if marker is not None:
            seen = (int(marker["step"]), float(marker.get("acknowledged_at") or 0.0))
            if seen != member.reported_ack:
                member.reported_ack = seen
                events.append(
                    CheckpointAcknowledged(
                        member.record.allocation_id,
                        member.record.rank,
                        seen[0],
                        marker.get("path"),
                        seen[1],
                    )
                )
        if not alive and member.outcome is None:
            member.outcome = self._finish(member, marker)
        if member.outcome is not None and not member.reported_outcome:
            member.reported_outcome = True
            events.append(member.outcome)
        return events

    def _finish(self, member: _Member, marker: dict | None) -> MemberOutcome:
        record = member.record
        if record.finished_at is None:
            record.exit_code, record.signal = self._exit_status(member)
            record.finished_at = self._clock()
            self._save(member)
        requested = record.checkpoint_requested_at is not None
        fresh_ack = (
            requested
            and marker is not None
            and float(marker.get("acknowledged_at") or 0.0) >= record.checkpoint_requested_at
        )
        return MemberOutcome(
            record.allocation_id,
            record.rank,
            record.exit_code,
            record.signal,
            classify_exit(record.exit_code, record.signal, requested, fresh_ack),
            None if marker is None else int(marker["step"]),
        )

    def _exit_status(self, member: _Member) -> tuple[int | None, int | None]:
        try:
            status = msgspec.json.decode(Path(member.record.exit_file).read_bytes())
            return status.get("exit_code"), status.get("signal")
        except (OSError, msgspec.DecodeError):
            pass
        if member.popen is not None and member.popen.returncode is not None:
            code = member.popen.returncode
            return (None, -code) if code < 0 else (code, None)
        if member.record.killed_at is not None:
            return None, int(signals.SIGKILL)
        return None, None  # ended unseen, and the wrapper could not say how
