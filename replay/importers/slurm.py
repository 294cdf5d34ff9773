"""Import Slurm accounting (`sacct --parsable2`) as a log of external inputs.

The dump (one `|`-separated row per job allocation and per step, header first):

    sacct --parsable2 --allusers --duplicates --starttime 2024-03-01 --endtime 2024-04-01 \\
      --format=JobID,JobIDRaw,JobName,User,Account,Partition,QOS,Priority,Submit,Eligible,Start,End,Elapsed,Timelimit,State,ExitCode,NNodes,NodeList,ReqTRES,AllocTRES \\
      > sacct.txt

Nodes (`--sinfo`): `sinfo --Node --noheader --format='%N|%c|%m|%G|%P' > sinfo.txt` (node, CPUs,
memory MB, GRES such as `gpu:a100:8(S:0-1)`, partition; a node listed once per partition is
kept once, labelled with its partitions: `replay.importers.labels`; the partition column may
be left out: no labels), or `--nodes FILE`: a gpuledger configuration file's `cluster.nodes`.

Rules (every row either becomes part of a job or is skipped with its line and reason):

- step rows (`123.batch`, `123.extern`, `123.0`, `123_4.batch`, `123+0.0`) are folded into the
  job row before them (a step without its job row is skipped);
- rows with the same JobID (`--duplicates`: a requeued job's runs), wherever they stand in the
  file, are one job: rows are sorted by job id in bounded memory (an external merge sort);
  submitted at the first row's Submit, run time of the last row (`requeued` counts the earlier
  ones, kept as runs in the observation sidecar with their states);
- array tasks (`123_4`) and pending array records `123_[5-9%2]` (one pending task each) are
  one array job `123` (`JobSpec.array`: first index, count, `%N` -> max_running) of tasks
  `123@4` ..., each with its own run time (`array.durations_s`), cancel and observation; the
  array's shape is its allocated tasks' most common one (else the most common requested); a
  task of another shape is a job of its own `123_4` (`array_tasks_split`); a hole in the
  indexes starts another array `123_<first>-<last>` (`_emit_array`);
- heterogeneous components `123+0`, `123+1` are one gang `123` when every component has the
  same per-node shape, else one job per component (`123+0`, ...);
- `NNodes` > 1: a gang of that many members, each with 1/N of the job's GPUs, CPUs and
  memory (rounded up);
- resources from AllocTRES when the job was allocated, else ReqTRES: `gres/gpu=8` or typed
  `gres/gpu:a100=8` (typed -> `gpu_models`), `cpu=`, `mem=` (K/M/G/T);
- times `YYYY-MM-DDTHH:MM:SS` in `--timezone` (default UTC); `Unknown`, `None` and empty are
  no time. No Submit: skipped. Started and ended: run time End - Start. Never started and
  ended (cancelled while pending): cancelled at End; a CANCELLED row with `NodeList` `None
  assigned` and no AllocTRES never started whatever its Start says (Slurm writes Start = End = the cancel
  time for a job cancelled before its first record reached slurmdbd). Pending or running at
  the dump: submitted with no run time;
- `Timelimit` (`[D-]HH:MM:SS`, `MM:SS`, `MM`, `D-HH[:MM]`) -> `time_limit_s`;
  `UNLIMITED`, `Partition_Limit`, empty or unreadable -> no limit (the run time still says
  how long it ran: a TIMEOUT row replays as a run stopped at its limit);
- an optional `Dependency` column (as `squeue -o %E` / `scontrol show job` print it:
  `afterok:123,afterany:124:125_3(unfulfilled)`) -> `depends_on`: `afterok` succeeded,
  `afternotok` failed, `afterany` finished, `after` started (a `+minutes` delay is dropped);
  a dependency on an array job names the array (and its tasks imported as jobs of their
  own), one on a task `123_4` the task `123@4`; one on a job outside the dump or of another
  tenant, OR-lists (`?`), `singleton`, `aftercorr` and `afterburstbuffer`
  are dropped and counted in the summary's `dependencies_dropped`;
- QOS -> priority class, Account -> tenant (`replay.importers.mapping`, overridable);
- Partition -> node selector of the partition's node label, when the nodes carry partition
  labels (`replay.importers.labels`).
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import msgspec

from gpuledger import events as ev
from gpuledger.events.ids import ARRAY_SEPARATOR
from gpuledger.replay.importers.common import (
    ImportLog,
    ObservedJob,
    Progress,
    SkipLog,
    TraceImportError,
    gpu_memory_mib,
    head_events,
    open_text,
    read_yaml,
    row_problem,
)
from gpuledger.replay.importers.labels import PartitionSelectors, partition_labels
from gpuledger.replay.importers.mapping import Naming, load_mapping
from gpuledger.replay.importers.migmap import is_profile, mig_gpus
from gpuledger.replay.importers.outcomes import never_runs
from gpuledger.replay.observed import Run
from gpuledger.services.domain.inputs.gpu_models import Vocabulary
from gpuledger.services.domain.inputs.gpu_models import gpu_memory_mib as model_memory_mib
from gpuledger.services.domain.inputs.quantities import MAX_VALUE
from gpuledger.services.domain.inputs.schema import MAX_GPUS_PER_NODE, MAX_NODES

PRODUCER = "import/slurm"
REQUIRED = ("JobID", "Submit", "Start", "End", "State", "NNodes")
"""Columns a dump must have; `Account` (-> tenant `default`) and `QOS` (-> class `normal`)
may be missing."""
GPU_COLUMNS = ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES")
NO_TIME = {"", "unknown", "none", "n/a"}

_JOBID = re.compile(
    r"^(?P<base>\d+)(?:_(?P<task>\d+|\[[^\]]*\]))?(?:\+(?P<het>\d+))?(?:\.(?P<step>.+))?$"
)
_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$", re.I)
_MEM_MIB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


@dataclass
class _Row:
    line: int
    base: str
    task: str | None
    het: int | None
    fields: dict[str, str]


def parse_time(raw: str, tz: ZoneInfo) -> int | None:
    text = raw.strip()
    if text.lower() in NO_TIME:
        return None
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)
    return int(dt.timestamp() * 1000)


def parse_tres(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def mem_mib(text: str) -> int:
    m = _MEM.match(text.strip())
    if not m:
        raise ValueError(f"cannot read memory {text!r}")
    mib = float(m.group(1)) * _MEM_MIB[m.group(2).upper()]
    if not 0 <= mib <= MAX_VALUE:
        raise ValueError(f"memory {text!r} out of range")
    return int(-(-mib // 1))


def tres_resources(tres: dict[str, str], nodes: int) -> tuple[ev.Resources, int]:
    """Per-member resources of a job of `nodes` members; and its total GPUs."""
    untyped = 0
    typed: dict[str, int] = {}
    for k, v in tres.items():
        if k == "gres/gpu":
            untyped = int(v)
        elif k.startswith("gres/gpu:"):
            typed[k.split(":", 1)[1]] = typed.get(k.split(":", 1)[1], 0) + int(v)
    total = max(untyped, sum(typed.values()))
    cpu = float(tres.get("cpu", "0") or 0)
    mem = mem_mib(tres["mem"]) if tres.get("mem") else 0
    mig = sorted(t for t in typed if is_profile(t))
    if mig:  # `gres/gpu:1g.10gb=2`: one member per MIG instance (replay.importers.migmap)
        if len(typed) > 1:
            raise ValueError(
                "asks for MIG instances of several profiles, or whole GPUs beside them "
                f"({', '.join(sorted(typed))}): a member holds one MIG instance"
            )
        count = typed[mig[0]]
        n = max(1, nodes, count)
        return ev.Resources(
            mig_profile=mig[0].lower(),
            cpu_milli=int(-(-cpu * 1000 // n)),
            memory_mib=-(-mem // n),
        ), count
    n = max(1, nodes)
    if n > MAX_NODES:
        raise ValueError(f"{nodes} nodes: at most {MAX_NODES:,}")
    if not 0 <= total <= MAX_GPUS_PER_NODE * n or -(-total // n) > MAX_GPUS_PER_NODE:
        raise ValueError(
            f"{total} GPUs on {n} node(s): at most {MAX_GPUS_PER_NODE} per node (docs/inputs.md)"
        )
    if not 0 <= cpu <= MAX_VALUE / 1000 or not 0 <= mem <= MAX_VALUE:  # also NaN, inf
        raise ValueError(f"cpu={tres.get('cpu')!r} or mem={tres.get('mem')!r} out of range")
    return ev.Resources(
        gpus=-(-total // n),
        cpu_milli=int(-(-cpu * 1000 // n)),
        memory_mib=-(-mem // n),
        gpu_models=tuple(sorted(typed)),
    ), total


def parse_timelimit(text: str) -> int | None:
    """Seconds of a Slurm time limit (`1-00:00:00`, `02:00:00`, `90`, `30:00`, `2-12`), or
    None for `UNLIMITED`, `Partition_Limit`, `INVALID`, empty or anything unreadable."""
    text = text.strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if m is None:
        return None
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is not None:  # D-H, D-H:M, D-H:M:S
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # H:M:S
        seconds = a * 3600 + b * 60 + c
    elif b is not None:  # M:S
        seconds = a * 60 + b
    else:  # M
        seconds = a * 60
    return seconds or None


_DEP_KINDS = {
    "afterok": "succeeded",
    "afternotok": "failed",
    "afterany": "finished",
    "after": "started",
}


def parse_dependency(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Slurm's dependency expression -> ([(job id, on), ...], [dropped parts]). Job ids keep
    an array task (`123_4`); `123_*` names every task of array 123 (returned as `123`)."""
    text = text.strip()
    if not text or text.lower() in ("(null)", "none"):
        return [], []
    if "?" in text:
        return [], [f"{text} (OR-list)"]
    out: list[tuple[str, str]] = []
    dropped: list[str] = []
    for part in text.split(","):
        part = part.split("(", 1)[0].strip()
        kind, _, ids = part.partition(":")
        on = _DEP_KINDS.get(kind.lower())
        if on is None or not ids:
            dropped.append(part)
            continue
        for job in ids.split(":"):
            job = job.split("+", 1)[0].strip().removesuffix("_*")
            if job:
                out.append((job, on))
    return out, dropped


