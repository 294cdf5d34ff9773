-- gpuledger audit views. Everything here is derived from the projected tables; "now" is the
-- time of the last applied event (`clock`), so simulated (virtual-time) logs read correctly.

-- Percentile as replay/metrics.py defines it: the sorted values' element at index
-- round(q x (n - 1)), halves to even (nearest rank, no interpolation); NULL for no values.
-- `xs` holds no NULLs (aggregate it with FILTER (WHERE x IS NOT NULL)).
CREATE OR REPLACE MACRO nearest_rank(xs, q) AS
    list_sort(xs)[CAST(round_even(q * (len(xs) - 1), 0) AS BIGINT) + 1];

CREATE OR REPLACE VIEW clock AS
SELECT coalesce(updated_at_ms, 0) AS now_ms, last_seq FROM projector_meta WHERE id = 1;

-- Why is each waiting job waiting? One row per submitted/pending job.
CREATE OR REPLACE VIEW why_pending AS
WITH last_reason AS (
    SELECT job_id, max(at_ms) AS reason_since_ms, count(*) AS reason_changes
    FROM pending_reasons GROUP BY job_id
), declined AS (
    SELECT job_id, arg_max(reason, seq) AS declined_reason, arg_max(message, seq) AS declined_message
    FROM decisions WHERE type = 'PreemptionDeclined' GROUP BY job_id
), services AS (
    -- a service (`kind: service`) waits as its replicas `<service>~<i>`: they are listed, not it
    SELECT DISTINCT regexp_extract(job_id, '^(.+)~[0-9]+$', 1) AS job_id
    FROM jobs WHERE regexp_matches(job_id, '~[0-9]+$')
)
SELECT j.job_id, j.tenant, j.priority_class, j.priority, j.state,
       j.gpu_milli / 1000.0 AS gpus,
       j.reason, j.message, j.details,
       coalesce(TRY_CAST(j.details ->> 'queue_position' AS BIGINT),
                row_number() OVER (ORDER BY j.priority DESC NULLS LAST, j.pending_since_ms,
                                   j.submitted_at_ms, j.job_id)) AS queue_position,
       TRY_CAST(j.details ->> 'preemption_would_help' AS BOOLEAN) AS preemption_would_help,
       coalesce(j.details -> 'nodes', j.details -> 'node_histogram', j.details -> 'histogram')
           AS node_histogram,
       d.declined_reason, d.declined_message,
       r.reason_since_ms, coalesce(r.reason_changes, 0) AS reason_changes,
       (c.now_ms - coalesce(j.pending_since_ms, j.submitted_at_ms)) / 1000.0 AS waiting_s,
       j.preemptions, j.submitted_at_ms, j.pending_since_ms
FROM jobs j
CROSS JOIN clock c
LEFT JOIN last_reason r USING (job_id)
LEFT JOIN declined d USING (job_id)
WHERE j.state IN ('submitted', 'pending') AND j.job_id NOT IN (SELECT job_id FROM services);

-- Who preempted whom, why, and what it cost. One row per PreemptionRequested.
CREATE OR REPLACE VIEW who_preempted AS
WITH held AS (
    SELECT allocation_id, sum(gpu_milli) / 1000.0 AS gpus, count(DISTINCT rank) AS members
    FROM allocations GROUP BY allocation_id
)
SELECT p.victim_job_id AS victim, p.victim_tenant, p.victim_priority,
       p.beneficiary AS preemptor, coalesce(p.beneficiary_tenant, b.tenant) AS preemptor_tenant,
       coalesce(p.beneficiary_priority, b.priority) AS preemptor_priority,
       p.reason, p.message, p.allocation_id, h.gpus AS victim_gpus, h.members AS victim_members,
       p.requested_at_ms, p.deadline_ms, p.checkpointed_at_ms,
       coalesce(p.checkpointed, false) AS checkpointed,
       p.evicted_at_ms, p.outcome,
       coalesce(p.lost_gpu_ms, 0) / 1000.0 AS lost_gpu_seconds,
       coalesce(p.lost_gpu_ms, 0) / 3600000.0 AS lost_gpu_hours,
       p.progress_ms / 1000.0 AS saved_progress_s,
       coalesce(p.details -> 'alternatives', p.details -> 'rejected', p.details -> 'considered')
           AS alternatives,
       p.details, p.request_seq
