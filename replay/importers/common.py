"""What every importer shares: jobs as they were observed, a bounded-memory log builder,
skipped-row bookkeeping and the import summary.

Each importer reads its source row by row and turns each job into an `ObservedJob` (who,
what shape, when submitted, started, ended). `ImportLog.add_job` applies one rule set to all
of them, the openb importer's:

- `JobSubmitted` at the submission time; what the replay does with each job's recorded
  outcome (its run time, a failure after it, a time limit, a cancel at its recorded time, a
  job that never ran kept from running) is `replay.importers.outcomes`' one rule.

Every submission carries the import's checkpoint assumption (`replay.importers.checkpoint`:
none unless the mapping says otherwise). What the source recorded of each job (times, final
state, nodes, earlier runs) is written, one line per job, to the observation sidecar
`OUT.observed.jsonl` (`replay.observed`), streamed to a temporary file while the source is
read and written beside the log by `write`.

Memory stays bounded however long the source: timed events are kept in sorted runs of
`run_size` events, spilled to temporary files, and merged in time order when the log is
written (an external merge sort). The only per-job state kept is an 8-byte hash of each job
id (duplicate detection: the first submission of an id in time order is kept, later ones are
skipped and reported). Tenants, classes and nodes are kept (they are few).
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
import tempfile
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from gpuledger import events as ev
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.events.specs import MAX_USER_LEN
from gpuledger.replay import observed as obs
from gpuledger.replay.importers.checkpoint import CheckpointRules
from gpuledger.replay.importers.outcomes import Replayed, replayed
from gpuledger.replay.observed import Run
from gpuledger.services.domain.fold.config import ConfigState
from gpuledger.services.domain.inputs.configfile import config_events
from gpuledger.services.domain.tooling.stamp import stamp, submission


class TraceImportError(ValueError):
    """A trace file that cannot be imported; the message names the file and line."""


MAX_FIELD = 65_536
"""Longest field (characters) an importer reads in a row; a longer one skips the row."""
_CSV_LIMIT = 1 << 24  # the csv module's own limit, raised so a long field is a skip, not an error


def open_text(path: str | Path) -> IO[str]:
    """A trace file as text for row-by-row reading: UTF-8 with undecodable bytes kept as
    surrogates (`row_problem` then skips the rows they are in, instead of the whole file
    failing at the first binary byte), universal newlines left to the csv module. A file that
    cannot be opened is a TraceImportError naming it (one line)."""
    import csv

    if csv.field_size_limit() < _CSV_LIMIT:
        csv.field_size_limit(_CSV_LIMIT)
    try:
        return open(path, encoding="utf-8", errors="surrogateescape", newline="")
    except OSError as exc:
        raise TraceImportError(f"{path}: {exc.strerror or exc}") from exc


def row_problem(values: Any) -> str | None:
    """Why a row (its text, or its field values) cannot be imported, else None: bytes that
    are not UTF-8 (binary), a NUL, or a field longer than `MAX_FIELD` characters."""
    for value in values if not isinstance(values, str) else (values,):
        if not isinstance(value, str):
            continue
        if len(value) > MAX_FIELD:
            return f"a field of {len(value):,} characters (at most {MAX_FIELD:,})"
        if "\x00" in value:
            return "a NUL byte (binary data?)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "bytes that are not UTF-8 text (binary data?)"
    return None


def read_yaml(path: str | Path) -> Any:
    """A side file of an import (mapping, nodes): its YAML document ({} when empty), or
    TraceImportError in one line naming the file when it is unreadable or not YAML."""
    from gpuledger.services.runtime.documents import DocumentError, load_document

    try:
        return load_document(Path(path).read_text()) or {}
    except OSError as exc:
        raise TraceImportError(f"{path}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, DocumentError) as exc:
        raise TraceImportError(f"{path}: {exc}") from None


_NOT_IN_USER = re.compile(r"[^A-Za-z0-9_\-:+@=,~]")


def spec_user(name: str | None) -> str | msgspec.UnsetType:
    """A source's user name as `JobSpec.user`: characters a subject token cannot hold (`.`,
    spaces, ...) become `_` (`john.doe` -> `john_doe`), cut to 128; none (or empty): unset,
    the job's user is then `-`."""
    if not name:
        return msgspec.UNSET
    return _NOT_IN_USER.sub("_", name)[:MAX_USER_LEN]


