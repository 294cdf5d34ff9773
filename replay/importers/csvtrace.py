"""Import any per-job CSV trace through a mapping file (`gpuledger import csv FILE --mapping MAP.yaml`).

The mapping names the column of each field and how to read it; `examples/openb-mapping.yaml`
maps the Alibaba openb trace and gives the same log as `gpuledger import alibaba-openb`.

    trace: my-cluster                 # the log's producer is import/<trace>
    time: {unit: s, epoch: 0}         # s | ms | us | min | h: numbers counted from `epoch`
                                      #   (epoch seconds or an ISO date); date: ISO dates,
                                      #   or `format: "%Y-%m-%d %H:%M:%S"`, in `timezone`
    jobs:
      id: job_name                    # a column name, or {column, unit, values, default, separator}
      tenant: {column: user, values: {alice: research}, default: shared}   # or {value: constant}
      user: user                      # optional: who submitted the job (else `-`)
      gang: task_group                # optional: adjacent rows with the same value are one gang
      submit: submit_time
      start: start_time
      end: end_time
      gpus: num_gpu
      gpu_milli: {column: gpu_share, unit: fraction}   # milli (default) or fraction (0.5)
      gpu_model: {column: gpu_type, separator: "|"}
      cpu: {column: cpu, unit: cores}                  # cores (default) or milli
      memory: {column: mem, unit: Gi}                  # B, Ki, Mi (default), Gi, Ti, KB, MB, GB, TB
      priority: {column: qos, values: {LS: ls, BE: be}, default: be}
      state: {column: status, values: {ok: COMPLETED, error: FAILED, killed: CANCELLED}}
      node_selector: {pool: {column: role, values: {cpu: cpu-pool}}}   # label -> column spec
    nodes:                            # for --nodes NODES.csv
      name: node
      cpu: {column: cpu_milli, unit: milli}
      memory: {column: memory_mib, unit: Mi}
      gpus: gpu
      gpu_model: model
      gpu_memory: {V100M16: 16Gi, A10: 24Gi}   # by model; a GPU model not listed is an error
      sharing: mps                    # exclusive (default), mps or timeslice
      labels: {pool: node_pool}       # label -> column spec (an empty cell: no label)
    tenants: [{name: shared, guaranteed: all}]  # the config file's tenants; `all` = every GPU
    priority_classes: [{name: ls, value: 125, preemptible: false, slo_class: latency-critical}]
    policy: {}
    rules: {missing_submit: trace_start, cpu_only: keep}
    gpu_models: {G2: A10-24GB}        # site names -> canonical GPU models; or `verbatim`

Rules (documented in the README; every skipped row is reported with its line):

- a value map (`values`) is matched case-insensitively; an empty cell takes `default`; a value
  not in the map is a skipped row (`unknown qos 'X' (expected LS, BE)`);
- empty or `NaN` submit: the job existed before the trace began -> submitted at the trace
  start (`rules.missing_submit: trace_start`, the epoch) or skipped (`skip`);
- times before the trace start (negative) are moved to the trace start;
- started and ended: run time end - start, then the run ends as `state` says (completed
  without it; failed, timed out, or cancelled at its end time: replay.importers.outcomes);
  never started, ended: cancelled as it is submitted (it never ran); started, no end
  (outlived the trace): no run time (runs until the replay ends); neither: pending at the
  end;
- `gpus` 0 and `gpu_milli` 0: a CPU-only member (`rules.cpu_only: keep`, or `skip`);
  `gpus` 1 with `gpu_milli` 1..999: a share of one GPU; `gpus` N: N whole GPUs (gpu_milli
  1000 or empty); gpu_milli above 1000 is a skipped row;
- a job id must be a subject token; a repeated id is skipped (the first in time order is kept);
- GPU model names (jobs' and nodes' `gpu_model`) go through the GPU model vocabulary
  (`services.domain.inputs.gpu_models`: `T4` -> `T4-16GB`, `V100M32` -> `V100-32GB`; a job's family
  name such as `A100` allows every A100), after the mapping's `gpu_models` aliases; names the
  vocabulary does not know are kept verbatim and listed in one warning. `gpu_models:
  verbatim` keeps every name as the trace writes it (examples/openb-mapping.yaml does, so
  that its log equals `import alibaba-openb`'s);
- `jobs.user`: who submitted the job (`JobSpec.user`; `.` and other characters a subject
  token cannot hold become `_`); an empty cell or no column: `-`;
- `jobs.node_selector` / `nodes.labels` (label key -> a column spec): a job goes only to nodes
  carrying every label its row selects (exact match); an empty cell selects nothing for that
  key. Nodes read from `--config-nodes` carry that file's `labels:`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import msgspec

from gpuledger import events as ev
from gpuledger.events.specs import MAX_QUANTITY
from gpuledger.replay.importers.common import (
    ImportLog,
    ObservedJob,
    Progress,
    SkipLog,
    TraceImportError,
    head_events,
    open_text,
    read_yaml,
    row_problem,
)
from gpuledger.services.domain.inputs.gpu_models import Vocabulary
from gpuledger.services.domain.inputs.quantities import mebibytes
from gpuledger.services.domain.inputs.schema import (
    ClassDoc,
    InputError,
    Strict,
    _suggest,
    collect,
    validate_file,
)


class Field(Strict, kw_only=True):
    column: str | None = None
    value: str | int | float | None = None
    """A constant instead of a column."""
    unit: str | None = None
    values: dict[str, str] = {}
    default: str | int | float | None = None
    separator: str | None = None


Spec = str | Field


class TimeSpec(Strict, kw_only=True):
    unit: Literal["s", "ms", "us", "min", "h", "date"] = "s"
    epoch: int | float | str = 0
    format: str | None = None
    timezone: str = "UTC"


class JobColumns(Strict, kw_only=True):
    id: Spec
    tenant: Spec | None = None
    user: Spec | None = None
    """Who submitted the job (characters a user name cannot hold become `_`); None or an
    empty cell: `-`."""
    gang: Spec | None = None
    submit: Spec | None = None
    start: Spec | None = None
    end: Spec | None = None
    gpus: Spec | None = None
    gpu_milli: Spec | None = None
    gpu_model: Spec | None = None
    cpu: Spec | None = None
    memory: Spec | None = None
    priority: Spec | None = None
    state: Spec | None = None
    """How a job that started and ended ended (`COMPLETED`, `FAILED`, `TIMEOUT`,
    `CANCELLED`...: the recorded outcome the replay reproduces, replay.importers.outcomes);
    None: from its times (completed)."""
    group: Spec | None = None
    """Spread group: jobs of one group share `per_node_limit`."""
    per_node_limit: Spec | None = None
    """At most this many instances of the row's group on one node (empty: no limit)."""
    node_selector: dict[str, Spec] = {}
    """Node label key -> the column (spec) holding the value the row's job selects."""