FROM preemptions p
LEFT JOIN jobs b ON b.job_id = p.beneficiary
LEFT JOIN held h ON h.allocation_id = p.allocation_id;

-- One sample interval per GPU: MIG per-instance samples are averaged to the GPU; a sample
-- holds until the next one of the same GPU (at most 5 minutes, and never past "now").
CREATE OR REPLACE VIEW gpu_samples AS
WITH s AS (
    SELECT node, uuid, at_ms, seq, avg(sm_active) AS sm_active,
           any_value(util_source) AS util_source, sum(memory_used_mib) AS memory_used_mib
    FROM gpu_metrics WHERE sm_active IS NOT NULL
    GROUP BY node, uuid, at_ms, seq
)
SELECT s.*,
       least(coalesce(lead(at_ms) OVER (PARTITION BY uuid ORDER BY at_ms, seq), c.now_ms),
             at_ms + 300000) AS until_ms
FROM s CROSS JOIN clock c;

-- Allocation intervals (per member and GPU) with the SM activity measured while held.
CREATE OR REPLACE VIEW allocation_usage AS
WITH a AS (
    SELECT a.*, coalesce(a.ended_at_ms, c.now_ms) AS until_ms
    FROM allocations a CROSS JOIN clock c WHERE a.gpu_index >= 0
), m AS (
    SELECT a.allocation_id, a.rank, a.gpu_index,
           sum(greatest(0, least(a.until_ms, s.until_ms) - greatest(a.placed_at_ms, s.at_ms)))
               AS measured_ms,
           sum(greatest(0, least(a.until_ms, s.until_ms) - greatest(a.placed_at_ms, s.at_ms))
               * s.sm_active) AS active_ms
    FROM a JOIN gpu_samples s
      ON s.uuid = a.gpu_uuid AND s.at_ms < a.until_ms AND s.until_ms > a.placed_at_ms
    GROUP BY ALL
)
SELECT a.tenant, a.job_id, a.allocation_id, a.rank, a.node, a.gpu_index, a.gpu_uuid,
       a.sharing, a.gpu_milli, a.borrowing, a.placed_at_ms, a.until_ms,
       a.gpu_milli / 1000.0 * (a.until_ms - a.placed_at_ms) AS allocated_gpu_ms,
       a.gpu_milli / 1000.0 * coalesce(m.measured_ms, 0) AS measured_gpu_ms,
       a.gpu_milli / 1000.0 * coalesce(m.active_ms, 0) AS used_gpu_ms
FROM a LEFT JOIN m USING (allocation_id, rank, gpu_index);

-- Allocation vs real (SM-activity) utilisation per tenant, and the idle-but-allocated gap.
CREATE OR REPLACE VIEW utilisation AS
SELECT tenant,
       sum(allocated_gpu_ms) / 3600000.0 AS allocated_gpu_hours,
       sum(measured_gpu_ms) / 3600000.0 AS measured_gpu_hours,
       sum(used_gpu_ms) / 3600000.0 AS used_gpu_hours,
       sum(used_gpu_ms) / nullif(sum(measured_gpu_ms), 0) AS sm_active_avg,
       (sum(measured_gpu_ms) - sum(used_gpu_ms)) / 3600000.0 AS idle_allocated_gpu_hours,
       (sum(allocated_gpu_ms) - sum(measured_gpu_ms)) / 3600000.0 AS unmeasured_gpu_hours
FROM allocation_usage
GROUP BY tenant;

