"""The job side of gpuledger's checkpoint protocol (stdlib only; import it from a job).

Protocol, as a training job sees it:

1. The agent starts the job with ``GPULEDGER_CHECKPOINT_DIR`` (where to save),
   ``GPULEDGER_RESUME`` (``1`` when this run should continue from a checkpoint), ``RANK``,
   ``WORLD_SIZE``, ``GPULEDGER_JOB_ID`` and ``GPULEDGER_ALLOCATION_ID``.
2. Whenever the job has durably saved a checkpoint it calls ``acknowledge(step)``. That
   atomically writes a small JSON marker (``gpuledger-ack-rank<R>.json`` in the checkpoint
   directory); the agent watches it and reports ``MemberCheckpointed`` with the step.
3. On preemption the agent sends SIGTERM (or the configured signal). The job saves, calls
   ``acknowledge(step)`` and exits with ``EXIT_CHECKPOINTED`` (75, EX_TEMPFAIL) or 0.
   At the deadline the agent sends SIGKILL: work since the last acknowledged step is lost.
4. A resumed job (``resuming()``) finds its last acknowledged step with ``latest()``.
5. Elastic gangs (``min_members < replicas``): when the gang shrinks, the agent atomically
   writes the new member count to ``gpuledger-world-size`` in each staying rank's checkpoint
   directory; ``world_size()`` reads it (``WORLD_SIZE`` until then). Poll it between steps
   (or at each checkpoint) and re-form the process group with that many ranks.

Invariant: a marker on disk is always complete (write to a temporary file, fsync,
``os.replace``, fsync the directory), so a reader never sees a torn marker.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuledger.services.node_agent.outcome import EXIT_CHECKPOINTED  # noqa: F401  (part of this API)

ENV_CHECKPOINT_DIR = "GPULEDGER_CHECKPOINT_DIR"
ENV_RESUME = "GPULEDGER_RESUME"
ENV_JOB_ID = "GPULEDGER_JOB_ID"
ENV_ALLOCATION_ID = "GPULEDGER_ALLOCATION_ID"
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"

# EXIT_CHECKPOINTED (75, EX_TEMPFAIL): "I saved a checkpoint and exit because I was asked to";
# defined with the pure outcome table that reads it.


def marker_path(directory: str | os.PathLike[str], rank: int) -> Path:
    """Where rank ``rank`` acknowledges its checkpoints inside ``directory``."""
    return Path(directory) / f"gpuledger-ack-rank{int(rank)}.json"


def checkpoint_dir() -> Path:
    """The directory this job saves checkpoints in (``GPULEDGER_CHECKPOINT_DIR``)."""
    value = os.environ.get(ENV_CHECKPOINT_DIR)
    if not value:
        raise RuntimeError(f"{ENV_CHECKPOINT_DIR} is not set: not started by a gpuledger agent?")
    return Path(value)


def resuming() -> bool:
    """True when this run should continue from its latest checkpoint."""
    return os.environ.get(ENV_RESUME, "0") == "1"


def rank() -> int:
    return int(os.environ.get(ENV_RANK, "0"))


WORLD_SIZE_FILE = "gpuledger-world-size"
"""Where the agent writes an elastic gang's member count after a resize (one integer)."""


def world_size() -> int:
    """How many members the gang has now: the agent's latest word after a resize (the
    ``gpuledger-world-size`` file in this rank's checkpoint directory), else ``WORLD_SIZE``."""
    directory = os.environ.get(ENV_CHECKPOINT_DIR)
    if directory:
        try:
            text = (Path(directory) / WORLD_SIZE_FILE).read_text(encoding="ascii").strip()
            if text.isdigit() and int(text) > 0:
                return int(text)
        except OSError:
            pass
    return int(os.environ.get(ENV_WORLD_SIZE, "1"))


def write_world_size(directory: str | os.PathLike[str], size: int) -> Path:
    """Agent side: tell the member whose checkpoint directory this is its new world size
    (atomically: a reader sees the old number or the new one)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"world size must be a positive int, got {size!r}")
    path = Path(directory) / WORLD_SIZE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, f"{size}\n".encode("ascii"))
    return path


def read_marker(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The marker at ``path``, or None when missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("step"), int):
        return None
    return data


def _write_atomically(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def acknowledge(step: int, path: str | None = None) -> Path:
    """Tell the agent that a checkpoint of ``step`` is saved (at ``path``, if given).

    Call it only after the checkpoint itself is durable. Returns the marker's path.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    directory = checkpoint_dir()
    directory.mkdir(parents=True, exist_ok=True)
    marker = marker_path(directory, rank())
    record = {
        "step": step,
        "path": path,
        "rank": rank(),
        "job_id": os.environ.get(ENV_JOB_ID),
        "allocation_id": os.environ.get(ENV_ALLOCATION_ID),
        "acknowledged_at": time.time(),
    }
    _write_atomically(marker, json.dumps(record, sort_keys=True).encode())
    return marker


def latest() -> dict[str, Any] | None:
    """The latest acknowledged checkpoint of this rank (any earlier run), or None."""
    return read_marker(marker_path(checkpoint_dir(), rank()))


def install_sigterm_handler(callback: Callable[[], None]) -> None:
    """Call ``callback()`` on SIGTERM. Keep it short: set a flag, save in the main loop."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: callback())