def _known_jobs(
    path: str, header: list[str], columns: str | None, owner: Callable[[dict[str, str]], str]
) -> dict[str, list[tuple[str, str]]]:
    """Job ids the dump imports with their tenants, by base id: `{'123': [('123', 'a')],
    '124': [('124_1', 'a'), ('124_2', 'a')]}` (a first pass over the file, made only when it
    has a `Dependency` column)."""
    at = header.index("JobID")
    known: dict[str, set[tuple[str, str]]] = {}
    with open(path, newline="") as f:
        for n, text in enumerate(f):
            values = text.rstrip("\r\n").split("|")
            if n == 0 and columns is None or len(values) != len(header):
                continue
            m = _JOBID.match(values[at].strip())
            if m is None or m.group("step") is not None:
                continue
            base, task = m.group("base"), m.group("task")
            if task is not None and task.startswith("["):
                try:
                    ids = [f"{base}_{t}" for t in expand_tasks(task)]
                except ValueError:
                    continue
            else:
                ids = [base if task is None else f"{base}_{task}"]
            tenant = owner(dict(zip(header, values, strict=True)))
            known.setdefault(base, set()).update((i, tenant) for i in ids)
    return {b: sorted(v) for b, v in known.items()}


def expand_tasks(spec: str) -> list[str]:
    """`[5-9%2]` / `[1,3,5-7]` -> task ids."""
    body = spec.strip("[]").split("%", 1)[0]
    out: list[str] = []
    for part in body.split(","):
        a, sep, b = part.partition("-")
        if sep:
            out += [str(i) for i in range(int(a), int(b) + 1)]
        elif a:
            out.append(a)
    return out