-- GPU-hours allocated vs used, borrowed, lost to preemption, per tenant.
CREATE OR REPLACE VIEW tenant_usage AS
WITH q AS (
    SELECT tenant, at_ms, borrowed_gpu_milli,
           lead(at_ms) OVER (PARTITION BY tenant ORDER BY seq) AS next_ms
    FROM quota_usage
), borrowed AS (
    SELECT q.tenant,
           sum(q.borrowed_gpu_milli / 1000.0 * (coalesce(q.next_ms, c.now_ms) - q.at_ms))
               / 3600000.0 AS borrowed_gpu_hours
    FROM q CROSS JOIN clock c GROUP BY q.tenant
), alloc AS (
    SELECT tenant,
           sum(allocated_gpu_ms) / 3600000.0 AS allocated_gpu_hours,
           sum(allocated_gpu_ms) FILTER (WHERE borrowing) / 3600000.0
               AS borrowing_placement_gpu_hours,
           sum(used_gpu_ms) / 3600000.0 AS used_gpu_hours,
           sum(measured_gpu_ms) / 3600000.0 AS measured_gpu_hours
    FROM allocation_usage GROUP BY tenant
), lost AS (
    SELECT victim_tenant AS tenant, count(*) FILTER (WHERE outcome = 'evicted') AS preempted,
           sum(coalesce(lost_gpu_ms, 0)) / 3600000.0 AS lost_gpu_hours
    FROM preemptions GROUP BY 1
), gained AS (
    SELECT coalesce(p.beneficiary_tenant, b.tenant) AS tenant, count(*) AS preemptions_caused
    FROM preemptions p LEFT JOIN jobs b ON b.job_id = p.beneficiary GROUP BY 1
), held AS (
    -- what the tenant's placements hold now (the fold's allocations; the `tenants` row's
    -- allocated_gpu_milli is as of the last FairShareUpdated, which allocation alone does not
    -- republish)
    SELECT tenant, sum(gpu_milli) / 1000.0 AS gpus FROM allocations
    WHERE ended_at_ms IS NULL GROUP BY tenant
), names AS (
    SELECT tenant FROM tenants UNION SELECT tenant FROM alloc UNION SELECT tenant FROM borrowed
)
SELECT n.tenant,
       t.guaranteed_gpu_milli / 1000.0 AS guaranteed_gpus,
       t.limit_gpu_milli / 1000.0 AS limit_gpus,
       t.borrowing_limit_gpu_milli / 1000.0 AS borrowing_limit_gpus,
       t.lending_limit_gpu_milli / 1000.0 AS lending_limit_gpus,
       t.fair_share_gpu_milli / 1000.0 AS fair_share_gpus,
       coalesce(h.gpus, 0) AS allocated_gpus_now,
       coalesce(a.allocated_gpu_hours, 0) AS allocated_gpu_hours,
       coalesce(a.used_gpu_hours, 0) AS used_gpu_hours,
       a.used_gpu_hours / nullif(a.measured_gpu_hours, 0) AS sm_active_avg,
       coalesce(b.borrowed_gpu_hours, 0) AS borrowed_gpu_hours,
       coalesce(a.borrowing_placement_gpu_hours, 0) AS borrowing_placement_gpu_hours,
       coalesce(l.lost_gpu_hours, 0) AS lost_gpu_hours,
       coalesce(l.preempted, 0) AS times_preempted,
       coalesce(g.preemptions_caused, 0) AS preemptions_caused
FROM names n
LEFT JOIN tenants t USING (tenant)
LEFT JOIN alloc a USING (tenant)
LEFT JOIN borrowed b USING (tenant)
LEFT JOIN lost l USING (tenant)
LEFT JOIN gained g USING (tenant)
LEFT JOIN held h USING (tenant);

-- Free capacity per GPU right now (ready nodes, healthy GPUs).
CREATE OR REPLACE VIEW gpu_free AS
SELECT g.node, g.gpu_index, g.uuid, g.model, g.memory_mib, g.clique, g.sharing,
       1000 - coalesce(sum(a.gpu_milli), 0) AS free_milli