class NodeColumns(Strict, kw_only=True):
    name: Spec
    cpu: Spec | None = None
    memory: Spec | None = None
    gpus: Spec | None = None
    gpu_model: Spec | None = None
    gpu_memory: dict[str, str | int] = {}
    sharing: Literal["exclusive", "mps", "timeslice"] = "exclusive"
    labels: dict[str, Spec] = {}
    """Node label key -> the column (spec) holding the node's value."""


class Rules(Strict, kw_only=True):
    missing_submit: Literal["trace_start", "skip"] = "trace_start"
    cpu_only: Literal["keep", "skip"] = "keep"
    missing_start: Literal["running", "never", "skip"] = "running"
    """An empty start cell: `running` = the job was running when the trace began (started at
    the trace start; a job submitted after the trace start cannot have, and reads as never
    started), `never` = it never started (cancelled at its end, or pending), `skip` = skip the
    row."""


class CsvMapping(Strict, kw_only=True):
    trace: str = "csv"
    time: TimeSpec = TimeSpec()
    jobs: JobColumns
    nodes: NodeColumns | None = None
    tenants: list[dict[str, Any]] = []
    priority_classes: list[ClassDoc] = []
    policy: dict[str, Any] | None = None
    rules: Rules = Rules()
    gpu_models: dict[str, str] | Literal["verbatim"] = {}
    """Site GPU model names -> canonical names (before the vocabulary), or `verbatim`."""
    checkpoint: Any = None
    """`none` (default), `{interval: 30m, save: 60s}`, or by class / source value
    (replay.importers.checkpoint)."""