def read_sinfo(
    path: str | Path,
    vocab: Vocabulary | None = None,
    notes: list[str] | None = None,
    mig_model: str | None = None,
) -> tuple[ev.NodeInfo, ...]:
    """Nodes from `sinfo --Node --noheader --format='%N|%c|%m|%G|%P'` (the partition column
    optional), labelled with their partitions."""
    out: dict[str, ev.NodeInfo] = {}
    partitions: dict[str, list[str]] = {}
    try:
        f = open_text(path)
    except OSError as exc:
        raise TraceImportError(f"{path}: {exc.strerror or exc}") from exc
    with f:
        for line, text in enumerate(f, 1):
            text = text.strip()
            problem = row_problem(text)
            if problem is not None:
                raise TraceImportError(f"{path}:{line}: {problem}")
            if not text or text.upper().startswith(("NODELIST", "HOSTNAMES", "NODE_NAME")):
                continue
            parts = text.split("|")
            if len(parts) < 4:
                raise TraceImportError(
                    f"{path}:{line}: expected NODE|CPUS|MEMORY|GRES, got {text!r}"
                )
            name, cpus, mem, gres = (p.strip() for p in parts[:4])
            if len(parts) > 4 and parts[4].strip().rstrip("*"):
                partitions.setdefault(name, []).append(parts[4].strip().rstrip("*"))
            if name in out:
                continue  # the same node under another partition
            try:
                ev.validate_token("node", name)
                cpu_milli = int(float(cpus.split("/")[-1]) * 1000)
                memory = int(float(mem.rstrip("+")))
            except ev.InvalidId as exc:
                raise TraceImportError(f"{path}:{line}: {exc}") from None
            except ValueError:
                raise TraceImportError(
                    f"{path}:{line}: CPUS and MEMORY must be numbers, got {cpus!r}, {mem!r}"
                ) from None
            gpus: list[ev.GpuInfo] = []
            mig: dict[str, int] = {}
            for g in gres.split(","):
                g = g.split("(", 1)[0].strip()
                bits = g.split(":")
                if bits[0] != "gpu" or len(bits) < 2:
                    continue  # (null), shard:..., mps:...
                raw_model = bits[1] if len(bits) >= 3 else "gpu"
                try:
                    count = int(bits[-1])
                except ValueError:
                    raise TraceImportError(
                        f"{path}:{line}: cannot read GRES {g!r} (expected gpu:N or gpu:TYPE:N)"
                    ) from None
                if len(bits) >= 3 and is_profile(raw_model):
                    mig[raw_model.lower()] = mig.get(raw_model.lower(), 0) + count
                    continue  # MIG instances: GPUs rebuilt below (replay.importers.migmap)
                if not 0 <= len(gpus) + count <= MAX_GPUS_PER_NODE:
                    raise TraceImportError(
                        f"{path}:{line}: GRES {g!r}: more than {MAX_GPUS_PER_NODE} GPUs on one"
                        " node (docs/inputs.md)"
                    )
                model = vocab(raw_model) if vocab is not None and len(bits) >= 3 else raw_model
                for _ in range(count):
                    i = len(gpus)
                    gpus.append(
                        ev.GpuInfo(
                            index=i,
                            uuid=f"GPU-{name}-{i}",
                            model=model,
                            memory_mib=model_memory_mib(model) or gpu_memory_mib(raw_model),
                            clique=f"{name}-nvl0",
                        )
                    )
            if mig:
                gpus += mig_gpus(
                    name,
                    mig,
                    len(gpus),
                    notes if notes is not None else [],
                    model=mig_model,
                    where=f"{path}:{line}",
                )
            out[name] = ev.NodeInfo(
                name=name, cpu_milli=cpu_milli, memory_mib=memory, gpus=tuple(gpus)
            )
    labels = partition_labels(partitions)
    return tuple(
        msgspec.structs.replace(n, labels=labels[n.name]) if labels.get(n.name) else n
        for n in out.values()
    )