FROM gpus g
JOIN nodes n ON n.node = g.node AND n.status = 'ready'
LEFT JOIN allocations a
  ON a.node = g.node AND a.gpu_index = g.gpu_index AND a.ended_at_ms IS NULL
WHERE g.healthy
GROUP BY ALL;

-- Per free GPU: could any pending job use it (a job waiting for a dependency is not pending
-- work: it could not use it)? (whole GPUs: enough free GPUs in the same
-- NVLink clique; shares: enough free milli; MIG: a MIG GPU with enough free slices; models
-- and GPU memory must match).
CREATE OR REPLACE VIEW gpu_usability AS
WITH f AS (
    SELECT *, count(*) FILTER (WHERE free_milli = 1000 AND sharing <> 'mig')
                  OVER (PARTITION BY node, clique) AS clique_free_gpus
    FROM gpu_free WHERE free_milli > 0
), p AS (
    SELECT job_id, member_gpus, member_gpu_milli, member_mig_profile, gpu_models,
           coalesce(min_gpu_memory_mib, 0) AS min_mem,
           CASE WHEN member_mig_profile IS NOT NULL THEN
               CAST(ceil(TRY_CAST(split_part(member_mig_profile, 'g', 1) AS BIGINT) * 1000 / 7.0)
                    AS BIGINT) END AS mig_milli
    FROM jobs WHERE state = 'pending'
      AND coalesce(reason, '') NOT IN ('Dependency', 'DependencyNeverSatisfied')
)
SELECT f.*,
       EXISTS (
           SELECT 1 FROM p
           WHERE (p.gpu_models IS NULL OR len(p.gpu_models) = 0 OR list_contains(p.gpu_models, f.model))
             AND f.memory_mib >= p.min_mem
             AND ((p.member_gpus > 0 AND f.free_milli = 1000 AND f.sharing <> 'mig'
                   AND f.clique_free_gpus >= p.member_gpus)
               OR (coalesce(p.member_gpus, 0) = 0 AND p.member_gpu_milli > 0
                   AND f.sharing <> 'mig' AND f.free_milli >= p.member_gpu_milli)
               OR (p.member_mig_profile IS NOT NULL AND f.sharing = 'mig'
                   AND f.free_milli >= coalesce(p.mig_milli, 1000)))
       ) AS usable_by_pending
FROM f;

-- Free GPUs that no pending job can use, per NVLink clique (node, clique) and overall ('*').
CREATE OR REPLACE VIEW fragmentation AS
WITH per_clique AS (
    SELECT node, clique, string_agg(DISTINCT model, ',') AS models,
           count(*) FILTER (WHERE free_milli = 1000) AS free_gpus,
           sum(free_milli) AS free_milli,
           count(*) FILTER (WHERE free_milli = 1000 AND NOT usable_by_pending) AS stranded_gpus,
           coalesce(sum(free_milli) FILTER (WHERE NOT usable_by_pending), 0) AS stranded_milli,
           count(*) FILTER (WHERE free_milli < 1000) AS partial_gpus
    FROM gpu_usability GROUP BY node, clique
), pending AS (
    SELECT count(*) AS pending_jobs FROM jobs WHERE state = 'pending'
      AND coalesce(reason, '') NOT IN ('Dependency', 'DependencyNeverSatisfied')
)
SELECT c.node, c.clique, c.models, c.free_gpus, c.free_milli / 1000.0 AS free_gpu_equiv,
       c.partial_gpus, c.stranded_gpus, c.stranded_milli / 1000.0 AS stranded_gpu_equiv,
       c.stranded_milli / nullif(c.free_milli, 0) AS stranded_ratio,
       c.free_gpus AS largest_free_clique, p.pending_jobs