@dataclass
class ObservedJob:
    """One job as the source recorded it (times in epoch or trace milliseconds)."""

    job_id: str
    tenant: str
    priority_class: str
    resources: ev.Resources
    submit_ms: int
    replicas: int = 1
    start_ms: int | None = None
    end_ms: int | None = None
    line: int = 0
    requeued: int = 0
    spread: ev.Spread | None = None
    node_selector: dict[str, str] | None = None
    """Node labels the job's members need (its partition / node pool), None: any node."""
    state: str = ""
    """Final state as the source wrote it ('' = derive it from the times)."""
    nodes: tuple[str, ...] = ()
    runs: tuple[Run, ...] = ()
    """Earlier runs (requeues, preemptions), oldest first."""
    started_before: bool = False
    """Running when the trace began (its `start_ms` is the trace start, for the replay)."""
    partition: str | None = None
    user: str | None = None
    """Who submitted it, when the source records one (Slurm `User`); the fidelity report's
    waits per user."""
    source_priority: str | None = None
    """The source's priority value (QOS, PriorityClass...), for `checkpoint.values`."""
    time_limit_s: int | None = None
    """The job's time limit as the source recorded it (Slurm `Timelimit`, Kubernetes
    `activeDeadlineSeconds`), None: none."""
    depends_on: tuple[ev.Dependency, ...] = ()
    """Jobs of the dump it waited for (Slurm `Dependency`)."""
    eligible_ms: int | None = None
    """When it could first be placed, when later than its submission (Slurm `Eligible`: a
    `--begin`, a released hold); the replay submits it at `submit_ms`, held, and releases it
    then (an array's tasks cannot be held one by one: an array is submitted then). None: when
    submitted."""

    @property
    def replay_submit_ms(self) -> int:
        """When the replay may first place it: its submission, or its eligible time when
        later (a job is released from its hold then, an array submitted then)."""
        return self.submit_ms if self.eligible_ms is None else max(self.submit_ms, self.eligible_ms)


@dataclass
class SkipLog:
    """Skipped rows: counted per reason, the first `keep` line numbers of each kept."""

    keep: int = 10
    counts: dict[str, int] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)
    out: IO[str] | None = None

    def skip(self, where: str, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        kept = self.lines.setdefault(reason, [])
        if len(kept) < self.keep:
            kept.append(where)
        if self.out is not None:
            self.out.write(f"{where}: skipped: {reason}\n")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {r: {"rows": n, "first": self.lines[r]} for r, n in sorted(self.counts.items())}


def _hash(job_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8).digest(), "little")


_enc = msgspec.json.Encoder()


