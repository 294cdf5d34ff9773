"""Import Slurm accounting (`sacct --parsable2`) as a log of external inputs: the mapping of
a dump's jobs to submissions, cancels and observations.

The dump: one `|`-separated row per job allocation and per step, header first (the export
command: docs/importers.md; its cells: `replay.importers.slurm_sacct`; the nodes:
`replay.importers.slurm_nodes`). Rules (every row either becomes part of a job or is skipped with its line and reason):

- step rows (`123.batch`, `123.extern`, `123.0`, `123_4.batch`, `123+0.0`) are folded into the
  job row before them (a step without its job row is skipped);
- rows with the same JobID (a requeued job's runs) are one job: the first row's Submit, the
  last row's run; the earlier rows are runs in the observation sidecar (`requeued`);
- array tasks (`123_4`) and pending array records `123_[5-9%2]` (one pending task each) are
  one array job `123` (`JobSpec.array`) of tasks `123@4` ..., each with its own run time,
  outcome, cancel and observation; a task of another shape than the most common, or one
  that never ran, is a job of its own `123_4`; a hole in the indexes starts another array
  `123_<first>-<last>` (`_emit_array`);
- het components `123+0`, `123+1` are one gang `123` when every component has the same
  per-node shape, else one job per component; `NNodes` N > 1: a gang of N members, each with
  1/N of the job's GPUs, CPUs and memory (rounded up);
- a job's recorded outcome is what its replay does (`replay.importers.outcomes`);
- `Timelimit` -> `time_limit_s`; `Dependency` (else `SubmitLine`'s) -> `depends_on`: on an
  array, the array (and its tasks imported as jobs of their own); on a task `123_4`, `123@4`;
  on a job outside the dump or of another tenant: dropped (`dependencies_dropped`);
- QOS -> priority class, Account -> tenant (`replay.importers.mapping`); Partition -> node
  selector, when the nodes carry partition labels (`replay.importers.labels`); the site's
  files -> `OUT.site.json` and the recorded policy (`replay.importers.slurm_site`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
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
    head_events,
    open_text,
)
from gpuledger.replay.importers.labels import PartitionSelectors
from gpuledger.replay.importers.mapping import Naming, load_mapping
from gpuledger.replay.importers.outcomes import never_runs
from gpuledger.replay.importers.slurm_controls import SiteControls
from gpuledger.replay.importers.slurm_nodes import read_nodes_file, read_sinfo
from gpuledger.replay.importers.slurm_sacct import (
    JOB_ID,
    Row,
    expand_nodelist,
    expand_tasks,
    known_jobs_of,
    never_ran,
    parse_dependency,
    parse_submit_line,
    parse_time,
    parse_timelimit,
    read_header,
    row_shape,
    rows_by_job,
)
from gpuledger.replay.importers.slurm_site import SitePolicy, read_site, write_site
from gpuledger.replay.observed import Run

PRODUCER = "import/slurm"


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
    slurm_conf: str | Path | None = None,
    qos: str | Path | None = None,
    assoc: str | Path | None = None,
    node_states: bool = False,
    reservations: str | Path | None = None,
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
    site = read_site(slurm_conf, qos, assoc)  # before the dump: a bad file costs no work
    controls = SiteControls.read(
        sinfo, node_states, reservations, tz, tenant_from, lambda o: naming.tenant_for(o, "default")
    )
    # a run is stopped at its time limit as Slurm stops it: OverTimeLimit later (default 0);
    # a preempted one at once (GraceTime, default 0)
    log = ImportLog(
        PRODUCER,
        skips=skips,
        run_size=run_size,
        checkpoint=m.checkpoint_rules,
        enforce_grace_s=site.over_time_limit_s if site is not None else 0,
    )
    path = str(sacct)
    where = lambda line: f"{path}:{line}"  # noqa: E731
    f = open_text(sacct)
    with f:
        bar = Progress(f, progress)
        header = read_header(f, path, columns)
        deps_read = "Dependency" in header or "SubmitLine" in header
        if deps_read:
            naming.known_jobs = known_jobs_of(
                path,
                header,
                columns,
                lambda row: naming.tenant_for(_owner(row, tenant_from), "default"),
            )
        group: list[Row] = []
        steps = 0

        array: list[list[Row]] = []  # the task rows of one array (all its tasks at once)

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

        for line, values in rows_by_job(f, header, bar, log, where, run_size):
            row = dict(zip(header, values, strict=True))
            mid = JOB_ID.match(row["JobID"].strip())
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
            group.append(Row(line, base, task, None if het is None else int(het), row))
        flush()
        flush_array()
        bar.done()
    doc = naming.document(sum(len(n.gpus) for n in nodes))
    if site is not None:
        _site_into(doc, site, naming, with_conf=slurm_conf is not None)
    at_ms = log.first_ms or 0
    from gpuledger.services.domain.inputs.configfile import ConfigFileError

    try:
        head = head_events(doc, nodes, PRODUCER, at_ms)
    except ConfigFileError as exc:
        raise TraceImportError(
            "\n".join(f"{mapping or 'mapping'}: {p}" for p in exc.problems)
        ) from None
    head += controls.events(nodes, PRODUCER, at_ms, log.skips)
    n = log.write(out, head, where)
    if site is not None:
        log_site = write_site(out, site)
    summary = {
        "events": n,
        "nodes": len(nodes),
        "gpus": sum(len(x.gpus) for x in nodes),
        "steps_folded": steps,
        **log.summary(),
        **naming.partition.summary(),
        **naming.warnings(),
        **({"dependencies_dropped": naming.dependencies_dropped} if deps_read else {}),
        **({"eligible_later": log.eligible_later} if log.eligible_later else {}),
        **({"site_policy": str(log_site)} if site is not None else {}),
        **controls.summary(),
    }
    return SlurmImport(summary=summary, events=n)


def _site_into(doc: dict, site: SitePolicy, naming: Naming, with_conf: bool) -> None:
    """The site's policy into the recorded configuration `doc`, under the mapping's: with
    its slurm.conf, the `slurm` profile and the site's protections; accounts' fair-share
    shares as tenant weights (a tenant the mapping weighs keeps its weight)."""
    if with_conf:
        doc["policy"] = {**site.policy(naming.class_name), **doc["policy"]}
    weights = site.tenant_weights(lambda a: naming.tenant_for(a, "default"))
    for t in doc["tenants"]:
        if t["name"] in weights and t.get("weight", 1) == 1:
            t["weight"] = weights[t["name"]]


def _owner(row: dict[str, str], tenant_from: str) -> str:
    if tenant_from == "account/user":
        return f"{row.get('Account', '')}/{row.get('User', '')}"
    return row.get(
        {"account": "Account", "user": "User", "partition": "Partition"}[tenant_from], ""
    )


def _emit(
    group: list[Row],
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
            s = row_shape(rows[-1].fields, where(rows[-1].line), log)
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
    shape = row_shape(last.fields, where(last.line), log)
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


def _run_gpu_milli(fields: dict[str, str], job_milli: int) -> int | None:
    """The GPU milli-units an earlier run held (its own AllocTRES), None when the same as
    the job's last run or unknown: an untyped `gres=gpu:1` is a whole GPU in one run and a
    MIG slice in another."""
    shape = None if never_ran(fields) else row_shape(fields, "", _Quiet)  # type: ignore[arg-type]
    if shape is None:
        return None
    milli = shape[1] * shape[0].gpu_milli_total()
    return None if milli == job_milli else milli


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
    groups: list[list[Row]],
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
    base: str, groups: list[list[Row]], log: ImportLog, where: Callable[[int], str]
) -> tuple[dict[int, list[Row]], int | None]:
    """Each task index of array `base` with its rows (an index listed twice is skipped), and
    the array's `%N` limit of running tasks: a pending record's (`123_[5-9%2]`), else its
    submit line's (`--array=0-9%2`: a finished array's JobIDs have none); None: none given."""
    entries: dict[int, list[Row]] = {}
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
        elif max_running is None:
            max_running = parse_submit_line(last.fields.get("SubmitLine") or "").array_limit
        for i in indexes:
            if i in entries:
                log.skips.skip(where(last.line), f"array task {base}_{i} listed twice")
            else:
                entries[i] = group
    return entries, max_running


def _array_tasks(
    base: str,
    entries: dict[int, list[Row]],
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
                row_shape(last.fields, where(last.line), log),
                row_shape(requested, where(last.line), _Quiet),  # type: ignore[arg-type]  # a class with the log's `skip`, no instance
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
    last: Row,
    records: list[Row],
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
    last: Row,
    records: list[Row],
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
        eligible = parse_time(records[0].fields.get("Eligible") or "", tz)
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
    gpu_milli = nodes * res.gpu_milli_total()
    for r in records[:-1]:  # earlier runs of a requeued job (`--duplicates`), in file order
        try:
            runs.append(
                Run(
                    None if never_ran(r.fields) else parse_time(r.fields["Start"], tz),
                    parse_time(r.fields["End"], tz),
                    r.fields["State"].split()[0].upper() if r.fields["State"].strip() else "",
                    _run_gpu_milli(r.fields, gpu_milli),
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
        user=row.get("User", "").strip() or None,
        source_priority=qos.strip() or None,
        time_limit_s=parse_timelimit(row.get("Timelimit") or ""),
        depends_on=(dependency or (lambda t, _: _depends_on(t, job_id, tenant, naming)))(
            row.get("Dependency") or parse_submit_line(row.get("SubmitLine") or "").dependency,
            tenant,
        ),
    )
    if eligible is not None and eligible > submit and not job.depends_on:
        # not placeable before it was eligible (`--begin`, a released hold, a dependency
        # outside the dump): the replay submits it then (the replay's dependencies decide)
        job.eligible_ms = min(t for t in (eligible, start, end) if t is not None)
    return job
