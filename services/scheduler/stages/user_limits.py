"""Stage `user_limits`: a job whose user is at one of its tenant's per-user limits waits
(`UserLimit`): the tenant's `users:` configuration (`UserLimits`: a default for each user,
overrides per user; Slurm `MaxJobsPerUser`, `MaxTRESPerUser=gres/gpu`) bounds the jobs one
user has placed at once (`running_jobs`) and the GPU capacity they hold (`gpus`): a gate,
before quota: a job whose placement would pass one of them is not tried. Per GPU model
(`gpus_by_model`, `MaxTRESPerUser=gres/gpu:MODEL`) it closes the models whose bound the job
would pass, so the job may still go to another model; when only those models keep it out it
waits with `UserLimit` naming each. Jobs that name no user are not bound. Every bind counts
towards its user's use for the rest of the decide (a grow adds its GPUs only)."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import PendingReason
from gpuledger.events.specs import UserLimit, UserLimits
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.scheduler.round import Limits, Round, Why, nodes_with_models
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
    if limit.running_jobs is None and limit.gpu_milli is None and not limit.gpu_milli_by_model:
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


def model_blocks(rnd: Round, job: JobRecord, need: int) -> dict[str, str]:
    """Per GPU model the job could use whose `gpus_by_model` bound `need` more GPU milli of
    its user would pass: why, in model order."""
    found = limits_of(rnd, job)
    bounds = found[1].gpu_milli_by_model if found is not None else None
    if not isinstance(bounds, dict) or found is None:
        return {}
    user, models = found[0], job.spec.resources.gpu_models
    held = rnd.user_by_model()
    out: dict[str, str] = {}
    for model, bound in sorted(bounds.items()):
        used = held.get((job.tenant, user, model), 0)
        if (not models or model in models) and used + need > bound:
            out[model] = (
                f"user {user} of tenant {job.tenant} holds {_gpus(used)} {model} GPUs and this "
                f"job needs {_gpus(need)}; at most {_gpus(bound)} at once (gpus_by_model)"
            )
    return out


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The nodes of the GPU models the job's user may hold no more of (`gpus_by_model`)."""
    lim.user_model_blocks = model_blocks(rnd, job, lim.need)
    if not lim.user_model_blocks:
        return frozenset()
    return nodes_with_models(rnd.state, set(lim.user_model_blocks))


def cap(rnd: Round, job: JobRecord, lim: Limits, k: int) -> bool:
    """Whether `k` members close no model beyond those already closed to the smallest gang."""
    need = k * job.spec.resources.gpu_milli_total()
    return not set(model_blocks(rnd, job, need)) - set(lim.user_model_blocks)


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """`UserLimit`, naming each closed model, when only those models keep the job out."""
    if not lim.user_model_blocks or not rnd.binds(job, lim, why, STAGE.name):
        return
    why.reason = PendingReason.UserLimit
    why.message = "; ".join(lim.user_model_blocks.values())
    why.details["user"] = job.spec.submitter
    why.details["gpus_by_model"] = sorted(lim.user_model_blocks)


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """A bind counts towards its user's placed jobs and GPUs, per model too (a grow: its
    GPUs only)."""
    found = limits_of(rnd, job)
    if found is None:
        return
    use = rnd.user_in_use(job.tenant, found[0])
    if job.allocation_id is None:
        use[0] += 1
    per = job.spec.resources.gpu_milli_total()
    use[1] += per * len(members)
    if found[1].gpu_milli_by_model:
        held = rnd.user_by_model()
        for model, milli in rnd.state.member_models(members, per).items():
            key = (job.tenant, found[0], model)
            held[key] = held.get(key, 0) + milli


STAGE = Stage(
    "user_limits",
    __doc__ or "",
    reasons=(PendingReason.UserLimit,),
    gate=gate,
    cap=cap,
    exclude=exclude,
    explain=explain,
    book=book,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants"),
)