class ImportLog:
    """Collects an import's events in bounded memory and writes the log `replay` reads."""

    def __init__(
        self,
        producer: str,
        *,
        run_size: int = 200_000,
        skips: SkipLog | None = None,
        checkpoint: CheckpointRules | None = None,
        enforce_grace_s: int | None = None,
    ) -> None:
        self.producer = producer
        self.run_size = run_size
        self.skips = skips or SkipLog()
        self.checkpoint = checkpoint or CheckpointRules()
        # anonymous (no name on disk): an import stopped by an error leaves nothing behind
        self._obs: IO[bytes] = tempfile.TemporaryFile()
        self.window: list[int] | None = None
        self.final_states: dict[str, int] = {}
        self.observed_path: Path | None = None
        self._buf: list[tuple[int, int, int, int, bytes, bytes]] = []
        self._runs: list[str] = []
        self._counter = 0
        self._ids = array("Q")
        self.first_ms: int | None = None
        self.jobs = 0
        self.gangs = 0
        self.members = 0
        self.cancels = 0
        self.cancelled_running = 0
        self.eligible_later = 0
        self.pending = 0
        self.running = 0
        self.requeued = 0
        self.gpu_hours = 0.0
        self.by_class: dict[str, int] = {}
        self.by_tenant: dict[str, int] = {}
        self.by_shape: dict[str, int] = {}
        self.duplicates = 0
        self.spread = 0
        self.selected = 0
        self.arrays = 0
        self.array_tasks = 0
        self.array_tasks_split = 0
        self.never_ran: dict[str, int] = {}
        """Jobs that never ran in reality, by what the replay does with them."""
        self.enforce_grace_s = enforce_grace_s
        """The grace of every job whose checkpoint rules give none: how long after its time
        limit (or a preemption) the site stops a run (Slurm: `OverTimeLimit`); None: the
        class's grace."""

    # ------------------------------------------------------------------ adding
    def _push(self, at_ms: int, order: int, line: int, event: ev.Event) -> None:
        self._counter += 1
        self._buf.append(
            (at_ms, order, self._counter, line, ev.subject_for(event).encode(), ev.encode(event))
        )
        if self.first_ms is None or at_ms < self.first_ms:
            self.first_ms = at_ms
        if len(self._buf) >= self.run_size:
            self._spill()

    def _spill(self) -> None:
        self._buf.sort()
        fd, name = tempfile.mkstemp(prefix="gpuledger-import-", suffix=".run")
        with os.fdopen(fd, "wb") as f:
            for at_ms, order, n, line, subject, raw in self._buf:
                f.write(b"%d %d %d %d %s %s\n" % (at_ms, order, n, line, subject, raw))
        self._runs.append(name)
        self._buf.clear()

    def add_job(self, job: ObservedJob, where: str) -> bool:
        """Validate and add one job (its submission, and its cancel when it never started);
        False (and the row skipped with its reason) when it cannot be a job."""
        try:
            ev.validate_token("job id", job.job_id)
            ev.validate_tenant(job.tenant)
            if ARRAY_SEPARATOR in job.job_id:  # the ledger would refuse it: say so here
                ev.validate_job_id(job.job_id)
        except ev.InvalidId as exc:
            self.skips.skip(where, str(exc))
            return False
        r = self._timing(job, where)
        if r is None:
            return False
        checkpoint = self._checkpoint(job)
        spec = ev.JobSpec(
            job_id=job.job_id,
            tenant=job.tenant,
            priority_class=job.priority_class,
            replicas=job.replicas,
            resources=job.resources,
            checkpoint=checkpoint,
            duration_s=r.duration_s,
            spread=job.spread if job.spread is not None else msgspec.UNSET,
            node_selector=dict(sorted(job.node_selector.items()))
            if job.node_selector
            else msgspec.UNSET,
            time_limit_s=r.time_limit_s if r.time_limit_s else msgspec.UNSET,
            depends_on=job.depends_on if job.depends_on else msgspec.UNSET,
            ends=r.ends or msgspec.UNSET,
            user=spec_user(job.user),
        )
        self._push(
            job.submit_ms,
            0,
            job.line,
            submission(spec, now_ms=job.submit_ms, producer=self.producer),
        )
        if job.replay_submit_ms > job.submit_ms:
            self._hold(job)
        self._ids.append(_hash(job.job_id))
        self._count(job, r)
        self._observe(job, checkpoint)
        return True

    def _checkpoint(self, job: ObservedJob) -> ev.CheckpointPolicy:
        """The job's checkpoint policy (the mapping's rules), its grace the site's
        enforcement margin (`enforce_grace_s`) where the rules give none."""
        policy = self.checkpoint.policy(job.priority_class, job.partition, job.source_priority)
        if self.enforce_grace_s is not None and policy.grace_s is None:
            policy = msgspec.structs.replace(policy, grace_s=self.enforce_grace_s)
        return policy

    def _timing(self, job: ObservedJob, where: str) -> Replayed | None:
        """What the replay does with the job (`replay.importers.outcomes`), from its
        observed times and final state; None (and the row skipped with its reason) when
        they contradict each other."""
        start, end = job.start_ms, job.end_ms
        if start is not None and end is not None and end < start:
            self.skips.skip(where, "end time before start time")
            return None
        if start is None and end is not None and end < job.submit_ms:
            self.skips.skip(where, "end time before submit time")
            return None
        state = job.state or ("COMPLETED" if start is not None else "CANCELLED")
        return replayed(
            state,
            job.replay_submit_ms,
            start,
            end,
            job.time_limit_s,
            waits_on_dependency=bool(job.depends_on),
        )

    def _hold(self, job: ObservedJob) -> None:
        """A job not eligible when submitted (Slurm `Eligible` later: a `--hold`, a `--begin`)
        is held as it is submitted and released when it became eligible (`replay_submit_ms`),
        or never when it did not before its recorded end without a start (held or waiting
        for its begin time until it was cancelled)."""
        self._about(job, ev.JobHeld, job.submit_ms, 0, "imported: not eligible when submitted")
        at = job.replay_submit_ms
        if job.start_ms is None and job.end_ms is not None and at >= job.end_ms:
            return
        self._about(job, ev.JobReleased, at, 0, "imported: eligible (the source's eligible time)")

    def _cancel(self, job: ObservedJob, cancel_at: int, started: bool) -> None:
        reason = "CancelledWhileRunning" if started else "DeletedBeforeScheduled"
        self._about(job, ev.JobCancelled, cancel_at, 1, reason)

    def _about(self, job: ObservedJob, kind: type, at: int, order: int, reason: str) -> None:
        """Push a client event of `kind` about `job` at `at` (`order` among the events of one
        instant: 0 with the submissions, 1 after them)."""
        event = stamp(
            kind,
            key=job.job_id,
            producer=self.producer,
            now_ms=at,
            correlation_id=job.job_id,
            job_id=job.job_id,
            tenant=job.tenant,
            reason=reason,
        )
        self._push(at, order, job.line, event)

    def add_array(
        self,
        array_id: str,
        tasks: list[tuple[int, ObservedJob]],
        max_running: int | None,
        where: str,
        resources: ev.Resources | None = None,
    ) -> bool:
        """Add one array job of the tasks `(index, job)` (contiguous indexes, one shape: the
        first task's resources, class, selector, time limit and dependencies; job ids
        `<array>@<index>`): one submission at the earliest task's submit time whose
        `array.durations_s` carries each task's own run time, a `JobCancelled` for each task
        cancelled before it started, and one observation per task (a task that never ran
        must be imported as a job of its own: `outcomes.never_runs`). False (and the rows
        skipped) when the array id or a task's times cannot be imported."""
        try:
            ev.validate_job_id(array_id)
            ev.validate_token("task id", tasks[-1][1].job_id)
        except ev.InvalidId as exc:
            self.skips.skip(where, str(exc))
            return False
        timings = []
        for _, job in tasks:
            timing = self._timing(job, f"{where} ({job.job_id})")
            if timing is None:
                return False
            timings.append(timing)
        head = tasks[0][1]
        submit = min(job.replay_submit_ms for _, job in tasks)
        checkpoint = self._checkpoint(head)
        ends = tuple(r.ends for r in timings)
        known = [r.duration_s for r in timings if r.duration_s is not None]
        spec = ev.JobSpec(
            job_id=array_id,
            tenant=head.tenant,
            priority_class=head.priority_class,
            replicas=head.replicas,
            resources=resources if resources is not None else head.resources,
            checkpoint=checkpoint,
            duration_s=max(known) if known else None,
            spread=head.spread if head.spread is not None else msgspec.UNSET,
            node_selector=dict(sorted(head.node_selector.items()))
            if head.node_selector
            else msgspec.UNSET,
            time_limit_s=head.time_limit_s if head.time_limit_s else msgspec.UNSET,
            depends_on=head.depends_on if head.depends_on else msgspec.UNSET,
            user=spec_user(head.user),
            array=ev.ArraySpec(
                count=len(tasks),
                max_running=max_running,
                first=tasks[0][0],
                durations_s=tuple(r.duration_s for r in timings),
                ends=ends if any(ends) else msgspec.UNSET,
            ),
        )
        self._push(submit, 0, head.line, submission(spec, now_ms=submit, producer=self.producer))
        self._ids.append(_hash(array_id))
        self.arrays += 1
        for (_, job), r in zip(tasks, timings, strict=True):
            self._count(job, r)
            self._observe(job, checkpoint)
        self.array_tasks += len(tasks)
        return True

    def _count(self, job: ObservedJob, r: Replayed) -> None:
        """Count one job (or one array task) in the summary; push its cancel."""
        if r.never_ran is not None:
            self.never_ran[r.never_ran] = self.never_ran.get(r.never_ran, 0) + 1
        if r.cancel_at_ms is not None:
            started = job.start_ms is not None
            self._cancel(job, r.cancel_at_ms, started)
            self.cancels += 0 if started else 1
            self.cancelled_running += 1 if started else 0
        elif job.start_ms is None:
            self.pending += 1
        elif job.end_ms is None:
            self.running += 1
        self.jobs += 1
        self.members += job.replicas
        if job.replicas > 1:
            self.gangs += 1
        if job.spread is not None:
            self.spread += 1
        if job.node_selector:
            self.selected += 1
        self.requeued += 1 if job.requeued else 0
        self.eligible_later += 1 if job.replay_submit_ms > job.submit_ms else 0
        if job.start_ms is not None and job.end_ms is not None:  # the recorded run time
            duration = -(-(job.end_ms - job.start_ms) // 1000)
            self.gpu_hours += job.replicas * job.resources.gpu_milli_total() * duration / 3.6e6
        self.by_class[job.priority_class] = self.by_class.get(job.priority_class, 0) + 1
        self.by_tenant[job.tenant] = self.by_tenant.get(job.tenant, 0) + 1
        shape = shape_of(job.resources)
        self.by_shape[shape] = self.by_shape.get(shape, 0) + 1

    def _observe(self, job: ObservedJob, checkpoint: ev.CheckpointPolicy) -> None:
        """Write what the source recorded of `job` to the observation sidecar."""
        start = None if job.started_before else job.start_ms
        state = job.state or (
            ("COMPLETED" if job.end_ms is not None else "RUNNING")
            if job.start_ms is not None
            else ("CANCELLED" if job.end_ms is not None else "PENDING")
        )
        o = obs.Observation(
            job=job.job_id,
            tenant=job.tenant,
            priority_class=job.priority_class,
            gpu_milli=job.replicas * job.resources.gpu_milli_total(),
            submit_ms=job.submit_ms,
            start_ms=start,
            end_ms=job.end_ms,
            started_before=job.started_before,
            state=state,
            nodes=job.nodes,
            runs=job.runs,
            checkpoint_s=checkpoint.interval_s,
            line=job.line,
            partition=job.partition,
            user=job.user,
        )
        key = state.split()[0].upper() if state.strip() else state
        self.final_states[key] = self.final_states.get(key, 0) + 1
        times = [job.submit_ms, start, job.end_ms]
        times += [t for r in job.runs for t in (r.start_ms, r.end_ms)]
        seen = [t for t in times if t is not None]
        if self.window is None:
            self.window = [min(seen), max(seen)]
        else:
            self.window[0] = min(self.window[0], *seen)
            self.window[1] = max(self.window[1], *seen)
        self._obs.write(obs.encode(o) + b"\n")

    # ------------------------------------------------------------------ writing
    def _merged(self) -> Iterator[tuple[int, int, int, int, bytes, bytes]]:
        self._buf.sort()
        files = [open(name, "rb") for name in self._runs]

        def run(f):
            for raw in f:
                at_ms, order, n, line, subject, body = raw.rstrip(b"\n").split(b" ", 5)
                yield int(at_ms), int(order), int(n), int(line), subject, body

        try:
            yield from heapq.merge(iter(self._buf), *(run(f) for f in files))
        finally:
            for f in files:
                f.close()
            for name in self._runs:
                os.unlink(name)
            self._runs.clear()

    def _duplicate_hashes(self) -> set[int]:
        import numpy as np

        if not len(self._ids):
            return set()
        a = np.frombuffer(self._ids, dtype=np.uint64)
        s = np.sort(a)
        dup = s[1:][s[1:] == s[:-1]]
        return set(int(x) for x in np.unique(dup))

    def write(self, path: str | Path, head: list[ev.Event], where: Callable[[int], str]) -> int:
        """Write `head` (configuration and node events, re-stamped at the first event's time)
        then every job event in time order, `seq` 1..N. Later duplicates of a job id are
        skipped and reported (`where(line)` names the row). Returns the events written."""
        dups = self._duplicate_hashes()
        kept: dict[str, int] = {}
        dropped: set[tuple[str, int]] = set()
        n = 0
        buf = bytearray()
        with open(path, "wb") as f:
            for e in head:
                n += 1
                buf += b'{"seq":%d,"subject":%s,"event":%s}\n' % (
                    n,
                    _enc.encode(ev.subject_for(e)),
                    ev.encode(e),
                )
            for _at, order, _c, line, subject, raw in self._merged():
                if dups:
                    e = ev.decode(raw)
                    job_id = e.job.job_id if order == 0 else e.job_id
                    if _hash(job_id) in dups:
                        first = kept.setdefault(job_id, line)
                        if first != line:
                            if order == 0:
                                dropped.add((job_id, line))
                                self.skips.skip(
                                    where(line),
                                    f"duplicate job id {job_id!r} (kept {where(first)})",
                                )
                                self._uncount(e.job)
                            elif e.reason == "CancelledWhileRunning":
                                self.cancelled_running -= 1
                            else:
                                self.cancels -= 1
                            continue
                n += 1
                buf += b'{"seq":%d,"subject":"%s","event":%s}\n' % (n, subject, raw)
                if len(buf) > 1 << 20:
                    f.write(buf)
                    buf.clear()
            f.write(buf)
        self._write_observed(path, head, dropped)
        return n

    def _write_observed(
        self, path: str | Path, head: list[ev.Event], dropped: set[tuple[str, int]]
    ) -> None:
        """The observation sidecar next to the log (`replay.observed`): the header (window,
        capacity, SLO class of each priority class, checkpoint assumption) and one line per
        job the log kept (a skipped duplicate's observation is left out)."""
        cfg = ConfigState()
        capacity = 0
        for e in head:
            if isinstance(e, ev.TenantConfigured | ev.PriorityClassConfigured):
                cfg.apply(e)
            elif isinstance(e, ev.NodeRegistered):
                capacity += 1000 * len(e.node.gpus)
        header = obs.Header(
            source=str(path),
            window_ms=tuple(self.window) if self.window else (0, 0),
            capacity_gpu_milli=capacity,
            slo_classes={n: c.slo_class for n, c in sorted(cfg.classes.items())},
            checkpoint=self.checkpoint.summary(),
        )
        body, self._obs = self._obs, tempfile.TemporaryFile()
        body.seek(0)
        if dropped:
            kept: IO[bytes] = tempfile.TemporaryFile()
            dec = msgspec.json.Decoder(obs.Observation)
            with body:
                for raw in body:
                    o = dec.decode(raw)
                    if (o.job, o.line) in dropped:
                        key = o.state.split()[0].upper() if o.state.strip() else o.state
                        self.final_states[key] -= 1
                        continue
                    kept.write(raw)
            body = kept
            body.seek(0)
        self.observed_path = obs.sidecar(path)
        with body:
            obs.write(self.observed_path, header, body)

    def _uncount(self, spec: ev.JobSpec) -> None:
        self.duplicates += 1
        self.jobs -= 1
        self.members -= spec.replicas
        if spec.replicas > 1:
            self.gangs -= 1
        if spec.node_selector:
            self.selected -= 1
        if spec.duration_s is not None:
            self.gpu_hours -= (
                spec.replicas * spec.resources.gpu_milli_total() * spec.duration_s / 3.6e6
            )
        self.by_class[spec.priority_class] -= 1
        self.by_tenant[spec.tenant] -= 1

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "gangs": self.gangs,
            "members": self.members,
            "gpu_hours": round(self.gpu_hours, 3),
            "cancelled_before_start": self.cancels,
            "cancelled_while_running": self.cancelled_running,
            "pending_at_end": self.pending,
            "running_at_end": self.running,
            "requeued": self.requeued,
            "final_states": dict(sorted((k, v) for k, v in self.final_states.items() if v)),
            "checkpoint": self.checkpoint.summary(),
            "observed": None if self.observed_path is None else str(self.observed_path),
            "spread_limited": self.spread,
            "never_ran": dict(sorted(self.never_ran.items())),
            **(
                {
                    "arrays": self.arrays,
                    "array_tasks": self.array_tasks,
                    "array_tasks_split": self.array_tasks_split,
                }
                if self.arrays or self.array_tasks_split
                else {}
            ),
            **({"node_selected": self.selected} if self.selected else {}),
            "by_class": dict(sorted(self.by_class.items())),
            "tenants": len(self.by_tenant),
            "by_shape": dict(sorted(self.by_shape.items())),
            "skipped_rows": self.skips.total,
            "skipped": self.skips.as_dict(),
        }


