"""The `slurm` queue-order profile (`policy.profile: slurm`): pending jobs ordered the way
Slurm's `priority/multifactor` (or `priority/basic`) plugin and its schedulers order them.

Order, as Slurm's schedulers evaluate jobs: those that can preempt first (`can_preempt`),
then the job's partition `PriorityTier` (higher first), then its job priority (higher
first), then submit time, then job id in numeric order (Slurm's; a total order). The job priority is, under
`multifactor`, the sum over factors of `PriorityWeight<factor> x factor`, each factor in
[0, 1] (Slurm's formula; computed here in integer millis, so the result is exact):

- `age`: time eligible (queued since its dependencies were met, this attempt) over
  `PriorityMaxAge`, capped at 1;
- `fairshare`: `2^(-U/S)`, U the account's decayed usage over all accounts' (the decay is
  `policy.usage_half_life_s`, the site's `PriorityDecayHalfLife`), S its shares (the
  tenant's `over_quota_weight`) over all accounts' shares: Slurm's classic fair-share;
- `jobsize`: the larger of the job's node and CPU fraction of the cluster;
- `partition`: 1 for every job (the site's `PriorityJobFactor` is not read, and is 1 unless
  set, so every partition's factor is 1);
- `qos`: the QOS priority over the largest QOS priority.

Slurm recomputes priorities every `PriorityCalcPeriod` (`calc_period_s`), not
continuously: the age and fair-share factors are taken at the start of the current period
(whole periods since the epoch), so usage within a period does not reorder the queue.

Under `basic` every job's priority is equal: tier, then submit order (Slurm's FIFO).

A job's partition is read from its node selector (`partition: NAME` or
`partition.NAME: "true"`, docs/node-labels.md), else the profile's `default_partition`.
Pure: reads the ledger and `now_ms`, never a clock.
"""

from __future__ import annotations

import math
import re

from msgspec import UNSET

from gpuledger.events.reasons import JobState
from gpuledger.events.slurm_policy import SlurmPolicy
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.domain.policy import dependencies as deps

MILLI = 1000
_DIGITS = re.compile(r"(\d+)")


def profile(state: Ledger) -> SlurmPolicy | None:
    """The site values when the `slurm` profile is in force, else None (native)."""
    policy = state.config.policy
    if policy.profile != "slurm":
        return None
    return policy.slurm if policy.slurm is not UNSET else SlurmPolicy()


def partition_of(job: JobRecord, site: SlurmPolicy) -> str:
    """The job's partition: named by its node selector, else the default partition."""
    selector = job.spec.node_selector or {}
    for key in sorted(selector):
        if key == "partition":
            return selector[key]
        if key.startswith("partition.") and selector[key] == "true":
            return key.split(".", 1)[1]
    return site.default_partition


def tier(job: JobRecord, site: SlurmPolicy) -> int:
    """The `PriorityTier` of the job's partition (1 when the profile does not know it)."""
    part = site.partitions.get(partition_of(job, site))
    return part.tier if part is not None else 1


def can_preempt(job: JobRecord, site: SlurmPolicy) -> bool:
    """Whether the job may preempt anyone: under `partition_prio`, some preemptable partition
    has a lower tier than its own; under `qos`, its QOS lists another in `Preempt`."""
    if site.preempt == "partition_prio":
        mine = tier(job, site)
        return any(p.preemptable and p.tier < mine for p in site.partitions.values())
    if site.preempt == "qos":
        qos = site.qos.get(job.spec.priority_class)
        return qos is not None and bool(qos.preempt)
    return False


