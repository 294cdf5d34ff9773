"""The aggregate metrics exporter: cluster-level facts read from the DuckDB projection.

`ProjectionCollector` is a Prometheus collector that queries the projection when scraped: it
opens the file read-only (`store.connect_readonly`, waiting at most `wait_s`), runs a fixed set
of aggregate queries (bounded: one row per tenant / class / reason / node / clique, never per
job), closes the file at once (a reader holding it would block the single-writer projector's
next commit), and caches the answer for `ttl_s` (1 s), so any number of scrapers cost one
read a second. When the projection cannot be read (busy, missing) the last good answer is
served with `gpuledger_exporter_up 0`.

Each fact is computed in one place: the audit views of projections/views.sql (`why_pending`,
`job_waits`, `evictions`, `gpu_free`, `gpu_now`, `allocation_now`, `fragmentation`) and the
tables they read; the preemption reasons are replay/metrics.py's. Names follow Kueue
(`pending_workloads`, `admission_wait_time_seconds`, `evicted_workloads_total{reason}`,
`preempted_workloads_total{reason}`, quota as nominal/borrowed/used) with DCGM's label names
for GPUs (`hostname`, `modelName`). Times come from the projection's clock (the time of the
last applied event: `clock` view), so a simulated log reads in its own virtual time.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuledger.replay.metrics import PREEMPTION_REASONS
from gpuledger.services.runtime.metrics import MetricSpec

ADMISSION_WAIT_BUCKETS: tuple[float, ...] = (
    1,
    2,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    7200,
    21600,
    86400,
)
CHECKPOINT_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600)


def _spec(name: str, type_: str, labels: tuple[str, ...], help_: str, source: str) -> MetricSpec:
    return MetricSpec(name, type_, labels, help_, source)


AGGREGATE_METRICS: tuple[MetricSpec, ...] = (
    _spec(
        "gpuledger_pending_workloads",
        "gauge",
        ("tenant", "priority_class", "slo_class", "reason"),
        "Jobs waiting now (submitted or pending), by their current pending reason "
        "(`Submitted` before admission, `Queued` before the scheduler gave a reason).",
        "view why_pending",
    ),
    _spec(
        "gpuledger_pending_workload_oldest_age_seconds",
        "gauge",
        ("tenant", "priority_class", "slo_class"),
        "How long the longest-waiting job of the group has been waiting (since it last "
        "became pending), at the projection's clock.",
        "view why_pending (waiting_s)",
    ),
    _spec(
        "gpuledger_admission_wait_time_seconds",
        "histogram",
        ("slo_class",),
        "Time from submission to the admission decision (JobAdmitted) of admitted jobs, by "
        "SLO class (the slo view's admission_wait_p50_s). Earlier releases used this name for "
        "the time to first placement, now gpuledger_placement_wait_time_seconds "
        "(docs/everyday-operation.md, 'Metric names').",
        "table jobs (admitted_at_ms - submitted_at_ms)",
    ),
    _spec(
        "gpuledger_placement_wait_time_seconds",
        "histogram",
        ("slo_class",),
        "Time from submission to first placement of admitted jobs, by SLO class (the wait "
        "replay/metrics.py reports as wait_s_p50_by_class); jobs never placed are not counted.",
        "view job_waits",
    ),
    _spec(
        "gpuledger_admitted_workloads_total",
        "counter",
        ("tenant", "priority_class"),
        "Jobs admitted.",
        "table jobs (admitted_at_ms)",
    ),
    _spec(
        "gpuledger_rejected_workloads_total",
        "counter",
        ("tenant", "reason"),
        "Jobs rejected at admission, by reason.",
        "table jobs (state rejected)",
    ),
    _spec(
        "gpuledger_evicted_workloads_total",
        "counter",
        ("tenant", "priority_class", "reason"),
        "Gang evictions (GangEvicted) by reason: preemptions, cancels, node loss, ...",
        "view evictions",
    ),
    _spec(
        "gpuledger_timed_out_workloads_total",
        "counter",
        ("tenant", "priority_class"),
        "Runs stopped at their time limit that ended the job `timeout` (reason TimeLimit).",
        "view timeouts (outcome timeout)",
    ),
    _spec(
        "gpuledger_preempted_workloads_total",
        "counter",
        ("tenant", "priority_class", "reason"),
        "Evictions that are preemptions (reason Priority, Reclaim, Backfill, Defragment or "
        "Consolidate), "
        "by the victim's tenant and class.",
        "view evictions (preemption)",
    ),
    _spec(
        "gpuledger_preemption_lost_gpu_seconds_total",
        "counter",
        ("tenant", "priority_class", "reason"),
        "GPU-seconds of work lost to preemption since the victims' last checkpoints (whole-GPU "
        "equivalents; replay/metrics.py's lost_gpu_hours x 3600).",
        "view evictions (lost_gpu_ms)",
    ),
    _spec(
        "gpuledger_preemptions_declined_total",
        "counter",
        ("reason",),
        "Blocked jobs for which preemption declined to evict, by reason (NoVictims, "
        "EvictionBudget, MinRuntime, ...).",
        "table decisions (PreemptionDeclined)",
    ),
    _spec(
        "gpuledger_checkpoint_duration_seconds",
        "histogram",
        (),
        "Time from a preemption request to the victim's first member checkpoint.",
        "table preemptions",
    ),
    _spec(
        "gpuledger_preemptions_uncheckpointed_total",
        "counter",
        (),
        "Preemptions whose victim was evicted without every member checkpointing.",
        "table preemptions",
    ),
    _spec(
        "gpuledger_tenant_quota_nominal_gpus",
        "gauge",
        ("tenant",),
        "The tenant's guaranteed quota in GPUs (Kueue: nominalQuota).",
        "table tenants",
    ),
    _spec(
        "gpuledger_tenant_quota_limit_gpus",
        "gauge",
        ("tenant",),
        "The tenant's limit in GPUs (absent when unlimited).",
        "table tenants",
    ),
    _spec(
        "gpuledger_tenant_quota_borrowing_limit_gpus",
        "gauge",
        ("tenant",),
        "The most the tenant may use above its guarantee, GPUs (Kueue: borrowingLimit; absent "
        "when unset).",
        "table tenants",
    ),
    _spec(
        "gpuledger_tenant_quota_lending_limit_gpus",
        "gauge",
        ("tenant",),
        "The most of the tenant's unused guarantee others may borrow, GPUs (Kueue: "
        "lendingLimit; absent when unset).",
        "table tenants",
    ),
    _spec(
        "gpuledger_tenant_model_quota_borrowing_limit_gpus",
        "gauge",
        ("tenant", "modelName"),
        "Per GPU model: the most the tenant may use of that model above its guarantee for it, "
        "GPUs (Kueue: a flavor's borrowingLimit; absent when unset).",
        "table tenants (borrowing_limit_by_model)",
    ),
    _spec(
        "gpuledger_tenant_model_quota_lending_limit_gpus",
        "gauge",
        ("tenant", "modelName"),
        "Per GPU model: the most of the tenant's unused guarantee for that model others may "
        "borrow, GPUs (Kueue: a flavor's lendingLimit; absent when unset).",
        "table tenants (lending_limit_by_model)",
    ),
    _spec(
        "gpuledger_tenant_fair_share_gpus",
        "gauge",
        ("tenant",),
        "The tenant's fair share in GPUs, as the quota service last published it.",
        "table tenants",
    ),
    _spec(
        "gpuledger_tenant_demand_gpus",
        "gauge",
        ("tenant",),
        "GPUs the tenant's work asks for (running and waiting), as the quota service last "
        "published it.",
        "table tenants",
    ),
    _spec(
        "gpuledger_tenant_quota_used_gpus",
        "gauge",
        ("tenant",),
        "GPUs (equivalents) the tenant's open allocations hold now.",
        "table allocations (open)",
    ),
    _spec(
        "gpuledger_tenant_quota_borrowed_gpus",
        "gauge",
        ("tenant",),
        "GPUs the tenant holds above its guarantee now: max(0, used - nominal).",
        "tables allocations, tenants",
    ),
    _spec(
        "gpuledger_tenant_idle_allocated_gpus",
        "gauge",
        ("tenant",),
        "Idle-but-allocated GPUs of the tenant now: held GPU equivalents x (1 - SM activity), "
        "over GPUs with a sample in the last 5 minutes.",
        "view allocation_now",
    ),
    _spec(
        "gpuledger_tenant_reserved_gpu_seconds_total",
        "counter",
        ("tenant",),
        "GPU-seconds that windows held for the tenant (`gpuledger node maintenance --tenant`) "
        "kept idle, from the log's start (`gpuledger report`'s reserved).",
        "macro reserved_between",
    ),
    _spec(
        "gpuledger_user_running_jobs",
        "gauge",
        ("tenant", "user"),
        "Jobs of the user placed now (an array task, a service replica each); user `*`: the "
        "tenant's total. Users with work or a limit of their own only.",
        "projections/users.py (tables jobs, allocations)",
    ),
    _spec(
        "gpuledger_user_gpus",
        "gauge",
        ("tenant", "user"),
        "GPU capacity the user's placed jobs hold now, GPUs; user `*`: the tenant's total.",
        "projections/users.py (tables jobs, allocations)",
    ),
    _spec(
        "gpuledger_user_pending_jobs",
        "gauge",
        ("tenant", "user"),
        "Jobs of the user waiting now; user `*`: the tenant's total.",
        "projections/users.py (table jobs)",
    ),
    _spec(
        "gpuledger_user_limit",
        "gauge",
        ("tenant", "user", "limit"),
        "A bound in force on the user (`running_jobs`, `gpus`, `submit_jobs`, `array_size`; "
        "user `*`: the tenant's own `submit_jobs`, `array_size`); absent: no bound. Use "
        "against it: `gpuledger_user_*` (`submit_jobs` = running + pending).",
        "projections/users.py (table tenants)",
    ),
    _spec(
        "gpuledger_user_model_gpus",
        "gauge",
        ("tenant", "user", "model"),
        "GPUs of one model the user's placed jobs hold now, for each model the user is bound "
        "on (`gpus_by_model`); its bound is `gpuledger_user_model_limit`.",
        "projections/users.py (tables jobs, allocations)",
    ),
    _spec(
        "gpuledger_user_model_limit",
        "gauge",
        ("tenant", "user", "model"),
        "A user's bound on GPUs of one model held at once (`gpus_by_model`); absent: none.",
        "projections/users.py (table tenants)",
    ),
    _spec(
        "gpuledger_gpus",
        "gauge",
        ("hostname", "modelName"),
        "Healthy GPUs of ready nodes.",
        "view gpu_free",
    ),
    _spec(
        "gpuledger_gpus_allocated",
        "gauge",
        ("hostname", "modelName"),
        "GPU equivalents allocated now (a share counts its milli, a MIG slice its sevenths).",
        "view gpu_now",
    ),
    _spec(
        "gpuledger_gpus_sm_active",
        "gauge",
        ("hostname", "modelName"),
        "Sum of the GPUs' latest SM activity (0-1 each; samples at most 5 minutes old): "
        "the GPU equivalents actually computing.",
        "view gpu_now",
    ),
    _spec(
        "gpuledger_idle_allocated_gpus",
        "gauge",
        ("hostname", "modelName"),
        "Idle-but-allocated GPUs now: held GPU equivalents x (1 - SM activity), over GPUs "
        "with a recent sample.",
        "view allocation_now",
    ),
    _spec(
        "gpuledger_free_gpus",
        "gauge",
        ("hostname", "clique"),
        "Whole free GPUs per NVLink clique.",
        "view fragmentation",
    ),
    _spec(
        "gpuledger_stranded_gpus",
        "gauge",
        ("hostname", "clique"),
        "Free GPU equivalents per NVLink clique that pending jobs cannot use (fragmentation); "
        "0 while no job is pending (nothing is stranded without pending work).",
        "view fragmentation",
    ),
    _spec(
        "gpuledger_nodes",
        "gauge",
        ("status",),
        "Registered nodes by status (ready, cordoned, draining, drained, lost, maintenance, "
        "reserved; `gpuledger nodes`).",
        "view node_status",
    ),
    _spec(
        "gpuledger_dead_letters_total",
        "counter",
        (),
        "DeadLettered events in the log (messages a service could not fold).",
        "table events",
    ),
    _spec(
        "gpuledger_refused_events_total",
        "counter",
        ("code",),
        "Events the acceptance rules refused, by code (StaleLeaderEpoch, WrongSubject, ...).",
        "table refusals",
    ),
    _spec(
        "gpuledger_projection_last_seq",
        "gauge",
        (),
        "Last stream sequence the projection has applied.",
        "table projector_meta",
    ),
    _spec(
        "gpuledger_projection_clock_seconds",
        "gauge",
        (),
        "Time of the last applied event (epoch seconds live; virtual in simulations): the "
        '"now" of every age above.',
        "view clock",
    ),
    _spec(
        "gpuledger_exporter_up",
        "gauge",
        (),
        "1 if the last read of the projection succeeded, else 0 (the values are the last "
        "good read's).",
        "exporter",
    ),
    _spec(
        "gpuledger_exporter_read_duration_seconds",
        "gauge",
        (),
        "Duration of the last read of the projection.",
        "exporter",
    ),
    _spec(
        "gpuledger_exporter_read_errors_total",
        "counter",
        (),
        "Reads of the projection that failed (busy, missing).",
        "exporter",
    ),
)
SPECS = {s.name: s for s in AGGREGATE_METRICS}

_PREEMPTION_SQL = ", ".join(f"'{r}'" for r in sorted(PREEMPTION_REASONS))


ADMISSION_WAITS = (
    "(SELECT coalesce(nullif(slo_class, ''), priority_class) AS slo_class,"
    " (admitted_at_ms - submitted_at_ms) / 1000.0 AS wait_s"
    " FROM jobs WHERE admitted_at_ms IS NOT NULL)"
)
"""Submission to admission per admitted job (the relation of the admission wait histogram)."""


def _histogram_sql(
    source: str, value: str, groups: tuple[str, ...], bounds: tuple[float, ...]
) -> str:
    """Cumulative bucket counts, count and sum of `value` per group, computed in DuckDB."""
    cols = [f"count(*) FILTER (WHERE {value} <= {float(b)})" for b in bounds]
    group = ", ".join(groups)
    head = f"{group}, " if groups else ""
    tail = f" GROUP BY {group} ORDER BY {group}" if groups else ""
    return (
        f"SELECT {head}{', '.join(cols)}, count(*), coalesce(sum({value}), 0) "
        f"FROM {source} WHERE {value} IS NOT NULL{tail}"
    )


@dataclass
class Sample:
    """One read: metric name -> [(label values, value)] or, for histograms, -> [(label
    values, [(le, count)], sum)]."""

    values: dict[str, list]
    read_s: float


def read_metrics(con) -> dict[str, list]:
    """Every aggregate metric's samples from a (read-only) projection connection."""
    out: dict[str, list] = {name: [] for name in SPECS}
    read = _Reader(con, out)
    for section in (_workloads, _preemptions, _tenants, _users, _gpus_and_nodes, _bus_and_clock):
        section(read, con, out)
    return out


