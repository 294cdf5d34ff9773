"""Reading a Slurm accounting dump (`sacct --parsable2`): the header, rows grouped by job in
bounded memory, and the cells (times, TRES, time limits, dependencies, node lists, the
submit line).

- rows with the same JobID (`--duplicates`: a requeued job's runs), wherever they stand in the
  file, come together: rows are sorted by job id in bounded memory (an external merge sort);
- resources from AllocTRES when the job was allocated, else ReqTRES: `gres/gpu=8` or typed
  `gres/gpu:a100=8` (typed -> `gpu_models`), `cpu=`, `mem=` (K/M/G/T); without a `gres/gpu`
  entry, from AllocGRES / ReqGRES;
- times `YYYY-MM-DDTHH:MM:SS` in the dump's time zone; `Unknown`, `None` and empty are no
  time; a CANCELLED row with `NodeList` `None assigned` and no AllocTRES never started,
  whatever its Start says (Slurm writes Start = End = the cancel time for a job cancelled
  before its first record reached slurmdbd);
- `Timelimit` (`[D-]HH:MM:SS`, `MM:SS`, `MM`, `D-HH[:MM]`) -> seconds; `UNLIMITED`,
  `Partition_Limit`, empty or unreadable -> no limit;
- `Dependency` (as `squeue -o %E` / `scontrol show job` print it:
  `afterok:123,afterany:124:125_3(unfulfilled)`) -> (job, on) pairs: `afterok` succeeded,
  `afternotok` failed, `afterany` finished, `after` started (a `+minutes` delay is dropped);
  OR-lists (`?`), `singleton`, `aftercorr` and `afterburstbuffer` are dropped.
"""

from __future__ import annotations

import heapq
import os
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from gpuledger import events as ev
from gpuledger.replay.importers.common import (
    ImportLog,
    TraceImportError,
    row_problem,
)
from gpuledger.replay.importers.migmap import is_profile
from gpuledger.services.domain.inputs.quantities import MAX_VALUE
from gpuledger.services.domain.inputs.schema import MAX_GPUS_PER_NODE, MAX_NODES

REQUIRED = ("JobID", "Submit", "Start", "End", "State", "NNodes")
"""Columns a dump must have; `Account` (-> tenant `default`) and `QOS` (-> class `normal`)
may be missing."""

GPU_COLUMNS = ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES")

NO_TIME = {"", "unknown", "none", "n/a"}

JOB_ID = re.compile(
    r"^(?P<base>\d+)(?:_(?P<task>\d+|\[[^\]]*\]))?(?:\+(?P<het>\d+))?(?:\.(?P<step>.+))?$"
)

_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$", re.I)

_MEM_MIB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


@dataclass
class Row:
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


def _slices(profile: str) -> tuple[int, int, str]:
    """A MIG profile's size for ordering: (memory GB, compute slices, name)."""
    compute, _, memory = profile.lower().partition("g.")
    return int(re.sub(r"\D", "", memory) or 0), int(compute or 0), profile


def tres_resources(
    tres: dict[str, str], nodes: int, untyped_request: bool = False
) -> tuple[ev.Resources, int]:
    """Per-member resources of a job of `nodes` members; and its total GPUs.

    A member holds one MIG instance of one profile, so a job given instances of several
    profiles is skipped, except when it asked for untyped GPUs (`untyped_request`, e.g.
    `--gres=gpu:2` given a `1g.10gb` and a `3g.40gb`): any instance would have done, so it
    is one member per instance, all of the smallest profile it was given (in memory, then
    compute slices), a slice Slurm itself gave it (its GPU-hours are then those slices')."""
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
    if untyped_request and len(mig) > 1 and len(mig) == len(typed):
        smallest = min(mig, key=_slices)
        typed, mig = {smallest: sum(typed.values())}, [smallest]
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


def known_jobs_of(
    path: str, header: list[str], columns: str | None, owner: Callable[[dict[str, str]], str]
) -> dict[str, list[tuple[str, str]]]:
    """Job ids the dump imports with their tenants, by base id: `{'123': [('123', 'a')],
    '124': [('124_1', 'a'), ('124_2', 'a')]}` (a first pass over the file, made only when it
    has a `Dependency` or `SubmitLine` column)."""
    at = header.index("JobID")
    known: dict[str, set[tuple[str, str]]] = {}
    with open(path, newline="") as f:
        for n, text in enumerate(f):
            values = split_row(text.rstrip("\r\n"), header)
            if n == 0 and columns is None or len(values) != len(header):
                continue
            m = JOB_ID.match(values[at].strip())
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