def shape_of(r: ev.Resources) -> str:
    if r.mig_profile:
        return f"mig-{r.mig_profile}"
    if r.gpu_milli:
        return "share"
    if r.gpus:
        return f"{r.gpus}gpu"
    return "cpu"


def head_events(
    doc: dict[str, Any], nodes: tuple[ev.NodeInfo, ...], producer: str, at_ms: int
) -> list[ev.Event]:
    """Configuration and `NodeRegistered` events at `at_ms` (the log's first time)."""
    out: list[ev.Event] = list(config_events(doc, producer=producer, at_ms=at_ms))
    for info in nodes:
        out.append(
            stamp(
                ev.NodeRegistered,
                key=f"{info.name}@{at_ms}",
                producer=producer,
                now_ms=at_ms,
                correlation_id=info.name,
                node=info,
                simulated=True,
                heartbeat_s=0,
            )
        )
    return out


# ---------------------------------------------------------------------------- progress


class Progress:
    """Bytes read of one input file, for a progress bar (`callback(done, total)`)."""

    def __init__(self, f: IO, callback: Callable[[int, int], None] | None) -> None:
        self.f = f
        self.callback = callback
        try:
            self.total = os.fstat(f.fileno()).st_size
        except (OSError, AttributeError, ValueError):
            self.total = 0
        self._next = 0

    def tick(self, rows: int) -> None:
        if self.callback is None or rows < self._next:
            return
        self._next = rows + 2000
        raw = getattr(self.f, "buffer", self.f)
        try:
            self.callback(raw.tell(), self.total)
        except (OSError, ValueError):
            pass

    def done(self) -> None:
        if self.callback is not None:
            self.callback(self.total, self.total)