UNITS = {
    "cpu": {"cores": 1000, "milli": 1},
    "memory": {
        "B": 1 / 2**20,
        "Ki": 1 / 1024,
        "Mi": 1,
        "Gi": 1024,
        "Ti": 1024**2,
        "KB": 1e3 / 2**20,
        "MB": 1e6 / 2**20,
        "GB": 1e9 / 2**20,
        "TB": 1e12 / 2**20,
    },
    "gpu_milli": {"milli": 1, "fraction": 1000},
    "gpus": {"count": 1},
}
TIME_MS = {"s": 1000, "ms": 1, "us": 0.001, "min": 60_000, "h": 3_600_000}


def load_csv_mapping(path: str | Path) -> CsvMapping:
    raw = read_yaml(path)
    problems: list[str] = []
    m = collect(raw, CsvMapping, "", problems)
    if m is not None:
        _check_fields(m, problems)
        _check_labels(m, problems)
        if m.jobs.per_node_limit is not None and m.jobs.group is None:
            problems.append("jobs.per_node_limit: needs jobs.group (the instances it limits)")
        _check_checkpoint_and_time(m, problems)
        try:
            validate_file(
                {
                    "tenants": [
                        {**t, "guaranteed": 0} if t.get("guaranteed") == "all" else t
                        for t in m.tenants
                    ],
                    "priority_classes": raw.get("priority_classes") or [],
                    **({"policy": m.policy} if m.policy is not None else {}),
                }
            )
        except InputError as exc:
            problems += exc.problems
    if problems:
        raise TraceImportError("\n".join(f"{path}: {p}" for p in problems))
    return m


def _check_fields(m: CsvMapping, problems: list[str]) -> None:
    """Each column field of jobs and nodes: exactly one of column or value, a known unit."""
    for group, spec in (("jobs", m.jobs), ("nodes", m.nodes)):
        if spec is None:
            continue
        for name in spec.__struct_fields__:
            f = getattr(spec, name)
            if name in NOT_COLUMNS or not isinstance(f, Field):
                continue
            if (f.column is None) == (f.value is None):
                problems.append(f"{group}.{name}: give exactly one of column or value")
            allowed = UNITS.get(name)
            if f.unit is not None and (allowed is None or f.unit not in allowed):
                known = list(allowed or ())
                problems.append(
                    f"{group}.{name}.unit: {f.unit!r} is not one of "
                    f"{', '.join(known) or '(no units)'}{_suggest(f.unit, known)}"
                )


def _check_labels(m: CsvMapping, problems: list[str]) -> None:
    """Job node selectors and node labels: keys of 1..256 characters, exactly one of column
    or value each."""
    for group, labels in (
        ("jobs.node_selector", m.jobs.node_selector),
        ("nodes.labels", m.nodes.labels if m.nodes is not None else {}),
    ):
        for key, f in labels.items():
            if not 0 < len(key) <= 256:
                problems.append(f"{group}: a label key must be 1..256 characters ({key!r})")
            if isinstance(f, Field) and (f.column is None) == (f.value is None):
                problems.append(f"{group}.{key}: give exactly one of column or value")


def _check_checkpoint_and_time(m: CsvMapping, problems: list[str]) -> None:
    """The checkpoint rules parse; the time section's epoch and time zone are readable."""
    from gpuledger.replay.importers.checkpoint import CheckpointError, parse

    try:
        parse(m.checkpoint)
    except CheckpointError as exc:
        problems += str(exc).splitlines()
    try:
        _Clock(m.time)
    except ValueError:
        problems.append(
            f"time.epoch: cannot read {m.time.epoch!r}: give epoch seconds or an ISO date "
            "(2024-05-01T00:00:00Z)"
        )
    except Exception:  # noqa: BLE001 - zoneinfo raises several kinds
        problems.append(
            f"time.timezone: unknown time zone {m.time.timezone!r}{_suggest(m.time.timezone, ('UTC',))}"
        )