def read_nodes_file(path: str | Path) -> tuple[ev.NodeInfo, ...]:
    """`cluster.nodes` of a gpuledger configuration file."""
    from gpuledger.services.domain.inputs.configfile import ConfigFileError, node_infos

    doc = read_yaml(path)
    try:
        return node_infos(doc)
    except ConfigFileError as exc:
        raise TraceImportError("\n".join(f"{path}: {p}" for p in exc.problems)) from None


@dataclass
class SlurmImport:
    summary: dict
    events: int


def import_slurm(
    sacct: str | Path,
    out: str | Path,
    *,
    sinfo: str | Path | None = None,
    nodes_file: str | Path | None = None,
    mapping: str | Path | None = None,
    timezone: str = "UTC",
    progress: Callable[[int, int], None] | None = None,
    skips: SkipLog | None = None,
    run_size: int = 200_000,
    columns: str | None = None,
    over_time_limit_s: int = 0,
) -> SlurmImport:
    if (sinfo is None) == (nodes_file is None):
        raise TraceImportError("give the nodes with exactly one of --sinfo FILE or --nodes FILE")
    m = load_mapping(mapping, "slurm")
    naming = Naming(m, "normal")
    nodes = (
        read_sinfo(sinfo, naming.gpu, naming.notes, m.mig_model)
        if sinfo is not None
        else read_nodes_file(nodes_file)
    )
    naming.partition = PartitionSelectors(nodes)
    tenant_from = m.tenant_from or "account"
    try:
        tz = ZoneInfo(timezone)
    except Exception:  # noqa: BLE001 - zoneinfo raises several kinds
        raise TraceImportError(
            f"--timezone: unknown time zone {timezone!r} (e.g. UTC, Europe/Berlin)"
        ) from None
    # a run is stopped at its time limit as Slurm stops it: OverTimeLimit later (default 0);
    # a preempted one at once (GraceTime, default 0)
    log = ImportLog(
        PRODUCER,
        skips=skips,
        run_size=run_size,
        checkpoint=m.checkpoint_rules,
        enforce_grace_s=over_time_limit_s,
    )
    path = str(sacct)
    where = lambda line: f"{path}:{line}"  # noqa: E731
    try:
        f = open_text(sacct)
    except OSError as exc:
        raise TraceImportError(f"{sacct}: {exc.strerror or exc}") from exc
    with f:
        bar = Progress(f, progress)
        header = _header(f, path, columns)
        if "Dependency" in header:
            naming.known_jobs = _known_jobs(
                path,
                header,
                columns,
                lambda row: naming.tenant_for(_owner(row, tenant_from), "default"),
            )
        group: list[_Row] = []
        steps = 0

        array: list[list[_Row]] = []  # the task rows of one array (all its tasks at once)

        def flush() -> None:
            if group:
                if group[0].task is not None and all(r.het is None for r in group):
                    array.append(list(group))
                else:
                    _emit(group, log, naming, tenant_from, tz, where)
                group.clear()

        def flush_array() -> None:
            if array:
                _emit_array(array[0][0].base, array, log, naming, tenant_from, tz, where)
                array.clear()

        for line, values in _rows_by_job(f, header, bar, log, where, run_size):
            row = dict(zip(header, values, strict=True))
            mid = _JOBID.match(row["JobID"].strip())
            base, task, het, step = (
                mid.group("base"),
                mid.group("task"),
                mid.group("het"),
                mid.group("step"),
            )
            if step is not None:
                if group and group[0].base == base and group[-1].task == task:
                    steps += 1  # folded into its job
                else:
                    log.skips.skip(where(line), "step row without its job row")
                continue
            if group and (group[0].base != base or group[0].task != task):
                flush()
            if array and array[0][0].base != base:
                flush_array()
            group.append(_Row(line, base, task, None if het is None else int(het), row))
        flush()
        flush_array()
        bar.done()
    doc = naming.document(sum(len(n.gpus) for n in nodes))
    at_ms = log.first_ms or 0
    from gpuledger.services.domain.inputs.configfile import ConfigFileError

    try:
        head = head_events(doc, nodes, PRODUCER, at_ms)
    except ConfigFileError as exc:
        raise TraceImportError(
            "\n".join(f"{mapping or 'mapping'}: {p}" for p in exc.problems)
        ) from None
    n = log.write(out, head, where)
    summary = {
        "events": n,
        "nodes": len(nodes),
        "gpus": sum(len(x.gpus) for x in nodes),
        "steps_folded": steps,
        **log.summary(),
        **naming.partition.summary(),
        **naming.warnings(),
        **({"dependencies_dropped": naming.dependencies_dropped} if "Dependency" in header else {}),
    }
    return SlurmImport(summary=summary, events=n)