# ---------------------------------------------------------------------------- GPU memory

GPU_MEMORY_MIB: dict[str, int] = {
    "a100": 40960,
    "a100-40gb": 40960,
    "a100-80gb": 81920,
    "a100_80gb": 81920,
    "a100-sxm4-80gb": 81920,
    "a100-sxm4-40gb": 40960,
    "a100-pcie-40gb": 40960,
    "a100-pcie-80gb": 81920,
    "h100": 81920,
    "h100-80gb": 81920,
    "h100-80gb-hbm3": 81920,
    "h100-sxm5-80gb": 81920,
    "h100-nvl": 95830,
    "h200": 144384,
    "h200-141gb": 144384,
    "gh200": 98304,
    "b200": 184320,
    "v100": 16384,
    "v100-16gb": 16384,
    "v100-32gb": 32768,
    "v100-sxm2-16gb": 16384,
    "v100-sxm2-32gb": 32768,
    "l40s": 46080,
    "l40": 46080,
    "l4": 23034,
    "a10": 24576,
    "a10g": 23028,
    "a30": 24576,
    "a40": 46068,
    "t4": 15360,
    "p100": 16384,
    "rtx6000": 24576,
    "a6000": 49140,
}
"""GPU memory by model name (lower-cased, `NVIDIA-` / `Tesla-` prefixes and spaces dropped);
an unknown model gets 0 MiB (jobs that ask for a minimum GPU memory will not fit) and is
listed in the summary."""


def gpu_memory_mib(model: str) -> int:
    key = model.lower().replace(" ", "-")
    for prefix in ("nvidia-", "tesla-"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return GPU_MEMORY_MIB.get(key, 0)