NOT_COLUMNS = ("gpu_memory", "sharing", "node_selector", "labels")


class _Skip(Exception):
    pass


class _Reader:
    """One row's fields under a mapping group (jobs or nodes)."""

    def __init__(self, specs: Any, group: str, header: list[str], path: str) -> None:
        self.specs: dict[str, Field] = {}
        for name in specs.__struct_fields__:
            spec = getattr(specs, name)
            if spec is None or name in NOT_COLUMNS:
                continue
            if isinstance(spec, str):
                spec = Field(column=spec)
            if spec.column is not None and spec.column not in header:
                raise TraceImportError(
                    f"{path}:1: {group}.{name}: no column {spec.column!r}"
                    f"{_suggest(spec.column, header)} (header: {','.join(header)})"
                )
            self.specs[name] = spec

    def has(self, name: str) -> bool:
        return name in self.specs

    def raw(self, row: dict[str, str], name: str) -> str | None:
        """The cell as written (before `values` and `default`), None when empty."""
        spec = self.specs.get(name)
        if spec is None:
            return None
        raw = str(spec.value) if spec.column is None else (row.get(spec.column) or "").strip()
        return raw or None

    def text(self, row: dict[str, str], name: str) -> str | None:
        spec = self.specs.get(name)
        if spec is None:
            return None
        raw = str(spec.value) if spec.column is None else (row.get(spec.column) or "").strip()
        if raw == "" or raw.lower() == "nan":
            raw = None if spec.default is None else str(spec.default)
        if raw is not None and spec.values:
            low = {k.lower(): v for k, v in spec.values.items()}
            if raw.lower() not in low and raw not in spec.values.values():
                raise _Skip(
                    f"unknown {spec.column or name} {raw!r} (expected {', '.join(spec.values)})"
                )
            raw = low.get(raw.lower(), raw)
        return raw

    def number(self, row: dict[str, str], name: str) -> float | None:
        raw = self.text(row, name)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise _Skip(f"{self.specs[name].column or name}: not a number: {raw!r}") from None
        if math.isnan(value):
            return None
        if not abs(value) <= MAX_QUANTITY:
            raise _Skip(f"{self.specs[name].column or name}: out of range: {raw!r}")
        return value

    def scaled(self, row: dict[str, str], name: str, default_unit: str) -> int | None:
        value = self.number(row, name)
        if value is None:
            return None
        if value < 0:
            raise _Skip(f"{self.specs[name].column or name}: negative: {value:g}")
        unit = self.specs[name].unit or default_unit
        scaled = -(-value * UNITS[name][unit] // 1)
        if not scaled <= MAX_QUANTITY:
            raise _Skip(f"{self.specs[name].column or name}: out of range: {value:g} {unit}")
        return int(scaled)

    def models(self, row: dict[str, str]) -> tuple[str, ...]:
        raw = self.text(row, "gpu_model")
        if raw is None:
            return ()
        sep = self.specs["gpu_model"].separator
        parts = raw.split(sep) if sep else [raw]
        return tuple(p.strip() for p in parts if p.strip())


def _header(reader, path: str) -> list[str]:
    """The CSV's column names; a header that is not text (a binary file, a NUL, an
    over-long field) is one error that names what it is and never echoes its bytes."""
    header = list(reader.fieldnames or [])
    problem = row_problem(header)
    if problem is not None:
        raise TraceImportError(f"{path}:1: the header holds {problem}: not a CSV trace")
    return header


class _Labels(_Reader):
    """Label key -> value of one row, from a mapping's `{label: column spec}`."""

    def __init__(self, specs: dict[str, Spec], group: str, header: list[str], path: str) -> None:
        self.specs = {}
        for key, spec in sorted(specs.items()):
            if isinstance(spec, str):
                spec = Field(column=spec)
            if spec.column is not None and spec.column not in header:
                raise TraceImportError(
                    f"{path}:1: {group}.{key}: no column {spec.column!r}"
                    f"{_suggest(spec.column, header)} (header: {','.join(header)})"
                )
            self.specs[key] = spec

    def labels(self, row: dict[str, str]) -> dict[str, str] | None:
        out = {}
        for key in self.specs:
            value = self.text(row, key)
            if value:
                if len(value) > 256:
                    raise _Skip(f"{key}: a label value is at most 256 characters")
                out[key] = value
        return out or None


class _Clock:
    def __init__(self, spec: TimeSpec) -> None:
        self.spec = spec
        self.tz = ZoneInfo(spec.timezone)
        epoch = spec.epoch
        if isinstance(epoch, str):
            dt = datetime.fromisoformat(epoch.replace("Z", "+00:00"))
            epoch_ms = int((dt if dt.tzinfo else dt.replace(tzinfo=self.tz)).timestamp() * 1000)
        else:
            epoch_ms = int(epoch * 1000)
        self.epoch_ms = epoch_ms
        self.explicit_epoch = not (spec.unit == "date" and spec.epoch == 0)
        self.clamped = False
        """The last `ms` was before the trace start (and was moved to it)."""

    def _date(self, text: str) -> int:
        if self.spec.format:
            dt = datetime.strptime(text, self.spec.format)
        else:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=self.tz)
        return int(dt.timestamp() * 1000)

    def ms(self, reader: _Reader, row: dict[str, str], name: str) -> int | None:
        if self.spec.unit == "date":
            raw = reader.text(row, name)
            if raw is None:
                return None
            try:
                value = self._date(raw)
            except ValueError:
                raise _Skip(
                    f"{reader.specs[name].column or name}: cannot read date {raw!r}"
                ) from None
        else:
            num = reader.number(row, name)
            if num is None:
                return None
            value = self.epoch_ms + int(round(num * TIME_MS[self.spec.unit]))
        self.clamped = self.explicit_epoch and value < self.epoch_ms
        return max(value, self.epoch_ms) if self.explicit_epoch else value