def _header(f, path: str, columns: str | None) -> list[str]:
    """The column names: the file's first line, or `--columns` (a headerless dump)."""
    if columns is not None:
        header = [c.strip() for c in columns.split(",") if c.strip()]
        where = "--columns"
        pos = f.tell()
        first = f.readline()
        if first.rstrip("\r\n").split("|") != header and not _looks_like_header(first):
            f.seek(pos)  # the file has no header: its first line is data
    else:
        first = f.readline()
        header = first.rstrip("\r\n").split("|")
        where = f"{path}:1"
        if first.strip() and not _looks_like_header(first):
            raise TraceImportError(
                f"{path}:1: the first line is not a header ({first.strip()[:40]!r}...): the dump "
                "was written with --noheader; pass its columns in the --format order with "
                "--columns JobID,JobIDRaw,...,AllocTRES, or write it again without --noheader"
            )
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceImportError(
            f"{where}: missing column(s) {', '.join(missing)} (was it written with --parsable2 "
            f"and the --format of `gpuledger import slurm --help`?)"
        )
    if not any(c in header for c in GPU_COLUMNS):
        raise TraceImportError(
            f"{where}: missing column ReqTRES, AllocTRES, AllocGRES or ReqGRES (GPUs come from "
            "TRES or GRES)"
        )
    return header


def _looks_like_header(text: str) -> bool:
    return "JobID" in text.split("|")


def _job_key(job_id: str) -> tuple[int, str]:
    m = _JOBID.match(job_id.strip())
    return (int(m.group("base")), m.group("task") or "") if m else (-1, "")


def _rows_by_job(f, header, bar, log: ImportLog, where, run_size: int):
    """(line, values) of every readable row, grouped by job: sorted by (job id, task, line),
    so the rows of one job (its requeued runs, its steps) come together wherever they stood in
    the file, in file order within the job. Bounded memory: sorted runs of `run_size` rows
    spill to temporary files and are merged (an external merge sort)."""
    buf: list[tuple[int, str, int, str]] = []
    runs: list[str] = []
    jobid_at = header.index("JobID")

    def spill() -> None:
        buf.sort()
        fd, name = tempfile.mkstemp(prefix="gpuledger-sacct-", suffix=".run")
        with os.fdopen(fd, "w") as out:
            for base, task, line, text in buf:
                out.write(f"{base} {task} {line} {text}\n")
        runs.append(name)
        buf.clear()

    def read(name: str):
        with open(name) as r:
            for raw in r:
                base, task, line, text = raw.rstrip("\n").split(" ", 3)
                yield int(base), task, int(line), text

    try:
        for line, text in enumerate(f, 1 if f.tell() == 0 else 2):
            bar.tick(line)
            text = text.rstrip("\r\n")
            if not text:
                continue
            problem = row_problem(text)
            if problem is not None:
                log.skips.skip(where(line), problem)
                continue
            values = text.split("|")
            if len(values) != len(header):
                log.skips.skip(where(line), f"{len(values)} fields, header has {len(header)}")
                continue
            job_id = values[jobid_at]
            if not _JOBID.match(job_id.strip()):
                log.skips.skip(where(line), f"cannot read JobID {job_id!r}")
                continue
            base, task = _job_key(job_id)
            buf.append((base, task, line, text))
            if len(buf) >= run_size:
                spill()
        buf.sort()
        for _, _, line, text in heapq.merge(iter(buf), *(read(n) for n in runs)):
            yield line, text.split("|")
    finally:
        for name in runs:
            os.unlink(name)


def never_ran(row: dict[str, str]) -> bool:
    """A `CANCELLED` row of a job that was never given nodes: `NodeList` `None assigned` (and
    no AllocTRES where the dump has the column). Slurm 22.05 writes Start = End = the cancel
    time for a job cancelled (held, future --begin) before its first record reached slurmdbd."""
    if not (row.get("State") or "").strip().upper().startswith("CANCELLED"):
        return False
    nodes = row.get("NodeList")
    if nodes is None or not nodes.strip().lower().startswith("none"):
        return False
    return not (row.get("AllocTRES") or "").strip()


def _owner(row: dict[str, str], tenant_from: str) -> str:
    if tenant_from == "account/user":
        return f"{row.get('Account', '')}/{row.get('User', '')}"
    return row.get(
        {"account": "Account", "user": "User", "partition": "Partition"}[tenant_from], ""
    )


def _shape(row: dict[str, str], where: str, log: ImportLog) -> tuple[ev.Resources, int, int] | None:
    text = (row.get("NNodes") or "").strip()
    m = re.match(r"\d+", text) if text else None
    if text and m is None:
        log.skips.skip(where, f"cannot read NNodes {row['NNodes']!r}")
        return None
    # NNodes 0 (a job that ended before it was given nodes) is one member, not a gang of none
    nodes = max(1, int(m.group(0))) if m else 1
    tres_text = (row.get("AllocTRES") or "").strip() or (row.get("ReqTRES") or "").strip()
    try:
        tres = parse_tres(tres_text)
        if not any(k == "gres/gpu" or k.startswith("gres/gpu:") for k in tres):
            # clusters without AccountingStorageTRES=gres/gpu record GPUs only as GRES
            gres = (row.get("AllocGRES") or "").strip() or (row.get("ReqGRES") or "").strip()
            tres.update(gres_tres(gres))
        res, total = tres_resources(tres, nodes)
    except ValueError as exc:
        log.skips.skip(where, f"cannot read TRES {tres_text!r}: {exc}")
        return None
    if res.mig_profile:
        nodes = max(nodes, total)  # one member per MIG instance
    return res, nodes, total