FROM per_clique c CROSS JOIN pending p
UNION ALL
SELECT '*', '*', string_agg(DISTINCT c.models, ','), sum(c.free_gpus), sum(c.free_milli) / 1000.0,
       sum(c.partial_gpus), sum(c.stranded_gpus), sum(c.stranded_milli) / 1000.0,
       sum(c.stranded_milli) / nullif(sum(c.free_milli), 0),
       max(c.free_gpus), any_value(p.pending_jobs)
FROM per_clique c CROSS JOIN pending p;

-- Admission wait and time to place per SLO class (seconds). The class and the percentile are
-- those of replay/metrics.py (`wait_s_p50_by_class` = `time_to_place_p50_s`).
CREATE OR REPLACE VIEW slo AS
SELECT coalesce(nullif(j.slo_class, ''), j.priority_class, 'unknown') AS slo_class,
       count(*) AS jobs,
       count(j.admitted_at_ms) AS admitted,
       count(*) FILTER (WHERE j.state = 'rejected') AS rejected,
       count(j.first_placed_at_ms) AS placed,
       count(*) FILTER (WHERE j.state IN ('submitted', 'pending')) AS waiting_now,
       nearest_rank(list((j.admitted_at_ms - j.submitted_at_ms) / 1000.0)
                    FILTER (WHERE j.admitted_at_ms IS NOT NULL), 0.5) AS admission_wait_p50_s,
       nearest_rank(list((j.admitted_at_ms - j.submitted_at_ms) / 1000.0)
                    FILTER (WHERE j.admitted_at_ms IS NOT NULL), 0.99) AS admission_wait_p99_s,
       nearest_rank(list((j.first_placed_at_ms - j.submitted_at_ms) / 1000.0)
                    FILTER (WHERE j.admitted_at_ms IS NOT NULL
                            AND j.first_placed_at_ms IS NOT NULL), 0.5) AS time_to_place_p50_s,
       nearest_rank(list((j.first_placed_at_ms - j.submitted_at_ms) / 1000.0)
                    FILTER (WHERE j.admitted_at_ms IS NOT NULL
                            AND j.first_placed_at_ms IS NOT NULL), 0.99) AS time_to_place_p99_s,
       max(j.first_placed_at_ms - j.submitted_at_ms) / 1000.0 AS time_to_place_max_s,
       max(c.now_ms - j.pending_since_ms) FILTER (WHERE j.state = 'pending') / 1000.0
           AS oldest_pending_s
FROM jobs j CROSS JOIN clock c
GROUP BY ALL;

-- Run metrics of the projected log, by the definitions in replay/metrics.py (the numbers
-- `simulate --json` and `compare` print; tests/replay/test_metrics.py checks all three agree).
-- Window: [first event, last event]. Capacity: 1000 x GPUs of each registered node while not
-- lost (a re-registration replaces it, a heartbeat revives it). Allocated: every allocation
-- interval's milli, an open one up to the end of the window.
CREATE OR REPLACE VIEW run_window AS
SELECT min(occurred_at_ms) AS start_ms, max(occurred_at_ms) AS end_ms, count(*) AS events
FROM events WHERE type <> 'Undecodable';

CREATE OR REPLACE VIEW node_capacity AS
WITH ne AS (
    SELECT seq, occurred_at_ms AS at_ms, type,
           CASE WHEN type = 'NodeRegistered' THEN payload -> 'node' ->> 'name'
                ELSE payload ->> 'node' END AS node,
           CASE WHEN type = 'NodeRegistered'
                THEN json_array_length(payload -> 'node' -> 'gpus') END AS gpus
    FROM events WHERE type IN ('NodeRegistered', 'NodeLost', 'NodeHeartbeat')
), s AS (
    SELECT *, last_value(gpus IGNORE NULLS) OVER (
                  PARTITION BY node ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
              ) AS registered_gpus,
           -- lost: the node's latest NodeLost is later than its latest registration/heartbeat
           type = 'NodeLost' AS lost
    FROM ne
)
SELECT node, seq, at_ms,
       CASE WHEN registered_gpus IS NULL OR lost THEN 0 ELSE 1000 * registered_gpus END
           AS capacity_milli,
       coalesce(lead(at_ms) OVER (PARTITION BY node ORDER BY seq), w.end_ms) AS until_ms