def _nodes(path: str | Path, m: CsvMapping, vocab: Vocabulary | None) -> tuple[ev.NodeInfo, ...]:
    if m.nodes is None:
        raise TraceImportError("the mapping has no nodes: section (how to read --nodes)")
    f = open_text(path)
    memory_by_model = {
        k: mebibytes(f"nodes.gpu_memory.{k}", v) for k, v in m.nodes.gpu_memory.items()
    }
    out: list[ev.NodeInfo] = []
    seen: set[str] = set()
    with f:
        reader = csv.DictReader(f)
        header = _header(reader, str(path))
        cols = _Reader(m.nodes, "nodes", header, str(path))
        node_labels = _Labels(m.nodes.labels, "nodes.labels", header, str(path))
        for row in reader:
            line = reader.line_num
            problem = row_problem([*row.values(), *(row.get(None) or ())])
            if problem is not None:
                raise TraceImportError(f"{path}:{line}: {problem}")
            try:
                name = cols.text(row, "name") or ""
                ev.validate_token("node", name)
                cpu = cols.scaled(row, "cpu", "cores") or 0
                mem = cols.scaled(row, "memory", "Mi") or 0
                n = int(cols.number(row, "gpus") or 0) if cols.has("gpus") else 0
                raw_model = cols.text(row, "gpu_model") or ""
                model = raw_model
                labels = node_labels.labels(row) or {}
            except (_Skip, ev.InvalidId) as exc:
                raise TraceImportError(f"{path}:{line}: {exc}") from None
            if name in seen:
                raise TraceImportError(f"{path}:{line}: duplicate node {name!r}")
            seen.add(name)
            gpus: tuple[ev.GpuInfo, ...] = ()
            if n:
                if model not in memory_by_model:
                    raise TraceImportError(
                        f"{path}:{line}: GPU model {model!r} has no nodes.gpu_memory entry"
                        f"{_suggest(model, memory_by_model)} (known: {', '.join(memory_by_model)})"
                    )
                if vocab is not None:
                    model = vocab.node(raw_model, memory_by_model[raw_model])
                gpus = tuple(
                    ev.GpuInfo(
                        index=i,
                        uuid=f"GPU-{name}-{i}",
                        model=model,
                        memory_mib=memory_by_model[raw_model],
                        clique=f"{name}-nvl0",
                        sharing=m.nodes.sharing,
                    )
                    for i in range(n)
                )
            out.append(
                ev.NodeInfo(name=name, cpu_milli=cpu, memory_mib=mem, gpus=gpus, labels=labels)
            )
    return tuple(out)


