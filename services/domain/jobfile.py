"""Job documents (YAML/JSON) as users write them, to `JobSpec`.

Accepted keys (snake_case): `id` (or `job_id`), `tenant`, `class` (or `priority_class`),
`replicas`, `min_members`, `gpus`, `gpu` (a share like `500m`) or `gpu_milli`, `mig`
(or `mig_profile`), `cpu` (cores, `500m`) or `cpu_milli`, `memory` (`36Gi`) or `memory_mib`,
`models` (or `gpu_models`), `min_gpu_memory`, `duration` (`2h`), `checkpoint: {interval,
grace, save}`, `command`, `min_available`, `prefer_same_leaf`. Unknown keys are an error.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import CheckpointPolicy, JobSpec, Resources
from services.domain.quantities import QuantityError, mebibytes, milli, seconds

_KEYS = {
    "id", "job_id", "tenant", "class", "priority_class", "replicas", "min_members", "gpus", "gpu",
    "gpu_milli", "mig", "mig_profile", "cpu", "cpu_milli", "memory", "memory_mib", "models",
    "gpu_models", "min_gpu_memory", "duration", "duration_s", "checkpoint", "command",
    "min_available", "prefer_same_leaf",
}


class JobFileError(ValueError):
    """A job document that cannot be turned into a JobSpec; the message says which field."""


def job_spec(doc: dict[str, Any]) -> JobSpec:
    if not isinstance(doc, dict):
        raise JobFileError("a job must be a mapping of fields")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise JobFileError(f"unknown job field(s): {', '.join(unknown)}")
    try:
        gpu_milli = doc.get("gpu_milli", 0)
        if "gpu" in doc:
            gpu_milli = milli("gpu", doc["gpu"])
        ck = doc.get("checkpoint") or {}
        if not isinstance(ck, dict):
            raise JobFileError("checkpoint must be a mapping (interval, grace, save)")
        command = doc.get("command", ())
        if isinstance(command, str):
            command = ("/bin/sh", "-c", command)
        duration = doc.get("duration", doc.get("duration_s"))
        fields = dict(
            job_id=str(doc.get("id", doc.get("job_id", ""))),
            tenant=str(doc.get("tenant", "")),
            priority_class=str(doc.get("class", doc.get("priority_class", "train"))),
            replicas=int(doc.get("replicas", 1)),
            min_members=doc.get("min_members"),
            resources=Resources(
                gpus=int(doc.get("gpus", 0)),
                gpu_milli=int(gpu_milli),
                mig_profile=doc.get("mig", doc.get("mig_profile")),
                cpu_milli=milli("cpu", doc["cpu"]) if "cpu" in doc else int(doc.get("cpu_milli", 0)),
                memory_mib=mebibytes("memory", doc["memory"]) if "memory" in doc else int(doc.get("memory_mib", 0)),
                gpu_models=tuple(doc.get("models", doc.get("gpu_models", ()))),
                min_gpu_memory_mib=mebibytes("min_gpu_memory", doc.get("min_gpu_memory", 0)),
            ),
            checkpoint=CheckpointPolicy(
                interval_s=seconds("checkpoint.interval", ck.get("interval", 0)),
                grace_s=None if ck.get("grace") is None else seconds("checkpoint.grace", ck["grace"]),
                save_s=seconds("checkpoint.save", ck.get("save", 5)),
            ),
            duration_s=None if duration is None else seconds("duration", duration),
            command=tuple(str(c) for c in command),
            min_available=int(doc.get("min_available", 0)),
            prefer_same_leaf=bool(doc.get("prefer_same_leaf", True)),
        )
        if not fields["job_id"]:
            raise JobFileError("a job needs an id")
        if not fields["tenant"]:
            raise JobFileError(f"job {fields['job_id']}: a job needs a tenant")
        return msgspec.convert(fields, JobSpec, from_attributes=True)
    except (QuantityError, TypeError, ValueError, msgspec.ValidationError) as exc:
        if isinstance(exc, JobFileError):
            raise
        raise JobFileError(str(exc)) from exc