FROM s CROSS JOIN run_window w;

-- One row per admitted job: its SLO class and its wait (first placement - submission, NULL
-- while never placed), as replay/metrics.py defines them; `wait_by_class` and the
-- admission wait histogram of the metrics exporter (projections/exporter.py) read it.
CREATE OR REPLACE VIEW job_waits AS
SELECT coalesce(nullif(slo_class, ''), priority_class) AS slo_class,
       (first_placed_at_ms - submitted_at_ms) / 1000.0 AS wait_s
FROM jobs WHERE admitted_at_ms IS NOT NULL;

CREATE OR REPLACE VIEW wait_by_class AS
WITH w AS (SELECT * FROM job_waits)
SELECT slo_class, count(wait_s) AS placed, count(*) FILTER (WHERE wait_s IS NULL) AS never_placed,
       nearest_rank(list(wait_s) FILTER (WHERE wait_s IS NOT NULL), 0.5) AS wait_s_p50,
       nearest_rank(list(wait_s) FILTER (WHERE wait_s IS NOT NULL), 0.99) AS wait_s_p99
FROM w GROUP BY slo_class;

-- One row per GangEvicted in the log, with the evicted job's tenant and class; a preemption
-- is an eviction whose reason is one of replay/metrics.py's PREEMPTION_REASONS.
CREATE OR REPLACE VIEW evictions AS
SELECT e.seq, e.occurred_at_ms AS at_ms, e.payload ->> 'job_id' AS job_id, j.tenant,
       j.priority_class, e.payload ->> 'reason' AS reason,
       CAST(e.payload ->> 'lost_gpu_ms' AS BIGINT) AS lost_gpu_ms,
       e.payload ->> 'reason' IN ('Priority', 'Reclaim', 'Backfill', 'Defragment', 'Consolidate') AS preemption
FROM events e LEFT JOIN jobs j ON j.job_id = e.payload ->> 'job_id'
WHERE e.type = 'GangEvicted';

-- One row per run that reached its time limit (`TimeLimitReached`): the limit, when the run
-- started, the kill deadline, and how it ended: `timeout` (GangFailed, reason TimeLimit; the
-- message says whether it checkpointed), `completed` (it finished within the grace), or the
-- eviction reason when something else ended it first; NULL while it is still stopping.
CREATE OR REPLACE VIEW timeouts AS
SELECT t.seq, t.occurred_at_ms AS at_ms, t.payload ->> 'job_id' AS job_id, j.tenant,
       j.priority_class, t.payload ->> 'allocation_id' AS allocation_id,
       CAST(t.payload ->> 'time_limit_s' AS BIGINT) AS time_limit_s,
       CAST(t.payload ->> 'started_ms' AS BIGINT) AS started_at_ms,
       CAST(t.payload ->> 'deadline_ms' AS BIGINT) AS deadline_ms,
       f.occurred_at_ms AS ended_at_ms,
       CASE f.type WHEN 'GangFailed' THEN (CASE WHEN f.payload ->> 'reason' = 'TimeLimit'
                                                THEN 'timeout' ELSE 'failed' END)
                   WHEN 'GangCompleted' THEN 'completed'
                   WHEN 'GangEvicted' THEN f.payload ->> 'reason' END AS outcome,
       f.payload ->> 'message' AS message
FROM events t
LEFT JOIN jobs j ON j.job_id = t.payload ->> 'job_id'
LEFT JOIN events f ON f.type IN ('GangFailed', 'GangCompleted', 'GangEvicted')
                  AND f.payload ->> 'allocation_id' = t.payload ->> 'allocation_id'
WHERE t.type = 'TimeLimitReached';