class _Reader:
    """The query helpers shared by `read_metrics`' sections: rows of a query, and a histogram
    metric from `_histogram_sql`'s cumulative columns."""

    def __init__(self, con, out: dict[str, list]) -> None:
        self.con, self.out = con, out

    def __call__(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()

    def hist(self, name: str, sql: str, groups: int, bounds: tuple[float, ...]) -> None:
        for r in self(sql):
            labels = [str(x) for x in r[:groups]]
            counts = r[groups : groups + len(bounds)]
            total, s = r[groups + len(bounds)], r[groups + len(bounds) + 1]
            buckets = [(repr(float(b)), c) for b, c in zip(bounds, counts, strict=True)]
            self.out[name].append((labels, [*buckets, ("+Inf", total)], float(s)))


def _workloads(read: _Reader, con, out: dict[str, list]) -> None:
    """Pending, admitted, rejected, evicted, timed-out workloads and their waits."""
    for t, pc, slo, reason, n in read(
        "SELECT coalesce(tenant, ''), coalesce(priority_class, ''),"
        " coalesce(nullif(j.slo_class, ''), priority_class, ''),"
        " coalesce(reason, CASE state WHEN 'submitted' THEN 'Submitted' ELSE 'Queued' END),"
        " count(*)"
        " FROM why_pending JOIN (SELECT job_id, slo_class FROM jobs) j USING (job_id)"
        " GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_pending_workloads"].append(([t, pc, slo, reason], n))
    for t, pc, slo, oldest in read(
        "SELECT coalesce(tenant, ''), coalesce(priority_class, ''),"
        " coalesce(nullif(j.slo_class, ''), priority_class, ''), max(waiting_s)"
        " FROM why_pending JOIN (SELECT job_id, slo_class FROM jobs) j USING (job_id)"
        " GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_pending_workload_oldest_age_seconds"].append(
            ([t, pc, slo], max(0.0, float(oldest or 0)))
        )
    read.hist(
        "gpuledger_admission_wait_time_seconds",
        _histogram_sql(ADMISSION_WAITS, "wait_s", ("slo_class",), ADMISSION_WAIT_BUCKETS),
        1,
        ADMISSION_WAIT_BUCKETS,
    )
    read.hist(
        "gpuledger_placement_wait_time_seconds",
        _histogram_sql("job_waits", "wait_s", ("slo_class",), ADMISSION_WAIT_BUCKETS),
        1,
        ADMISSION_WAIT_BUCKETS,
    )
    for t, pc, n in read(
        "SELECT coalesce(tenant, ''), coalesce(priority_class, ''), count(*)"
        " FROM jobs WHERE admitted_at_ms IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_admitted_workloads_total"].append(([t, pc], n))
    for t, r, n in read(
        "SELECT coalesce(tenant, ''), coalesce(reason, ''), count(*) FROM jobs"
        " WHERE state = 'rejected' GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_rejected_workloads_total"].append(([t, r], n))
    for t, pc, r, n, pre, lost in read(
        "SELECT coalesce(tenant, ''), coalesce(priority_class, ''), coalesce(reason, ''),"
        " count(*), bool_or(preemption), coalesce(sum(lost_gpu_ms), 0)"
        " FROM evictions GROUP BY 1, 2, 3 ORDER BY ALL"
    ):
        out["gpuledger_evicted_workloads_total"].append(([t, pc, r], n))
        if pre:
            out["gpuledger_preempted_workloads_total"].append(([t, pc, r], n))
            out["gpuledger_preemption_lost_gpu_seconds_total"].append(([t, pc, r], lost / 1000))
    for t, pc, n in read(
        "SELECT coalesce(tenant, ''), coalesce(priority_class, ''), count(*) FROM timeouts"
        " WHERE outcome = 'timeout' GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_timed_out_workloads_total"].append(([t, pc], n))
    for r, n in read(
        "SELECT coalesce(reason, ''), count(*) FROM decisions"
        " WHERE type = 'PreemptionDeclined' GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_preemptions_declined_total"].append(([r], n))


def _preemptions(read: _Reader, con, out: dict[str, list]) -> None:
    """Checkpoint durations and evictions without a checkpoint."""
    read.hist(
        "gpuledger_checkpoint_duration_seconds",
        _histogram_sql(
            "(SELECT (checkpointed_at_ms - requested_at_ms) / 1000.0 AS s FROM preemptions)",
            "s",
            (),
            CHECKPOINT_BUCKETS,
        ),
        0,
        CHECKPOINT_BUCKETS,
    )
    (unck,) = con.execute(
        "SELECT count(*) FROM preemptions WHERE outcome = 'evicted'"
        " AND NOT coalesce(checkpointed, false)"
    ).fetchone()
    out["gpuledger_preemptions_uncheckpointed_total"].append(([], unck))


def _tenants(read: _Reader, con, out: dict[str, list]) -> None:
    """Each tenant's quota, fair share, demand, use and idle allocated GPUs."""
    used = dict(
        read(
            "SELECT tenant, sum(gpu_milli) FROM allocations"
            " WHERE ended_at_ms IS NULL AND gpu_index >= 0 GROUP BY tenant"
        )
    )
    tenants = read(
        "SELECT tenant, guaranteed_gpu_milli, limit_gpu_milli, fair_share_gpu_milli,"
        " demand_gpu_milli, borrowing_limit_gpu_milli, lending_limit_gpu_milli,"
        " borrowing_limit_by_model, lending_limit_by_model"
        " FROM tenants ORDER BY tenant"
    )
    known = {t for t, *_ in tenants}
    for row in tenants:
        t, guaranteed, limit, fair, demand, borrowing, lending = row[:7]
        for name, by_model in zip(
            (
                "gpuledger_tenant_model_quota_borrowing_limit_gpus",
                "gpuledger_tenant_model_quota_lending_limit_gpus",
            ),
            row[7:],
            strict=True,
        ):
            for model, milli in sorted(json.loads(by_model).items()) if by_model else ():
                out[name].append(([t, model], milli / 1000))
        u = used.get(t) or 0
        out["gpuledger_tenant_quota_nominal_gpus"].append(([t], (guaranteed or 0) / 1000))
        if limit is not None:
            out["gpuledger_tenant_quota_limit_gpus"].append(([t], limit / 1000))
        if borrowing is not None:
            out["gpuledger_tenant_quota_borrowing_limit_gpus"].append(([t], borrowing / 1000))
        if lending is not None:
            out["gpuledger_tenant_quota_lending_limit_gpus"].append(([t], lending / 1000))
        if fair is not None:
            out["gpuledger_tenant_fair_share_gpus"].append(([t], fair / 1000))
        if demand is not None:
            out["gpuledger_tenant_demand_gpus"].append(([t], demand / 1000))
        out["gpuledger_tenant_quota_used_gpus"].append(([t], u / 1000))
        out["gpuledger_tenant_quota_borrowed_gpus"].append(
            ([t], max(0, u - (guaranteed or 0)) / 1000)
        )
    for t in sorted(set(used) - known):  # allocations of a tenant no longer configured
        out["gpuledger_tenant_quota_used_gpus"].append(([t or ""], (used[t] or 0) / 1000))
    for t, idle in read(
        "SELECT coalesce(tenant, ''), coalesce(sum(idle_gpus), 0)"
        " FROM allocation_now GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_tenant_idle_allocated_gpus"].append(([t], float(idle)))
    for t, ms in read(
        "SELECT tenant, sum(gpu_ms) FROM reserved_between("
        "(SELECT start_ms FROM run_window), (SELECT now_ms FROM clock)) GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_tenant_reserved_gpu_seconds_total"].append(([t], float(ms) / 1000))


def _users(read: _Reader, con, out: dict[str, list]) -> None:
    """Each user's use against its limits: the rows of `gpuledger users`, as metrics."""
    from gpuledger.projections.users import users_rows

    for r in users_rows(con):
        who = [r["tenant"], r["user"]]
        out["gpuledger_user_running_jobs"].append((who, r["running_jobs"]))
        out["gpuledger_user_gpus"].append((who, r["gpus"]))
        out["gpuledger_user_pending_jobs"].append((who, r["pending_jobs"]))
        for limit in ("running_jobs", "gpus", "submit_jobs", "array_size"):
            value = r[f"{limit}_limit"]
            if value is not None:
                out["gpuledger_user_limit"].append(([*who, limit], value))
        for model, held in (r.get("gpus_by_model") or {}).items():
            out["gpuledger_user_model_gpus"].append(([*who, model], held["gpus"]))
            out["gpuledger_user_model_limit"].append(([*who, model], held["limit"]))


def _gpus_and_nodes(read: _Reader, con, out: dict[str, list]) -> None:
    """GPUs per node and model, idle, free and stranded GPUs, nodes by status."""
    for node, model, n, alloc, active in read(
        "SELECT node, coalesce(model, ''), count(*), sum(allocated_milli) / 1000.0,"
        " coalesce(sum(sm_active), 0) FROM gpu_now GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_gpus"].append(([node, model], n))
        out["gpuledger_gpus_allocated"].append(([node, model], float(alloc)))
        out["gpuledger_gpus_sm_active"].append(([node, model], float(active)))
    for node, model, idle in read(
        "SELECT node, coalesce(model, ''), coalesce(sum(idle_gpus), 0)"
        " FROM allocation_now GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_idle_allocated_gpus"].append(([node, model], float(idle)))
    for node, clique, free, stranded in read(
        "SELECT node, coalesce(clique, ''), free_gpus,"
        " CASE WHEN pending_jobs > 0 THEN stranded_gpu_equiv ELSE 0 END FROM fragmentation"
        " WHERE node <> '*' ORDER BY ALL"
    ):
        out["gpuledger_free_gpus"].append(([node, clique], free))
        out["gpuledger_stranded_gpus"].append(([node, clique], float(stranded)))
    for status, n in read(
        "SELECT coalesce(status, ''), count(*) FROM node_status GROUP BY ALL ORDER BY ALL"
    ):
        out["gpuledger_nodes"].append(([status], n))


def _bus_and_clock(read: _Reader, con, out: dict[str, list]) -> None:
    """Dead letters, refused events, and the projection's position and clock."""
    (dead,) = con.execute("SELECT count(*) FROM events WHERE type = 'DeadLettered'").fetchone()
    out["gpuledger_dead_letters_total"].append(([], dead))
    for code, n in read("SELECT code, count(*) FROM refusals GROUP BY ALL ORDER BY ALL"):
        out["gpuledger_refused_events_total"].append(([code], n))
    meta = con.execute("SELECT last_seq, now_ms FROM clock").fetchone() or (0, 0)
    out["gpuledger_projection_last_seq"].append(([], meta[0]))
    out["gpuledger_projection_clock_seconds"].append(([], meta[1] / 1000))


class ProjectionCollector:
    """Prometheus collector over the projection at `db_path` (see the module doc)."""

    def __init__(self, db_path: str | Path, *, ttl_s: float = 1.0, wait_s: float = 2.0) -> None:
        self.db_path = Path(db_path)
        self.ttl_s, self.wait_s = ttl_s, wait_s
        self._lock = threading.Lock()
        self._last: Sample | None = None
        self._read_at = float("-inf")
        self._up = False
        self.errors = 0
        self.last_error: str | None = None

    def describe(self) -> list:
        return []

    def sample(self) -> Sample | None:
        """The cached read, refreshed when older than `ttl_s`."""
        from gpuledger.projections.store import connect_readonly

        with self._lock:
            if time.monotonic() - self._read_at < self.ttl_s:
                return self._last
            started = time.monotonic()
            try:
                con = connect_readonly(self.db_path, wait_s=self.wait_s)
                try:
                    values = read_metrics(con)
                finally:
                    con.close()
            except Exception as exc:  # noqa: BLE001 - busy, missing: serve the last good read
                self.errors += 1
                self._up = False
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            else:
                self._up = True
                self._last = Sample(values, time.monotonic() - started)
            self._read_at = time.monotonic()
            return self._last

    def collect(self):
        sample = self.sample()
        values = {} if sample is None else sample.values
        for spec in AGGREGATE_METRICS:
            fam = spec.family()
            if spec.name == "gpuledger_exporter_up":
                fam.add_metric([], 1 if self._up else 0)
            elif spec.name == "gpuledger_exporter_read_duration_seconds":
                if sample is not None:
                    fam.add_metric([], sample.read_s)
            elif spec.name == "gpuledger_exporter_read_errors_total":
                fam.add_metric([], self.errors)
            elif spec.type == "histogram":
                for labels, buckets, total in values.get(spec.name, []):
                    fam.add_metric(labels, buckets=buckets, sum_value=total)
            else:
                for labels, value in values.get(spec.name, []):
                    fam.add_metric(labels, value)
            yield fam


def render_docs() -> str:
    """docs/metrics.md, generated from the declarations (`gpuledger metrics --docs`)."""
    from gpuledger.services.runtime.metrics import SERVICE_METRICS, docs_table

    return (
        "# Metrics\n\n"
        "<!-- Generated by `gpuledger metrics --docs > docs/metrics.md`; do not edit by hand\n"
        "     (tests/cli/test_metrics_docs.py checks this file equals the generated one). -->\n\n"
        "Prometheus names: `gpuledger_` prefix, base units (`_seconds`), counters end in "
        "`_total`; Kueue's names where Kueue has the fact, DCGM's label names for GPUs "
        "(`hostname`, `modelName`); never a job id in a label.\n\n"
        "## Aggregate exporter (cluster facts from the projection)\n\n"
        "Served by `gpuledger metrics --data DIR --port PORT` and on `gpuledger up "
        "--metrics-port PORT`. Read from `<data>/projection.duckdb` (read-only, at most once a "
        'second, closed at once); ages and "now" are the projection\'s clock (the time of the '
        "last applied event). Source: projections/exporter.py.\n\n"
        + docs_table(AGGREGATE_METRICS)
        + "\n## Per service (each service's own `/metrics`)\n\n"
        "Served by `gpuledger run SERVICE --metrics-port PORT`; `gpuledger up --metrics-port "
        "PORT` serves them on PORT+1 (in-process: one endpoint, one `service` label per "
        "service) or PORT+1, PORT+2, ... (one per child with `--processes`, printed at start). "
        "Read from the host loop's counters on scrape. Source: services/runtime/metrics.py.\n\n"
        + docs_table(SERVICE_METRICS)
    )
