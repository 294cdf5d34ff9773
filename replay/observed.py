"""What actually happened, kept beside an imported log: the observation sidecar.

An importer writes the replayable log (`OUT.jsonl`: configuration, nodes, submissions,
cancels) and, next to it, `OUT.observed.jsonl`: one JSON object per imported job with what
the source recorded (submit, start, end, final state, nodes, earlier runs of a requeued or
preempted job). The sidecar is data only (JSON Lines decoded into the typed records below,
never executed), the deciders never see it, and the log's bytes do not depend on it: a
replay of the log is the same with or without its sidecar. `whatif`, `compare` and `replay`
read it to add an **observed** column, computed by `replay.metrics.measure_observed` with the
definitions of `replay.metrics`.

Why a sidecar and not observation events in the log: the log is the input a replay re-decides
(its external inputs); observations are not inputs, and as events they would have to be
filtered out of every fold (acceptance rules, projector, verify, external_inputs) and would
change the published contract (JSON Schema, golden fixtures). A sidecar keeps the log
exactly what the deciders may see, and still travels with it (`replay --out` copies it next
to the replayed log, so `compare` of two replays finds it).

First line: the header (`Header`): the trace window, the GPU capacity of the imported nodes,
the SLO class of every priority class the import configured, the checkpoint assumption. Then
one `Observation` per job, in the order the importer read them. An imported array job (Slurm
`123_4`, `123_[5-9%2]`) has one observation per task, under the task id the replay gives it
(`123@4`), with that task's own times and state, and none for the array itself, so the
observed column counts the same jobs as the replay's metrics (which count an array as its
tasks).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

SUFFIX = ".observed.jsonl"
VERSION = 1


class Run(msgspec.Struct, frozen=True, array_like=True):
    """One earlier run of a job (before a requeue): start, end (ms, None = unknown), the
    state the source gave it (`PREEMPTED`, `REQUEUED`, `NODE_FAIL`, ...) and the GPU
    milli-units it held when they differ from the job's (a Slurm `gres=gpu:1` may get a whole
    GPU in one run and a MIG slice in the next; None = the job's `gpu_milli`)."""

    start_ms: int | None
    end_ms: int | None
    state: str
    gpu_milli: int | None = None


class Observation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One job as the source recorded it."""

    job: str
    tenant: str
    priority_class: str
    gpu_milli: int
    """GPU milli-units of the whole job (every member)."""
    submit_ms: int
    start_ms: int | None = None
    """Start of the last run (None: never started, or started before the trace window)."""
    end_ms: int | None = None
    """End of the last run (None: still running or pending when the source was written)."""
    started_before: bool = False
    """Running when the trace began: its start is before the window (excluded from waits)."""
    state: str = ""
    """Final state as the source wrote it (`COMPLETED`, `FAILED`, `TIMEOUT`, `PREEMPTED`,
    `NODE_FAIL`, `CANCELLED`, `RUNNING`, `PENDING`...), or derived from the times."""
    nodes: tuple[str, ...] = ()
    runs: tuple[Run, ...] = ()
    """Earlier runs (requeues, preemptions), oldest first; the last run is start/end."""
    first_start_ms: int | None = None
    """The first run's start when the source records earlier runs without their times."""
    checkpoint_s: int = 0
    """The checkpoint interval assumed for this job (seconds of run time; 0 = none)."""
    line: int = 0
    partition: str | None = None
    """The partition / node pool the source ran it in, when it records one (else the fidelity
    report reads the job's partition node selector from the log)."""
    user: str | None = None
    """The user who submitted it, when the source records one (the fidelity report's waits
    per user); left out of the file when unknown."""

    @property
    def first_start(self) -> int | None:
        if self.first_start_ms is not None:
            return self.first_start_ms
        for r in self.runs:
            if r.start_ms is not None:
                return r.start_ms
        return self.start_ms


class Header(msgspec.Struct, frozen=True, kw_only=True):
    observed: int = VERSION
    source: str = ""
    window_ms: tuple[int, int] = (0, 0)
    """[first time seen, last time seen] over every submit, start and end of the source."""
    capacity_gpu_milli: int = 0
    """GPU capacity of the imported nodes (milli)."""
    slo_classes: dict[str, str] = {}
    """Priority class -> the SLO class waits are reported under (as the replay reports them)."""
    checkpoint: str = "none"
    """The checkpoint assumption of the import, in words."""


class ObservedError(ValueError):
    """An observation file that cannot be read (names the file and line)."""


_enc = msgspec.json.Encoder()
_header_dec = msgspec.json.Decoder(Header)
_obs_dec = msgspec.json.Decoder(Observation)


def sidecar(log: str | Path) -> Path:
    """`OUT.jsonl` -> `OUT.observed.jsonl` (any suffix of the log is replaced)."""
    p = Path(log)
    return p.with_name(p.stem + SUFFIX) if p.suffix else p.with_name(p.name + SUFFIX)


def encode(obj: msgspec.Struct) -> bytes:
    return _enc.encode(obj)


def write(path: str | Path, header: Header, body: IO[bytes] | None) -> None:
    """Write the header then the observation lines read from `body` (a binary file of
    encoded lines, read from where it stands)."""
    with open(path, "wb") as out:
        out.write(_enc.encode(header) + b"\n")
        if body is not None:
            shutil.copyfileobj(body, out)


def read(path: str | Path) -> tuple[Header, Iterator[Observation]]:
    """The header and an iterator over the observations (one line at a time)."""
    p = Path(path)
    try:
        f = open(p, "rb")
    except OSError as exc:
        raise ObservedError(f"{p}: cannot read: {exc.strerror or exc}") from None
    first = f.readline()
    try:
        header = _header_dec.decode(first)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        f.close()
        raise ObservedError(f"{p}:1: not an observation header: {exc}") from None

    def items() -> Iterator[Observation]:
        with f:
            for n, raw in enumerate(f, 2):
                if not raw.strip():
                    continue
                try:
                    yield _obs_dec.decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    raise ObservedError(f"{p}:{n}: not an observation: {exc}") from None

    return header, items()


def find(log: str | Path) -> Path | None:
    """The sidecar of `log`, when there is one."""
    s = sidecar(log)
    return s if s.is_file() else None


def copy_beside(log: str | Path, out: str | Path) -> Path | None:
    """Copy `log`'s sidecar next to `out` (a replay of it); returns the copy, or None."""
    src = find(log)
    if src is None:
        return None
    dst = sidecar(out)
    if os.path.abspath(src) != os.path.abspath(dst):
        shutil.copyfile(src, dst)
    return dst