-- One row per dependency of a job (`depends_on` of its accepted submission): what it waits
-- for, the state of the job it names now, and whether it is met, still awaited, or can no
-- longer be met (services/domain/policy/dependencies.py); with the waiting job's state and reason.
CREATE OR REPLACE VIEW dependency_waits AS
WITH deps AS (
    SELECT DISTINCT s.payload -> 'job' ->> 'job_id' AS job_id,
           s.payload -> 'job' ->> 'tenant' AS tenant,
           d.ordinal AS position, d.dep.job AS depends_on, coalesce(d.dep."on", 'succeeded') AS "on"
    FROM events s,
         unnest(from_json(s.payload -> 'job' -> 'depends_on',
                          '[{"job": "VARCHAR", "on": "VARCHAR"}]'))
             WITH ORDINALITY AS d(dep, ordinal)
    WHERE s.type = 'JobSubmitted' AND s.seq NOT IN (SELECT seq FROM refusals)
)
SELECT deps.job_id, j.tenant, deps.position - 1 AS position, deps.depends_on, deps."on",
       o.state AS dependency_state,
       CASE
           WHEN o.state IS NULL THEN 'never'
           WHEN deps."on" = 'finished' THEN
               CASE WHEN o.state IN ('completed', 'failed', 'rejected', 'cancelled', 'timeout')
                    THEN 'met' ELSE 'waiting' END
           WHEN deps."on" = 'started' THEN
               CASE WHEN o.first_placed_at_ms IS NOT NULL THEN 'met'
                    WHEN o.state IN ('completed', 'failed', 'rejected', 'cancelled', 'timeout')
                    THEN 'never' ELSE 'waiting' END
           WHEN deps."on" = 'succeeded' THEN
               CASE WHEN o.state = 'completed' THEN 'met'
                    WHEN o.state IN ('failed', 'rejected', 'cancelled', 'timeout') THEN 'never'
                    ELSE 'waiting' END
           ELSE
               CASE WHEN o.state IN ('failed', 'timeout')
                         OR (o.state = 'cancelled' AND o.first_placed_at_ms IS NOT NULL)
                    THEN 'met'
                    WHEN o.state IN ('completed', 'rejected', 'cancelled') THEN 'never'
                    ELSE 'waiting' END
       END AS status,
       j.state, j.reason, j.message
FROM deps
JOIN jobs j ON j.job_id = deps.job_id AND j.tenant = deps.tenant
LEFT JOIN jobs o ON o.job_id = deps.depends_on AND o.tenant = deps.tenant;

CREATE OR REPLACE VIEW run_metrics AS
WITH alloc AS (
    SELECT sum(a.gpu_milli * (coalesce(a.ended_at_ms, w.end_ms) - a.placed_at_ms)) AS area
    FROM allocations a CROSS JOIN run_window w
), cap AS (
    SELECT sum(capacity_milli * (until_ms - at_ms)) AS area FROM node_capacity
), pre AS (
    SELECT count(*) AS preemptions, coalesce(sum(lost_gpu_ms), 0) / 3600000.0 AS lost_gpu_hours
    FROM evictions WHERE preemption
), j AS (
    SELECT count(*) AS submitted,
           count(*) FILTER (WHERE state = 'completed') AS completed,
           count(*) FILTER (WHERE state = 'failed') AS failed,
           count(*) FILTER (WHERE state = 'rejected') AS rejected,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE state NOT IN ('completed', 'failed', 'rejected', 'cancelled'))
               AS unfinished,
           avg((finished_at_ms - submitted_at_ms) / 1000.0) FILTER (WHERE state = 'completed')
               AS jct_s_mean
    FROM jobs
)
SELECT w.events, w.start_ms / 1000.0 AS start_s, w.end_ms / 1000.0 AS end_s,
       100.0 * alloc.area / nullif(cap.area, 0) AS gpu_allocation_pct,
       pre.preemptions, pre.lost_gpu_hours,
       alloc.area / 1000.0 / 3600000.0 AS gpu_hours,
       j.submitted, j.completed, j.failed, j.rejected, j.cancelled, j.unfinished, j.jct_s_mean