def _resources(cols: _Reader, row: dict[str, str]) -> ev.Resources:
    if cols.has("gpus") and cols.specs["gpus"].default is None:
        if (cols.raw(row, "gpus") or "").lower() == "nan":  # an empty cell is a CPU-only job
            raise _Skip(
                f"{cols.specs['gpus'].column or 'gpus'}: NaN is no GPU count (an empty cell "
                "is 0 GPUs; a mapping `default:` counts NaN rows)"
            )
    gpus_f = cols.number(row, "gpus") if cols.has("gpus") else 0
    gpus = int(gpus_f or 0)
    if gpus_f is not None and gpus_f != gpus:
        raise _Skip(f"{cols.specs['gpus'].column}: not a whole number of GPUs: {gpus_f:g}")
    milli = cols.scaled(row, "gpu_milli", "milli") if cols.has("gpu_milli") else None
    if milli is None:
        milli = 1000 if gpus else 0
    cpu = cols.scaled(row, "cpu", "cores") or 0 if cols.has("cpu") else 0
    mem = cols.scaled(row, "memory", "Mi") or 0 if cols.has("memory") else 0
    models = cols.models(row) if cols.has("gpu_model") else ()
    if gpus == 0:
        return ev.Resources(cpu_milli=cpu, memory_mib=mem)
    if milli > 1000:
        raise _Skip(f"gpu_milli must be at most 1000, got {milli}")
    if gpus == 1 and 0 < milli < 1000:
        return ev.Resources(gpu_milli=milli, cpu_milli=cpu, memory_mib=mem, gpu_models=models)
    return ev.Resources(gpus=gpus, cpu_milli=cpu, memory_mib=mem, gpu_models=models)


def _spread(cols: _Reader, row: dict[str, str]) -> ev.Spread | None:
    """The row's spread constraint: its group and per-node limit, when both are given."""
    if not cols.has("per_node_limit"):
        return None
    limit = cols.number(row, "per_node_limit")
    if limit is None or limit <= 0:
        return None  # no limit (empty, NaN; 0 taken as none, as traces write it)
    if limit != int(limit):
        raise _Skip(
            f"{cols.specs['per_node_limit'].column or 'per_node_limit'}: not a whole number: {limit:g}"
        )
    group = cols.text(row, "group") if cols.has("group") else None
    if not group:
        raise _Skip("a per-node limit without a group")
    return ev.Spread(group=group, max_per_node=int(limit))


@dataclass
class CsvImport:
    summary: dict
    events: int


