"""The checks of a job on its own, beyond its shape (a job file, or a scenario's submission)."""

from gpuledger.events import validate_job_id, validate_tenant, validate_token
from gpuledger.events.specs import MAX_SELECTOR
from gpuledger.services.domain.inputs.schema.errors import (
    _p,
    _valid_id,
)
from gpuledger.services.domain.inputs.schema.job import JobDoc
from gpuledger.services.domain.inputs.schema.units import Cores

_ALTERNATIVES = (
    ("id", "job_id"),
    ("class", "priority_class"),
    ("gpu", "gpu_milli"),
    ("mig", "mig_profile"),
    ("cpu", "cpu_milli"),
    ("memory", "memory_mib"),
    ("models", "gpu_models"),
    ("duration", "duration_s"),
    ("time_limit", "time_limit_s"),
    ("weight", "over_quota_weight"),
)


def _check_job(job: JobDoc, base: str, problems: list[str]) -> None:
    """A job on its own (not against a configuration): alternatives not both given, valid
    ids, one GPU form, a bounded selector, replicas, a GPU share within one GPU."""
    for a, b in _ALTERNATIVES:
        fa, fb = ("klass" if a == "class" else a), b
        if getattr(job, fa, None) is not None and getattr(job, fb, None) is not None:
            problems.append(f"{_p(base, b)}: give either {a!r} or {b!r}, not both")
    _check_ids(job, base, problems)
    forms = [
        k
        for k, v in (
            ("gpus", job.gpus),
            ("gpu", job.gpu or job.gpu_milli),
            ("mig", job.mig or job.mig_profile),
        )
        if v
    ]
    if len(forms) > 1:
        problems.append(f"{_p(base, forms[1])}: use only one of gpus, gpu (a share) and mig")
    if job.node_selector is not None and len(job.node_selector) > MAX_SELECTOR:
        problems.append(
            f"{_p(base, 'node_selector')}: at most {MAX_SELECTOR} labels "
            f"(got {len(job.node_selector)})"
        )
    _check_replicas(job, base, problems)
    if job.gpu is not None:
        _check_share(job.gpu, base, problems)


def _check_ids(job: JobDoc, base: str, problems: list[str]) -> None:
    """The job's id (required), tenant and user (when given) are valid tokens."""
    if (job.id or job.job_id) in (None, ""):
        problems.append(f"{base or '(top level)'}: missing required key 'id'")
    else:
        _valid_id(
            _p(base, "id" if job.id else "job_id"),
            lambda: validate_job_id(job.id or job.job_id or ""),
            problems,
        )
    _valid_id(_p(base, "tenant"), lambda: validate_tenant(job.tenant), problems)
    if job.user is not None:
        _valid_id(_p(base, "user"), lambda: validate_token("user", job.user or ""), problems)


def _check_replicas(job: JobDoc, base: str, problems: list[str]) -> None:
    """min_members and min_available within replicas; a service has no min_members."""
    if job.kind == "service" and job.min_members is not None:
        problems.append(
            f"{_p(base, 'min_members')}: a service's replicas are independent; "
            "leave min_members out (kind: service)"
        )
    if job.kind == "service" and job.min_available > job.replicas:
        problems.append(
            f"{_p(base, 'min_available')}: must be <= replicas ({job.replicas}), "
            f"got {job.min_available}"
        )
    if job.min_members is not None and job.min_members > job.replicas:
        problems.append(
            f"{_p(base, 'min_members')}: must be <= replicas ({job.replicas}), got {job.min_members}"
        )


def _check_share(gpu: Cores, base: str, problems: list[str]) -> None:
    """`gpu` (a share of one GPU) is within 1m..999m."""
    from gpuledger.services.domain.inputs.quantities import milli

    share = milli("gpu", gpu)
    if not 0 < share < 1000:
        problems.append(
            f"{_p(base, 'gpu')}: a GPU share must be within 1m..999m (got {gpu!r}); "
            "use `gpus` for whole GPUs"
        )