def gres_tres(text: str) -> dict[str, str]:
    """`gpu:a100:2(IDX:0-1)`, `gpu:2`, `gres:gpu:2` (AllocGRES / ReqGRES) -> TRES entries
    (`gres/gpu:a100=2`, `gres/gpu=2`)."""
    out: dict[str, str] = {}
    for part in text.split(","):
        bits = part.split("(", 1)[0].strip().split(":")
        if bits and bits[0] == "gres":
            bits = bits[1:]
        if len(bits) < 2 or bits[0] != "gpu":
            continue
        count = bits[-1]
        if not count.isdigit():
            raise ValueError(f"cannot read GRES {part!r}")
        key = "gres/gpu" if len(bits) == 2 else f"gres/gpu:{bits[1]}"
        out[key] = str(int(out.get(key, "0")) + int(count))
    return out


_HOSTS = re.compile(r"([^,\[]+)(?:\[([^\]]*)\])?")


def expand_nodelist(text: str) -> tuple[str, ...]:
    """`gpu-a[01-02,05],cpu-01` -> ('gpu-a01', 'gpu-a02', 'gpu-a05', 'cpu-01'); `None
    assigned` and empty -> ()."""
    text = text.strip()
    if not text or text.lower().startswith("none"):
        return ()
    out: list[str] = []
    for m in _HOSTS.finditer(text):
        prefix, ranges = m.group(1).strip(","), m.group(2)
        if not prefix:
            continue
        if ranges is None:
            out.append(prefix)
            continue
        for r in ranges.split(","):
            a, sep, b = r.partition("-")
            if sep and a.isdigit() and b.isdigit():
                out += [f"{prefix}{i:0{len(a)}d}" for i in range(int(a), int(b) + 1)]
            else:
                out.append(f"{prefix}{a}")
    return tuple(out)


def _emit(
    group: list[_Row],
    log: ImportLog,
    naming: Naming,
    tenant_from: str,
    tz: ZoneInfo,
    where: Callable[[int], str],
) -> None:
    first = group[0]
    hets = sorted({r.het for r in group if r.het is not None})
    if hets:
        comps = {h: [r for r in group if r.het == h] for h in hets}
        shapes = {}
        for h, rows in comps.items():
            s = _shape(rows[-1].fields, where(rows[-1].line), log)
            if s is None:
                return
            shapes[h] = s
        if len({s[0] for s in shapes.values()}) == 1:
            res = shapes[hets[0]][0]
            _job(
                first.base,
                [comps[h][-1] for h in hets][0],
                comps[hets[0]],
                res,
                sum(s[1] for s in shapes.values()),
                log,
                naming,
                tenant_from,
                tz,
                where,
            )
        else:
            for h in hets:
                res, nodes, _ = shapes[h]
                _job(
                    f"{first.base}+{h}",
                    comps[h][-1],
                    comps[h],
                    res,
                    nodes,
                    log,
                    naming,
                    tenant_from,
                    tz,
                    where,
                )
        return
    task = first.task
    last = group[-1]
    shape = _shape(last.fields, where(last.line), log)
    if shape is None:
        return
    job_id = first.base if task is None else f"{first.base}_{task}"
    _job(job_id, last, group, shape[0], shape[1], log, naming, tenant_from, tz, where)


class _Quiet:
    """An import log that forgets its skips (a second reading of a row already read)."""

    class skips:  # noqa: N801 - quacks like ImportLog.skips
        @staticmethod
        def skip(where: str, reason: str) -> None:
            pass


@dataclass
class _Task:
    index: int
    job: ObservedJob
    allocated: bool
    key: tuple
    """Its shape as allocated (as requested when never allocated) and what else an array's
    tasks share: tenant, class, partition, selector, time limit, dependencies."""
    requested: tuple
    """Its shape as requested, with the same rest."""


def _emit_array(
    base: str,
    groups: list[list[_Row]],
    log: ImportLog,
    naming: Naming,
    tenant_from: str,
    tz: ZoneInfo,
    where: Callable[[int], str],
) -> None:
    """The rows of array `base` (tasks `base_4`, pending records `base_[5-9%2]`) as an array
    job `base` (docs/importers.md, "Arrays"): its shape is the most common among its
    allocated tasks (as allocated; ties: the lowest index), or among all its tasks (as
    requested) when none was allocated; a task that was allocated another shape, or never
    allocated and requested another, is imported as a job of its own `base_<index>`
    (counted in the summary's `array_tasks_split`). The tasks of that shape form one array
    per run of consecutive indexes: `base` for the first, `base_<first>-<last>` after a hole
    (a task of another shape, or one the dump does not hold)."""
    entries, max_running = _array_entries(base, groups, log, where)
    tasks = _array_tasks(base, entries, log, naming, tenant_from, tz, where)
    if tasks:
        _add_array_runs(base, tasks, max_running, log, naming, where)


