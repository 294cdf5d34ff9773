"""Stage `quota`: a job whose smallest gang would break its tenant's quota, or an
ancestor's, waits (`ExceedsLimit`: `limit` / `borrowing_limit`; `LendingLimit`: the free
capacity is guarantee others do not lend; `NonPreemptibleOverQuota`: non-preemptible work
beyond its guarantee), or, when a schedule in force gives it room later, `QuotaScheduled`
with the first such fire time. A gate; an elastic gang gets members above `min_members` only
as far as the quota allows, and so does a grow. Every bind adds to its tenant's usage (and
non-preemptible usage)."""

from __future__ import annotations

from gpuledger.events import Event
from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.policy import schedules as sched
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, CLOCK, of
from gpuledger.services.scheduler.round import Limits, Round
from gpuledger.services.scheduler.stage import Stage


def gate(rnd: Round, job: JobRecord, lim: Limits) -> list[Event] | None:
    """The quota's pending reason when the smallest gang breaks it; None when within."""
    block = rnd.quota_block(job, lim.need)
    if block is None:
        return None
    details: dict = {"queue_position": lim.position}
    if block[0] == PendingReason.NonPreemptibleOverQuota and rnd.state.config.schedules:
        block = _scheduled(rnd, job, lim, block, details)
    if len(block) > 2:
        details.update(block[2])
    return rnd.pending(job, block[0], block[1], details)


def cap(rnd: Round, job: JobRecord, lim: Limits, k: int) -> bool:
    """Whether `k` members fit the quota."""
    return not rnd.quota_block(job, k * job.spec.resources.gpu_milli_total())


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """The members bound count towards the tenant's usage (and non-preemptible usage)."""
    gpu_milli = job.spec.resources.gpu_milli_total() * len(members)
    rnd.usage[job.tenant] = rnd.usage.get(job.tenant, 0) + gpu_milli
    if not job.preemptible:
        rnd.fixed[job.tenant] = rnd.fixed.get(job.tenant, 0) + gpu_milli


def _scheduled(
    rnd: Round, job: JobRecord, lim: Limits, block: tuple[str, str], details: dict
) -> tuple[str, str]:
    """`QuotaScheduled` when a schedule in force gives the tenant's non-preemptible work
    room for the job later within the horizon (or makes its class preemptible), with the
    first such fire time; else the `NonPreemptibleOverQuota` the quota check found."""
    need, fixed = lim.need, rnd.fixed.get(job.tenant, 0)
    key = (job.tenant, job.spec.priority_class)
    stretches = rnd.outlooks.get(key)
    if stretches is None:
        stretches = rnd.outlooks[key] = sched.outlook(rnd.state.config, *key, rnd.now_ms)
    fit = sched.first_fit(stretches[1:], fixed + need)
    if fit is None:
        return block
    now = stretches[0].guaranteed_gpu_milli
    when = sched.local_time(fit.at_ms, fit.timezone, job.pending_since_ms)
    then = (
        f"{fit.guaranteed_gpu_milli / 1000:g} from {when}"
        if fixed + need <= fit.guaranteed_gpu_milli
        else f"class {job.spec.priority_class} preemptible from {when}"
    )
    details.update(
        starts_at_ms=fit.at_ms,
        schedule=fit.schedule,
        guaranteed_gpu_milli=now,
        scheduled_gpu_milli=fit.guaranteed_gpu_milli,
        need_gpu_milli=need,
        non_preemptible_gpu_milli=fixed,
    )
    return (
        PendingReason.QuotaScheduled,
        f"tenant {job.tenant} is guaranteed {now / 1000:g} now, {then}"
        + (f" (runs {fixed / 1000:g} non-preemptible)" if fixed else "")
        + f"; job needs {need / 1000:g}",
    )


STAGE = Stage(
    "quota",
    __doc__ or "",
    reasons=(
        PendingReason.ExceedsLimit,
        PendingReason.LendingLimit,
        PendingReason.NonPreemptibleOverQuota,
        PendingReason.QuotaScheduled,
    ),
    gate=gate,
    cap=cap,
    book=book,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, "allocations", "tenants", CLOCK),
)