FROM run_window w, alloc, cap, pre, j;


-- Right now, per GPU of a ready node: its latest SM activity sample if one is at most 5 minutes
-- older than "now" (MIG instances averaged, as in `gpu_samples`), and the capacity held on it.
CREATE OR REPLACE VIEW gpu_now AS
WITH latest AS (
    SELECT uuid, arg_max(sm_active, at_ms) AS sm_active
    FROM gpu_samples s CROSS JOIN clock c
    WHERE s.at_ms >= c.now_ms - 300000
    GROUP BY uuid
)
SELECT f.node, f.gpu_index, f.uuid, f.model, f.clique, f.sharing,
       1000 - f.free_milli AS allocated_milli, l.sm_active
FROM gpu_free f LEFT JOIN latest l USING (uuid);

-- Open allocations per GPU with that GPU's current SM activity: the idle-but-allocated gap
-- now is gpu_milli / 1000 x (1 - sm_active) where a recent sample exists (the instant form
-- of `utilisation`'s measured - used).
CREATE OR REPLACE VIEW allocation_now AS
SELECT a.tenant, a.job_id, a.node, a.gpu_index, g.model, a.gpu_milli, g.sm_active,
       CASE WHEN g.sm_active IS NOT NULL
            THEN a.gpu_milli / 1000.0 * (1 - least(1.0, greatest(0.0, g.sm_active))) END
           AS idle_gpus
FROM allocations a JOIN gpu_now g ON g.node = a.node AND g.gpu_index = a.gpu_index
WHERE a.ended_at_ms IS NULL AND a.gpu_index >= 0;

-- Maintenance windows per node with their phase at "now" (the fold's `MaintenanceWindow.phase`
-- over the interval it derived: planned down over [start_ms, until_ms)).
CREATE OR REPLACE VIEW node_maintenance AS
SELECT m.node, m.window_id, m.start_ms, m.end_ms, m.until_ms, m.reason, m.tenant,
       CASE WHEN m.cancelled_at_ms IS NOT NULL AND m.cancelled_at_ms <= c.now_ms THEN 'cancelled'
            WHEN c.now_ms >= m.end_ms THEN 'ended'
            WHEN c.now_ms >= m.start_ms THEN 'active'
            ELSE 'scheduled' END AS phase
FROM maintenance_windows m CROSS JOIN clock c;

-- Each node's state now, since when and why: the fold's (`nodes.node_status`: ready, cordoned,
-- draining, drained, lost), or while a window of it is active (since its start, with its
-- reason and id) `maintenance`, or `reserved` for a window held for a tenant (Slurm's RESV)
-- unless the operator cordoned or drains it. One derivation: `gpuledger nodes`, the
-- dashboard and the exporter read it.
CREATE OR REPLACE VIEW node_status AS
WITH active AS (
    SELECT node, arg_min(window_id, start_ms) AS window_id, min(start_ms) AS start_ms,
           arg_min(reason, start_ms) AS reason, arg_min(tenant, start_ms) AS tenant
    FROM node_maintenance WHERE phase = 'active' GROUP BY node
), w AS (
    SELECT n.*, a.window_id, a.start_ms, a.reason AS window_reason, a.tenant,
           a.node IS NOT NULL AND n.status <> 'lost'
               AND (a.tenant IS NULL OR n.status = 'ready') AS in_window
    FROM nodes n LEFT JOIN active a USING (node)
)
SELECT node,
       CASE WHEN in_window AND tenant IS NULL THEN 'maintenance'
            WHEN in_window THEN 'reserved'
            ELSE status END AS status,
       CASE WHEN in_window THEN start_ms ELSE status_since_ms END AS since_ms,
       CASE WHEN in_window THEN window_reason
            ELSE coalesce(status_reason, lost_message) END AS reason,
       CASE WHEN in_window THEN window_id END AS window_id,
       CASE WHEN in_window THEN tenant END AS tenant
FROM w;