def import_csv(
    trace: str | Path,
    out: str | Path,
    *,
    mapping: str | Path,
    nodes: str | Path | None = None,
    nodes_file: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    skips: SkipLog | None = None,
    run_size: int = 200_000,
) -> CsvImport:
    m = load_csv_mapping(mapping)
    vocab = None if m.gpu_models == "verbatim" else Vocabulary(m.gpu_models)
    if (nodes is None) == (nodes_file is None):
        raise TraceImportError(
            "give the nodes with exactly one of --nodes NODES.csv (read with the mapping's "
            "nodes: section) or --config-nodes FILE (a gpuledger configuration)"
        )
    if nodes is not None:
        node_infos = _nodes(nodes, m, vocab)
    else:
        from gpuledger.replay.importers.slurm_nodes import read_nodes_file

        node_infos = read_nodes_file(nodes_file)
    total_gpus = sum(len(n.gpus) for n in node_infos)
    producer = f"import/{m.trace}"
    from gpuledger.replay.importers.checkpoint import parse

    log = ImportLog(producer, skips=skips, run_size=run_size, checkpoint=parse(m.checkpoint))
    clock = _Clock(m.time)
    path = str(trace)
    where = lambda line: f"{path}:{line}"  # noqa: E731
    tenants_seen: set[str] = set()
    classes_seen: set[str] = set()
    f = open_text(trace)
    gangs = _Gangs(log, where)
    with f:
        bar = Progress(f, progress)
        reader = csv.DictReader(f)
        header = _header(reader, path)
        cols = _Reader(m.jobs, "jobs", header, path)
        selects = _Labels(m.jobs.node_selector, "jobs.node_selector", header, path)
        for row in reader:
            line = reader.line_num
            bar.tick(line)
            problem = row_problem([*row.values(), *(row.get(None) or ())])
            if problem is not None:
                log.skips.skip(where(line), problem)
                continue
            try:
                job, gang = _row_job(m, cols, selects, clock, vocab, row, line)
            except _Skip as exc:
                log.skips.skip(where(line), str(exc))
                continue
            gangs.add(job, gang)
            tenants_seen.add(job.tenant)
            classes_seen.add(job.priority_class)
        gangs.flush()
        bar.done()
    doc = _document(m, total_gpus, tenants_seen)
    from gpuledger.services.domain.inputs.configfile import ConfigFileError

    try:
        head = head_events(
            doc,
            node_infos,
            producer,
            min(log.first_ms or 0, clock.epoch_ms)
            if m.time.unit != "date"
            else (log.first_ms or clock.epoch_ms),
        )
    except ConfigFileError as exc:
        raise TraceImportError("\n".join(f"{mapping}: {p}" for p in exc.problems)) from None
    n = log.write(out, head, where)
    summary = {"events": n, "nodes": len(node_infos), "gpus": total_gpus, **log.summary()}
    warning = vocab.warning() if vocab is not None else None
    if warning:
        summary["warnings"] = [warning]
    return CsvImport(summary=summary, events=n)


def _row_job(
    m: CsvMapping,
    cols: _Reader,
    selects: _Labels,
    clock: _Clock,
    vocab: Vocabulary | None,
    row: dict,
    line: int,
) -> tuple[ObservedJob, str | None]:
    """One jobs row as an observed job and its gang key (None or empty: no gang); _Skip with
    the skip reason for a row the mapping's rules leave out."""
    # a field the mapping leaves out reads as None (`_Reader.text`, `_Clock.ms`)
    job_id = cols.text(row, "id") or ""
    tenant = cols.text(row, "tenant")
    if tenant is None:
        tenant = "default"
    user = cols.text(row, "user")
    cls = cols.text(row, "priority") or "train"
    cls_raw = cols.raw(row, "priority")
    res = _resources(cols, row)
    if vocab is not None and res.gpu_models:
        res = msgspec.structs.replace(res, gpu_models=vocab.job(res.gpu_models))
    submit = clock.ms(cols, row, "submit")
    start = clock.ms(cols, row, "start")
    started_before = start is not None and clock.clamped
    end = clock.ms(cols, row, "end")
    gang = cols.text(row, "gang")
    state = (cols.text(row, "state") or "").upper()
    spread = _spread(cols, row)
    selector = selects.labels(row)
    if submit is None:
        submit = _missing_submit(m, cols, clock)
    if start is None and cols.has("start"):
        start, started_before = _missing_start(m, clock, submit, started_before)
    if res.gpus == 0 and not res.gpu_milli and m.rules.cpu_only == "skip":
        raise _Skip("CPU-only row (rules.cpu_only: skip)")
    if start is None or end is None:
        state = ""  # a recorded outcome is one of a run: pending, running or never ran
    job = ObservedJob(
        job_id=job_id,
        tenant=tenant,
        priority_class=cls,
        resources=res,
        submit_ms=submit,
        start_ms=start,
        end_ms=end,
        line=line,
        spread=spread,
        node_selector=selector,
        started_before=started_before,
        source_priority=cls_raw,
        state=state,
        user=user or None,
    )
    return job, gang


def _missing_start(
    m: CsvMapping, clock: _Clock, submit: int, started_before: bool
) -> tuple[int | None, bool]:
    """The start of a row whose start cell is empty, and whether it began before the trace:
    never started, or running when the trace began (submitted by then, with an explicit
    epoch); _Skip by the rules."""
    if m.rules.missing_start == "never":
        return None, started_before
    if m.rules.missing_start == "skip":
        raise _Skip("empty start time (rules.missing_start: skip)")
    if clock.explicit_epoch and submit <= clock.epoch_ms:
        return clock.epoch_ms, True  # running when the trace began
    return None, started_before