def read_header(f, path: str, columns: str | None) -> list[str]:
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


def split_row(text: str, header: list[str]) -> list[str]:
    """A row's cells. A `SubmitLine` in the last column may hold `|` itself (`--wrap="a | b"`):
    the cells past the header's count are its own."""
    values = text.split("|")
    if len(values) > len(header) and header[-1] == "SubmitLine":
        values[len(header) - 1 :] = ["|".join(values[len(header) - 1 :])]
    return values


def _looks_like_header(text: str) -> bool:
    return "JobID" in text.split("|")


def _job_key(job_id: str) -> tuple[int, str]:
    m = JOB_ID.match(job_id.strip())
    return (int(m.group("base")), m.group("task") or "") if m else (-1, "")


def rows_by_job(f, header, bar, log: ImportLog, where, run_size: int):
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
            values = split_row(text, header)
            if len(values) != len(header):
                log.skips.skip(where(line), f"{len(values)} fields, header has {len(header)}")
                continue
            job_id = values[jobid_at]
            if not JOB_ID.match(job_id.strip()):
                log.skips.skip(where(line), f"cannot read JobID {job_id!r}")
                continue
            base, task = _job_key(job_id)
            buf.append((base, task, line, text))
            if len(buf) >= run_size:
                spill()
        buf.sort()
        for _, _, line, text in heapq.merge(iter(buf), *(read(n) for n in runs)):
            yield line, split_row(text, header)
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


def row_shape(
    row: dict[str, str], where: str, log: ImportLog
) -> tuple[ev.Resources, int, int] | None:
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
        requested = parse_tres((row.get("ReqTRES") or "").strip())
        untyped = "gres/gpu" in requested and not any(k.startswith("gres/gpu:") for k in requested)
        res, total = tres_resources(tres, nodes, untyped_request=untyped)
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


@dataclass(frozen=True)
class SubmitLine:
    """What a job's submit line (`sacct` `SubmitLine`: `sbatch --array=0-9%2 -d afterok:12
    job.sh`) says that sacct 22.05 prints nowhere else: its dependency (sacct has no
    `Dependency` column) and its array's `%N` (the JobID of a finished task has none)."""

    dependency: str = ""
    """The `--dependency` / `-d` expression, as `parse_dependency` reads it ('' = none)."""
    array_limit: int | None = None
    """The `%N` of `--array` / `-a` (None: none)."""
    held: bool = False
    """Submitted held (`--hold` / `-H`)."""


_VALUE_SHORT = frozenset("aAbcCdDeFGiJLmMnNopqStwx")
"""sbatch / srun / salloc short options that take a value (`-d X`, `-dX`)."""
_FLAG_LONG = frozenset(
    {
        "contiguous", "exclusive", "get-user-env", "help", "hold", "ignore-pbs", "no-kill",
        "no-requeue", "overcommit", "oversubscribe", "parsable", "quiet", "requeue",
        "spread-job", "test-only", "usage", "use-min-nodes", "verbose", "version", "wait",
    }
)  # fmt: skip
"""Long options that take no value (`--hold job.sh`: `job.sh` is the script)."""


def parse_submit_line(text: str) -> SubmitLine:
    """The dependency, array limit and hold of a submit line; the options end at the first
    word that is neither an option nor an option's value (the script; its arguments are not
    read). Slurm stores the line with its quotes gone, so the words after `--wrap=` up to the
    next option are taken for the wrapped command."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: the words as they stand
        words = text.split()
    options: dict[str, str] = {}
    held = False
    i = 1  # words[0]: sbatch / srun / salloc
    while i < len(words):
        w = words[i]
        if w.startswith("--") and len(w) > 2:
            name, eq, value = w[2:].partition("=")
            if not eq and name not in _FLAG_LONG:
                value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 1
            options.setdefault(name, value)
            held |= name == "hold"
        elif w.startswith("-") and len(w) > 1:
            flag = w[1]
            if flag in _VALUE_SHORT:
                value = w[2:].lstrip("=")
                if not value:
                    value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 1
                options.setdefault({"a": "array", "d": "dependency"}.get(flag, flag), value)
            else:  # flags, alone or together (`-H`, `-vH`)
                held |= "H" in w[1:]
        elif "wrap" not in options:
            break  # the script
        i += 1  # (after `--wrap=cmd`, its command's words until the next option)
    limit = options.get("array", "").partition("%")[2]
    return SubmitLine(
        dependency=options.get("dependency", ""),
        array_limit=int(limit) if limit.isdigit() and int(limit) > 0 else None,
        held=held,
    )