def _array_entries(
    base: str, groups: list[list[_Row]], log: ImportLog, where: Callable[[int], str]
) -> tuple[dict[int, list[_Row]], int | None]:
    """Each task index of array `base` with its rows (an index listed twice is skipped), and
    the array's `%N` limit of running tasks (None: none given)."""
    entries: dict[int, list[_Row]] = {}
    max_running = None
    for group in groups:
        last, spec = group[-1], group[0].task or ""
        try:
            indexes = [int(t) for t in expand_tasks(spec)] if spec.startswith("[") else [int(spec)]
        except ValueError:
            log.skips.skip(where(last.line), f"cannot read array range {spec!r}")
            continue
        limit = spec.strip("[]").partition("%")[2]
        if limit.isdigit() and int(limit) > 0:
            max_running = int(limit)  # Slurm `%N`
        for i in indexes:
            if i in entries:
                log.skips.skip(where(last.line), f"array task {base}_{i} listed twice")
            else:
                entries[i] = group
    return entries, max_running


def _array_tasks(
    base: str,
    entries: dict[int, list[_Row]],
    log: ImportLog,
    naming: Naming,
    tenant_from: str,
    tz: ZoneInfo,
    where: Callable[[int], str],
) -> list[_Task]:
    """The importable tasks, by index, each with its shape as allocated and as requested."""
    deps: dict[tuple[str, str], tuple[ev.Dependency, ...]] = {}

    def dependency(text: str, tenant: str) -> tuple[ev.Dependency, ...]:
        if (text, tenant) not in deps:  # once per array (its dropped ones counted once)
            deps[text, tenant] = _depends_on(text, base, tenant, naming)
        return deps[text, tenant]

    shapes: dict[int, tuple] = {}
    tasks: list[_Task] = []
    for i in sorted(entries):
        group = entries[i]
        last = group[-1]
        if id(group) not in shapes:
            requested = {**last.fields, "AllocTRES": "", "AllocGRES": ""}
            shapes[id(group)] = (
                _shape(last.fields, where(last.line), log),
                _shape(requested, where(last.line), _Quiet),  # type: ignore[arg-type]  # a class with the log's `skip`, no instance
            )
        shape, requested = shapes[id(group)]
        if shape is None:
            continue  # skipped with its reason
        job = _observed(
            f"{base}{ARRAY_SEPARATOR}{i}",
            last,
            group,
            shape[0],
            shape[1],
            log,
            naming,
            tenant_from,
            tz,
            where,
            dependency,
        )
        if job is None:
            continue
        if job.end_ms is not None and job.end_ms < (job.start_ms or job.submit_ms):
            what = "start" if job.start_ms is not None else "submit"
            log.skips.skip(where(last.line), f"end time before {what} time")
            continue  # (checked here so that one task's times never drop its array)
        rest = (
            job.tenant,
            job.priority_class,
            job.partition,
            tuple(sorted((job.node_selector or {}).items())),
            job.time_limit_s,
            job.depends_on,
        )
        allocated = any((last.fields.get(c) or "").strip() for c in ("AllocTRES", "AllocGRES"))
        asked = (requested or shape)[:2]
        tasks.append(_Task(i, job, allocated, (*shape[:2], *rest), (*asked, *rest)))
    return tasks


def _add_array_runs(
    base: str,
    tasks: list[_Task],
    max_running: int | None,
    log: ImportLog,
    naming: Naming,
    where: Callable[[int], str],
) -> None:
    """The tasks of the most common shape as arrays, one per run of consecutive indexes; the
    others, and the tasks that never ran (the replay cancels them as they are submitted),
    as jobs of their own."""
    pool = [t for t in tasks if t.allocated] or tasks
    counts: dict[tuple, int] = {}
    for t in pool:
        counts[t.key] = counts.get(t.key, 0) + 1
    best = max(pool, key=lambda t: (counts[t.key], -t.index))  # first of the most common
    fits = [
        t
        for t in tasks
        if (t.key == best.key if t.allocated else t.requested == best.requested)
        and not never_runs(t.job.start_ms, t.job.end_ms, bool(t.job.depends_on))
    ]
    runs: list[list[_Task]] = []
    for t in fits:  # runs of consecutive indexes
        if runs and runs[-1][-1].index == t.index - 1:
            runs[-1].append(t)
        else:
            runs.append([t])
    placed = naming.arrays.setdefault(base, {})
    fit = {t.index for t in fits}
    for n, run in enumerate(runs):
        # the first run is the array `base`; one after a hole `base_<first>-<last>`
        array_id = base if n == 0 else f"{base}_{run[0].index}-{run[-1].index}"
        members = [
            (t.index, dataclasses.replace(t.job, job_id=f"{array_id}{ARRAY_SEPARATOR}{t.index}"))
            for t in run
        ]
        if log.add_array(
            array_id, members, max_running, where(run[0].job.line), resources=best.job.resources
        ):
            for i, job in members:
                placed[f"{base}_{i}"] = (job.job_id, array_id)
    for t in tasks:
        if t.index not in fit:
            own = dataclasses.replace(t.job, job_id=f"{base}_{t.index}")
            if log.add_job(own, where(t.job.line)):
                placed[own.job_id] = (own.job_id, own.job_id)
                log.array_tasks_split += 1