def _missing_submit(m: CsvMapping, cols: _Reader, clock: _Clock) -> int:
    """The submit time of a row without one (the trace's start), or _Skip by the rules."""
    if cols.has("submit") and m.rules.missing_submit != "trace_start":
        raise _Skip("empty submit time (rules.missing_submit: skip)")
    if m.time.unit == "date" and not clock.explicit_epoch:
        raise _Skip("empty submit time and no time.epoch in the mapping")
    return clock.epoch_ms


class _Gangs:
    """Consecutive rows with one gang key become one job of that many replicas (when they
    agree on resources, tenant, class, spread and selector; else each row stays a job)."""

    def __init__(self, log: ImportLog, where: Callable[[int], str]) -> None:
        self.log, self.where = log, where
        self.rows: list[ObservedJob] = []
        self.key: str | None = None

    def add(self, job: ObservedJob, gang: str | None) -> None:
        if gang is not None and gang != "":
            if gang != self.key:
                self.flush()
                self.key = gang
            self.rows.append(job)
        else:
            self.flush()
            self.log.add_job(job, self.where(job.line))

    def flush(self) -> None:
        rows, log, where = self.rows, self.log, self.where
        if not rows:
            return
        first = rows[0]
        if (
            len(
                {
                    (j.resources, j.tenant, j.priority_class, j.spread, str(j.node_selector))
                    for j in rows
                }
            )
            != 1
        ):
            for j in rows:
                log.add_job(j, where(j.line))
        else:
            log.add_job(_gang_job(rows, self.key or first.job_id), where(first.line))
        rows.clear()
        self.key = None


def _gang_job(rows: list[ObservedJob], job_id: str) -> ObservedJob:
    """One job for a gang's rows: started when the last member started (if all did), ended
    when the last ended (if all did), else the first end of a gang that never started."""
    first = rows[0]
    start, end = _rows_span(rows)
    return ObservedJob(
        job_id=job_id,
        tenant=first.tenant,
        priority_class=first.priority_class,
        resources=first.resources,
        replicas=len(rows),
        spread=first.spread,
        node_selector=first.node_selector,
        submit_ms=min(j.submit_ms for j in rows),
        start_ms=start,
        end_ms=end,
        line=first.line,
        started_before=start is not None and all(j.started_before for j in rows),
        source_priority=first.source_priority,
        user=first.user,
        state=_rows_state(rows, start, end),
    )


def _rows_span(rows: list[ObservedJob]) -> tuple[int | None, int | None]:
    """A gang's start and end from its rows (see `_gang_job`)."""
    starts = [j.start_ms for j in rows]
    start = max(starts) if all(s is not None for s in starts) else None
    ends = [j.end_ms for j in rows]
    if start is None:
        return None, min((e for e in ends if e is not None), default=None)
    return start, max(ends) if all(e is not None for e in ends) else None


def _rows_state(rows: list[ObservedJob], start: int | None, end: int | None) -> str:
    """The gang's outcome: its first member's that did not complete, else completed (none
    for a gang that did not both start and end)."""
    if start is None or end is None:
        return ""
    return next((j.state for j in rows if j.state not in ("", "COMPLETED")), rows[0].state)


def _document(m: CsvMapping, total_gpus: int, tenants_seen: set[str]) -> dict[str, Any]:
    tenants = [
        dict(t, guaranteed=total_gpus) if t.get("guaranteed") == "all" else dict(t)
        for t in m.tenants
    ]
    named = {t.get("name") for t in tenants}
    tenants += [
        {"name": t, "guaranteed": 0, "weight": 1} for t in sorted(tenants_seen) if t not in named
    ]
    classes = [
        {k: v for k, v in msgspec.structs.asdict(c).items() if not (k == "override" and not v)}
        for c in m.priority_classes
    ]
    return {
        "tenants": tenants,
        "priority_classes": classes,
        **({"policy": m.policy} if m.policy is not None else {}),
    }
