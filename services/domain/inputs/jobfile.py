"""Job documents (YAML/JSON) as users write them, to `JobSpec`.

Accepted keys (snake_case): `id` (or `job_id`), `tenant`, `class` (or `priority_class`),
`replicas`, `min_members`, `gpus`, `gpu` (a share like `500m`) or `gpu_milli`, `mig`
(or `mig_profile`), `cpu` (cores, `500m`) or `cpu_milli`, `memory` (`36Gi`) or `memory_mib`,
`models` (or `gpu_models`), `min_gpu_memory`, `duration` (`2h`), `checkpoint: {interval,
grace, save}`, `command`, `time_limit` (`2h`, Slurm `--time`) or `time_limit_s`, `depends_on: [{job, on}]`,
`array` (`{count, max_running, first}` or Slurm's `0-99%8`),
`min_available`, `prefer_same_leaf`, `spread: {group,
max_per_node}`, `kind` (`gang` or `service`), `node_selector` (`{partition: a100}`), `user` (who submits it).
The schema is
`services.domain.inputs.schema.JobDoc`: unknown keys, bad units and negative values are errors.
"""

from __future__ import annotations

from typing import Any

from gpuledger.events import ArraySpec, CheckpointPolicy, Dependency, JobSpec, Resources, Spread
from gpuledger.services.domain.inputs.gpu_models import job_models
from gpuledger.services.domain.inputs.quantities import QuantityError, mebibytes, milli, seconds
from gpuledger.services.domain.inputs.schema import MAX_SECONDS, InputError, JobDoc, validate_job


class JobFileError(InputError):
    """A job document that does not validate; one problem per line with its key path."""


def array_spec(doc: Any, base: str = "") -> ArraySpec:
    """`{count, max_running, first}` or Slurm's `A-B%N` / `A%N` / `A` -> ArraySpec."""
    if not isinstance(doc, str):
        return ArraySpec(count=doc.count, max_running=doc.max_running, first=doc.first)
    where = f"{base + '.' if base else ''}array"
    body, _, cap = doc.partition("%")
    lo, _, hi = body.partition("-")
    first, last = int(lo), int(hi) if hi else int(lo)
    if last < first:
        raise JobFileError([f"{where}: {doc!r}: the range ends before it starts"])
    count = last - first + 1
    if count > 100_000:
        raise JobFileError([f"{where}: {doc!r}: {count} tasks, at most 100000"])
    if cap and int(cap) < 1:
        raise JobFileError([f"{where}: {doc!r}: %N must be at least 1"])
    return ArraySpec(count=count, max_running=int(cap) if cap else None, first=first)


def job_spec(doc: Any, base: str = "") -> JobSpec:
    """The JobSpec of a job document; raises JobFileError. `base` prefixes key paths
    (`timeline[3].submit`)."""
    try:
        return _job_spec(doc, base)
    except QuantityError as exc:  # a friendly quantity beyond its bound, inf, nan
        prefix = f"{base}." if base else ""
        raise JobFileError([f"{prefix}{exc}"]) from None


def _job_spec(doc: Any, base: str) -> JobSpec:
    if isinstance(doc, JobDoc):
        j = doc
    else:
        try:
            j = validate_job(doc, base)
        except InputError as exc:
            raise JobFileError(exc.problems) from None
    command = j.command
    if isinstance(command, str):
        command = ["/bin/sh", "-c", command]
    gpu_milli = milli("gpu", j.gpu) if j.gpu is not None else (j.gpu_milli or 0)
    duration = _duration_s(j)
    optional = _optional_fields(j, base)
    return JobSpec(
        job_id=j.id if j.id is not None else (j.job_id or ""),
        tenant=j.tenant,
        priority_class=j.klass or j.priority_class or "train",
        replicas=j.replicas,
        min_members=j.min_members,
        resources=_resources(j, gpu_milli),
        checkpoint=_checkpoint(j.checkpoint),
        duration_s=duration,
        command=tuple(str(c) for c in command),
        min_available=j.min_available,
        prefer_same_leaf=j.prefer_same_leaf,
        **optional,
    )


def _duration_s(j: JobDoc) -> int | None:
    """`duration` (a friendly quantity, at most ten years), else `duration_s`."""
    if j.duration is None:
        return j.duration_s
    duration = seconds("duration", j.duration)
    if duration is not None and duration > MAX_SECONDS:
        raise QuantityError(f"duration: {j.duration!r} is more than {MAX_SECONDS:,} s (ten years)")
    return duration


def _optional_fields(j: JobDoc, base: str) -> dict[str, Any]:
    """The JobSpec fields left out unless set: old payloads keep their bytes."""
    optional: dict[str, Any] = {}
    if j.spread is not None:
        optional["spread"] = Spread(group=j.spread.group, max_per_node=j.spread.max_per_node)
    if j.kind == "service":
        optional["kind"] = "service"
    if j.node_selector:
        optional["node_selector"] = dict(sorted(j.node_selector.items()))
    limit = _time_limit_s(j, base)
    if limit is not None:
        optional["time_limit_s"] = limit
    if j.depends_on:
        optional["depends_on"] = tuple(Dependency(job=d.job, on=d.on) for d in j.depends_on)
    if j.array is not None:
        optional["array"] = array_spec(j.array, base)
    if j.user is not None:
        optional["user"] = j.user
    return optional


def _time_limit_s(j: JobDoc, base: str) -> int | None:
    """`time_limit` (a friendly quantity, > 0), else `time_limit_s`."""
    if j.time_limit is None:
        return j.time_limit_s
    limit = seconds("time_limit", j.time_limit)
    if not limit or limit <= 0:
        raise JobFileError([f"{base + '.' if base else ''}time_limit: must be > 0"])
    return limit


def _resources(j: JobDoc, gpu_milli: int) -> Resources:
    """What one member asks for, friendly quantities (`cpu`, `memory`, `models`, `mig`)
    before their plain forms."""
    return Resources(
        gpus=j.gpus,
        gpu_milli=gpu_milli,
        mig_profile=j.mig if j.mig is not None else j.mig_profile,
        cpu_milli=milli("cpu", j.cpu) if j.cpu is not None else (j.cpu_milli or 0),
        memory_mib=mebibytes("memory", j.memory) if j.memory is not None else (j.memory_mib or 0),
        gpu_models=job_models(tuple(j.models if j.models is not None else (j.gpu_models or ()))),
        min_gpu_memory_mib=mebibytes("min_gpu_memory", j.min_gpu_memory),
    )


def _checkpoint(ck: Any) -> CheckpointPolicy:
    """The checkpoint block's quantities in seconds (no grace: the class's)."""
    return CheckpointPolicy(
        interval_s=seconds("checkpoint.interval", ck.interval),
        grace_s=None if ck.grace is None else seconds("checkpoint.grace", ck.grace),
        save_s=seconds("checkpoint.save", ck.save),
    )