def _imported_ids(names: list[str], whole: bool, base: str, naming: Naming) -> list[str]:
    """The imported ids of Slurm job ids `names` of job `base`: an array task `123_4` is
    `123@4` (`123_7-9@8` in an array after a hole, `123_4` when imported as a job of its
    own); with `whole` (a dependency on the whole job `123`) each task is the job it is in
    (the array `123`, `123_7-9`, or itself)."""
    placed = naming.arrays.get(base)
    out: list[str] = []
    for n in names:
        if "_" not in n:
            out.append(n)
            continue
        if placed is None:  # an array later in the dump: its tasks assumed in the array
            imported, job = f"{base}{ARRAY_SEPARATOR}{n.split('_', 1)[1]}", base
        elif n in placed:
            imported, job = placed[n]
        else:
            continue  # a task the import skipped
        out.append(job if whole else imported)
    return list(dict.fromkeys(out))


def _depends_on(text: str, job_id: str, tenant: str, naming: Naming) -> tuple[ev.Dependency, ...]:
    """`depends_on` of a job from its `Dependency` cell: jobs of the dump and of its tenant
    only (a dependency on an array names the array, one on a task names the task
    `123@4`); the rest is counted as dropped."""
    deps, dropped = parse_dependency(text)
    out: list[ev.Dependency] = []
    for job, on in deps:
        base = job.split("_", 1)[0]
        tasks = [i for i, t in naming.known_jobs.get(base, []) if t == tenant]
        names = [job] if job in tasks else (tasks if job == base else [])
        names = _imported_ids(names, job == base, base, naming)
        names = [n for n in names if n != job_id]
        if not names:
            dropped.append(f"{job} (not a job of the dump in tenant {tenant})")
        out += [ev.Dependency(job=n, on=on) for n in names]
    naming.dependencies_dropped += len(dropped)
    return tuple(dict.fromkeys(out))


def _job(
    job_id: str,
    last: _Row,
    records: list[_Row],
    res: ev.Resources,
    nodes: int,
    log: ImportLog,
    naming: Naming,
    tenant_from: str,
    tz: ZoneInfo,
    where: Callable[[int], str],
) -> None:
    job = _observed(job_id, last, records, res, nodes, log, naming, tenant_from, tz, where)
    if job is not None:
        log.add_job(job, where(last.line))


def _observed(
    job_id: str,
    last: _Row,
    records: list[_Row],
    res: ev.Resources,
    nodes: int,
    log: ImportLog,
    naming: Naming,
    tenant_from: str,
    tz: ZoneInfo,
    where: Callable[[int], str],
    dependency: Callable[[str, str], tuple[ev.Dependency, ...]] | None = None,
) -> ObservedJob | None:
    """The job a group of rows records (its last row's shape and times, its first row's
    Submit, the earlier rows as runs), or None (and the row skipped) when unreadable."""
    row = last.fields
    try:
        submit = parse_time(records[0].fields["Submit"], tz)
        start = parse_time(row["Start"], tz)
        end = parse_time(row["End"], tz)
    except ValueError as exc:
        log.skips.skip(where(last.line), f"cannot read a time: {exc}")
        return None
    if submit is None:
        log.skips.skip(where(last.line), "no Submit time")
        return None
    state = row["State"].split()[0].upper() if row["State"].strip() else ""
    if never_ran(row):
        start = None  # Start = End = the cancel time of a job that was never given nodes
    if (
        state in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED")
        and end is not None
        and start is None
    ):
        end = None  # sacct prints End=Unknown for these; never a cancel
    runs: list[Run] = []
    for r in records[:-1]:  # earlier runs of a requeued job (`--duplicates`), in file order
        try:
            runs.append(
                Run(
                    None if never_ran(r.fields) else parse_time(r.fields["Start"], tz),
                    parse_time(r.fields["End"], tz),
                    r.fields["State"].split()[0].upper() if r.fields["State"].strip() else "",
                )
            )
        except ValueError:
            runs.append(Run(None, None, ""))
    qos = row.get("QOS", "")
    tenant = naming.tenant_for(_owner(row, tenant_from), "default")
    job = ObservedJob(
        job_id=job_id,
        tenant=tenant,
        priority_class=naming.class_for(qos),
        resources=msgspec.structs.replace(res, gpu_models=naming.gpu.job(res.gpu_models))
        if res.gpu_models
        else res,
        replicas=nodes,
        submit_ms=submit,
        start_ms=start,
        end_ms=end,
        line=last.line,
        requeued=len(records) - 1,
        node_selector=naming.partition(row.get("Partition", "")),
        state=state,
        nodes=expand_nodelist(row.get("NodeList", "")),
        runs=tuple(runs),
        partition=row.get("Partition", "").strip() or None,
        source_priority=qos.strip() or None,
        time_limit_s=parse_timelimit(row.get("Timelimit") or ""),
        depends_on=(dependency or (lambda t, _: _depends_on(t, job_id, tenant, naming)))(
            row.get("Dependency") or "", tenant
        ),
    )
    return job
