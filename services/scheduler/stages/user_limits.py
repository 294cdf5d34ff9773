"""Stage `user_limits`: a job whose user is at one of its tenant's per-user limits waits
(`UserLimit`): the tenant's `users:` configuration (`UserLimits`: a default for each user,
overrides per user; Slurm `MaxJobsPerUser`, `MaxTRESPerUser=gres/gpu`) bounds the jobs one
user has placed at once (`running_jobs`) and the GPU capacity they hold (`gpus`). A gate,
before quota: a job whose placement would pass a limit of its user is not tried. Jobs that
name no user are not bound. Every bind counts towards its user's use for the rest of the
decide (a grow adds its GPUs only)."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import PendingReason
from gpuledger.events.specs import UserLimit, UserLimits
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, of
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stage import Stage


def _gpus(milli: int) -> str:
    return f"{milli / 1000:g}"


def limits_of(rnd: Round, job: JobRecord) -> tuple[str, UserLimit] | None:
    """The job's user and the limits in force for it; None when nothing bounds it."""
    user = job.spec.user
    if not isinstance(user, str):
        return None
    tenant = rnd.state.config.tenants.get(job.tenant)
    users = tenant.user_limits if tenant is not None else None
    if not isinstance(users, UserLimits):
        return None
    limit = users.of(user)
    if limit.running_jobs is None and limit.gpu_milli is None:
        return None
    return user, limit


def gate(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """`UserLimit` when placing the job would pass a limit of its user; None otherwise."""
    found = limits_of(rnd, job)
    if found is None:
        return None
    user, limit = found
    jobs, held = rnd.user_in_use(job.tenant, user)
    who = f"user {user} of tenant {job.tenant}"
    details = {"user": user, "jobs": jobs, "gpu_milli": held, "queue_position": lim.position}
    if limit.running_jobs is not None and jobs + 1 > limit.running_jobs:
        message = f"{who} runs {jobs} jobs; at most {limit.running_jobs} at once (running_jobs)"
        details["running_jobs"] = limit.running_jobs
    elif limit.gpu_milli is not None and held + lim.need > limit.gpu_milli:
        message = (
            f"{who} holds {_gpus(held)} GPUs and this job needs {_gpus(lim.need)}; at most "
            f"{_gpus(limit.gpu_milli)} at once (gpus)"
        )
        details["limit_gpu_milli"] = limit.gpu_milli
    else:
        return None
    return rnd.pending(job, PendingReason.UserLimit, message, details)


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """A bind counts towards its user's placed jobs and GPUs (a grow: its GPUs only)."""
    found = limits_of(rnd, job)
    if found is None:
        return
    use = rnd.user_in_use(job.tenant, found[0])
    if job.allocation_id is None:
        use[0] += 1
    use[1] += job.spec.resources.gpu_milli_total() * len(members)


STAGE = Stage(
    "user_limits",
    __doc__ or "",
    reasons=(PendingReason.UserLimit,),
    gate=gate,
    book=book,
    reads=of(ADMITTED_JOBS, "allocations", "tenants"),
)