def age_milli(state: Ledger, job: JobRecord, now_ms: int, site: SlurmPolicy) -> int:
    """The age factor in millis: time eligible over `max_age_s`, capped at 1000."""
    if job.state != JobState.pending:
        return 0
    since = deps.queued_since_ms(state, job) if job.spec.depends_on else job.pending_since_ms
    if since is None or site.max_age_s <= 0:
        return 0
    return min(MILLI, max(0, now_ms - since) * MILLI // (site.max_age_s * 1000))


def fairshare_milli(state: Ledger, tenant: str, usage: dict[str, int]) -> int:
    """`2^(-U/S)` in millis: U the tenant's share of all decayed usage, S its share of all
    tenants' shares (`over_quota_weight`); 1000 when nobody used anything, 0 without shares."""
    shares = {t: c.over_quota_weight for t, c in state.config.tenants.items()}
    total_shares = sum(shares.values())
    mine = shares.get(tenant, 0)
    if not total_shares or not mine:
        return 0
    total_usage = sum(usage.values())
    if not total_usage:
        return MILLI
    u = usage.get(tenant, 0) / total_usage
    s = mine / total_shares
    return int(MILLI * math.pow(2.0, -u / s))


def jobsize_milli(state: Ledger, job: JobRecord) -> int:
    """The larger of the job's node fraction and CPU fraction of the cluster, in millis."""
    nodes = len(state.nodes)
    cpus = sum(n.info.cpu_milli for n in state.nodes.values())
    members = job.spec.replicas
    by_nodes = members * MILLI // nodes if nodes else 0
    by_cpus = members * job.spec.resources.cpu_milli * MILLI // cpus if cpus else 0
    return min(MILLI, max(by_nodes, by_cpus))


def qos_milli(job: JobRecord, site: SlurmPolicy) -> int:
    """The QOS priority over the largest QOS priority, in millis (0 when none is set)."""
    top = max((q.priority for q in site.qos.values()), default=0)
    qos = site.qos.get(job.spec.priority_class)
    if not top or qos is None:
        return 0
    return qos.priority * MILLI // top


def job_priority(
    state: Ledger, job: JobRecord, now_ms: int, site: SlurmPolicy, usage: dict[str, int]
) -> int:
    """The multifactor job priority in milli-units (sum of weight x factor); 0 under `basic`.
    `usage` holds every tenant's decayed usage at `now_ms`."""
    if not site.multifactor:
        return 0
    now_ms = calc_time_ms(now_ms, site)
    w = site.weights
    return (
        w.get("age", 0) * age_milli(state, job, now_ms, site)
        + w.get("fairshare", 0) * fairshare_milli(state, job.tenant, usage)
        + w.get("jobsize", 0) * jobsize_milli(state, job)
        + w.get("partition", 0) * MILLI
        + w.get("qos", 0) * qos_milli(job, site)
    )


def calc_time_ms(now_ms: int, site: SlurmPolicy) -> int:
    """When priorities were last recomputed: the start of the current `calc_period_s`."""
    period = site.calc_period_s * 1000
    return now_ms - now_ms % period if period > 0 else now_ms


def tenant_usage(state: Ledger, now_ms: int, site: SlurmPolicy) -> dict[str, int]:
    """Every configured tenant's decayed usage at the last priority recomputation (as it
    was then: usage folded since does not count yet)."""
    at = calc_time_ms(now_ms, site)
    return {t: state.usage_at_period(t, at) for t in sorted(state.config.tenants)}


def id_key(job_id: str) -> tuple[str | int, ...]:
    """A job id in numeric order (`4@0` before `15`, as Slurm's job ids): its runs of digits
    compared as numbers, the rest as text (the parts alternate, so the types line up)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(job_id)))


def queue_key(
    state: Ledger, job: JobRecord, now_ms: int, site: SlurmPolicy, usage: dict[str, int]
) -> tuple[int, int, int, int, tuple[str | int, ...], str]:
    """The job's sort key: may preempt (first), tier, priority (both higher first), submit
    time, job id (numeric, then as text: a total order)."""
    return (
        0 if can_preempt(job, site) else 1,
        -tier(job, site),
        -job_priority(state, job, now_ms, site, usage),
        job.submitted_ms,
        id_key(job.job_id),
        job.job_id,
    )


def ordered_pending(state: Ledger, now_ms: int, site: SlurmPolicy) -> list[JobRecord]:
    """Pending jobs in Slurm's order."""
    jobs = [state.jobs[j] for j in state.pending]
    if len(jobs) < 2:
        return jobs
    usage = tenant_usage(state, now_ms, site) if site.multifactor else {}
    return sorted(jobs, key=lambda j: queue_key(state, j, now_ms, site, usage))
