"""Queue order of pending jobs: effective priority, then how far the tenant sits below its
fair share, then the tenant's time-decayed past usage (`policy.usage_half_life_s`; less
first), then, among its users, the user's own decayed usage over its weight, then the GPU
capacity the user holds now over its weight (less first: `user_share`, the Fair Tree's
second level), then submit time, then job id (a total order). Within a tenant, a job is
ordered at no lower a priority than a colleague's aged job of its class or below when its user
stands ahead of that colleague (`user_aging`), so aging never carries one user's sweep past
a colleague the user order puts first. Under `policy.profile: slurm` the order is Slurm's
instead (`services.domain.policy.slurm_priority`)."""

from __future__ import annotations

from gpuledger.events.reasons import JobState, PreemptionReason
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.policy import dependencies as deps
from gpuledger.services.domain.policy import slurm_priority, user_aging
from gpuledger.services.domain.policy.user_share import Holdings, held_share, holdings, standing

NOT_SUFFERED = frozenset(
    {PreemptionReason.Consolidate, PreemptionReason.Requeue, PreemptionReason.Drain}
)
"""Evictions that are no preemption a job suffered (aging and eviction budgets skip them)."""


def aging_steps(state: Ledger, job: JobRecord, now_ms: int) -> int:
    """Steps of promotion the job has earned: one per `aging_after_preemptions` preemptions
    suffered (migrations by the consolidation pass not counted), plus one per `aging_after_wait_s` of queue time in total (time banked by earlier
    placements, `JobRecord.waited_ms`, plus the current wait while pending, counted from the
    moment its dependencies were met: `dependencies.queued_since_ms`).

    A ratchet: both counts only grow over a job's life, so a promotion is kept once the job
    runs and after it is requeued; it is a function of folded event times, identical live,
    in the simulator and under `verify`."""
    policy = state.config.policy
    steps = 0
    if policy.aging_after_preemptions > 0:
        # a migration (`Consolidate`) is not counted: the job is placed again at once; nor is
        # a requeue its tenant or the operator asked for (`Requeue`)
        suffered = sum(1 for p in job.preemptions if p.reason not in NOT_SUFFERED)
        steps += suffered // policy.aging_after_preemptions
    if policy.aging_after_wait_s > 0:
        waited = job.waited_ms
        if job.state == JobState.pending:
            since = (
                deps.queued_since_ms(state, job) if job.spec.depends_on else job.pending_since_ms
            )
            if since is not None:  # a job waiting on a dependency does not age yet
                waited += max(0, now_ms - since)
        steps += waited // (policy.aging_after_wait_s * 1000)
    return steps


def effective_priority(state: Ledger, job: JobRecord, now_ms: int) -> int:
    """Priority raised by aging (`aging_steps`: one class step up the preemptible ladder per
    step earned), never above the lowest non-preemptible class value minus one. The same
    value orders the queue and protects a running job from eviction by `Priority`, so a job
    aging placed ahead of a class is not then evicted by the next arrival of that class."""
    steps = aging_steps(state, job, now_ms)
    if steps == 0 or not job.preemptible:
        return job.priority
    ladder = sorted(
        {c.value for c in state.config.classes.values() if c.preemptible} | {job.priority}
    )
    ceiling = min(
        (c.value - 1 for c in state.config.classes.values() if not c.preemptible),
        default=job.priority + steps,
    )
    higher = [v for v in ladder if v > job.priority]
    target = higher[min(steps, len(higher)) - 1] if higher else job.priority + steps
    if steps > len(higher):
        target += steps - len(higher)
    return max(job.priority, min(target, ceiling))


def user_rank(
    state: Ledger,
    key: tuple[str, str],
    now_ms: int,
    held: Holdings | None = None,
    users: dict[tuple[str, str], tuple[int, int]] | None = None,
) -> tuple[int, int]:
    """The (tenant, user)'s place in its tenant's user order (standing, held share; less
    first); `users` memoises it within one ordering, `held` is `user_share.holdings`
    (derived when not given)."""
    mine = users.get(key) if users is not None else None
    if mine is None:
        if held is None:
            held = holdings(state)
        mine = (standing(state, *key, now_ms), held_share(state, held, *key))
        if users is not None:
            users[key] = mine
    return mine


def queue_key(
    state: Ledger,
    job: JobRecord,
    now_ms: int,
    usage: dict[str, int] | None = None,
    held: Holdings | None = None,
    users: dict[tuple[str, str], tuple[int, int]] | None = None,
    priority: int | None = None,
) -> tuple[int, int, int, int, int, int, str]:
    """The job's sort key; `usage` memoises decayed usage per tenant and `users` each user's
    (standing, held share) within one ordering, `held` what each user holds
    (`user_share.holdings`, derived when not given); `priority` the priority that orders the
    job (its effective priority when not given)."""
    share = state.fair_shares.get(job.tenant)
    allocated = state.tenant_gpu_milli.get(job.tenant, 0)
    below = allocated - share.fair_share_gpu_milli if share is not None else 0
    if usage is None:
        past = state.usage_at(job.tenant, now_ms)
    elif job.tenant in usage:
        past = usage[job.tenant]
    else:
        past = usage[job.tenant] = state.usage_at(job.tenant, now_ms)
    since = job.submitted_ms if job.queue_ms is None else job.queue_ms  # `top` moves it
    mine = user_rank(state, (job.tenant, job.spec.submitter), now_ms, held, users)
    if priority is None:
        priority = effective_priority(state, job, now_ms)
    return (-priority, below, past, *mine, since, job.job_id)


def ordered_pending(state: Ledger, now_ms: int) -> list[JobRecord]:
    """Pending jobs in queue order: the native key above, or the `slurm` profile's."""
    site = slurm_priority.profile(state)
    if site is not None:
        return slurm_priority.ordered_pending(state, now_ms, site)
    jobs = [state.jobs[j] for j in state.pending]
    if len(jobs) < 2:
        return jobs  # one job is in order: no key to compute
    usage: dict[str, int] = {}
    users: dict[tuple[str, str], tuple[int, int]] = {}
    held = holdings(state)
    rows = [
        (j.job_id, j.tenant, j.spec.submitter, j.priority, effective_priority(state, j, now_ms))
        for j in jobs
    ]
    level = {row[0]: row[4] for row in rows}
    level.update(
        user_aging.lifted(
            rows, lambda tenant, user: user_rank(state, (tenant, user), now_ms, held, users)
        )
    )
    return sorted(
        jobs, key=lambda j: queue_key(state, j, now_ms, usage, held, users, level[j.job_id])
    )
