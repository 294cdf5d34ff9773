-- `gpuledger report` (like Slurm's `sreport cluster utilization` and `user top`): GPU-hours
-- of a window [w_start, w_end) (epoch ms) split into allocated, down, planned down, reserved
-- and idle, and the allocated part per tenant, per user and per GPU model. The table macros
-- take the window; the `report_*` views are the same numbers over the whole log (from its
-- first event to "now"). Capacity counts each node's GPUs (the `gpus` table) from its
-- registration on; a node is down from a `NodeLost` to its next registration or heartbeat.
-- Planned down is the GPU time of maintenance windows (`maintenance_windows`: each window's
-- nodes over the span the fold derived) not allocated or down meanwhile; reserved is the same
-- for windows held for a tenant (`gpuledger node maintenance --tenant`, a reservation's
-- `tenant:`): GPU time held for it that nothing ran on. The scheduler's backfill reservations
-- are recomputed each pass and hold no GPU idle in the log.

-- One row per node event (registration, heartbeat, loss) from the node's first registration,
-- lasting until its next event (or now): whether the node is lost for that time.
CREATE OR REPLACE VIEW node_states AS
WITH ne AS (
    SELECT seq, occurred_at_ms AS at_ms, type,
           CASE WHEN type = 'NodeRegistered' THEN payload -> 'node' ->> 'name'
                ELSE payload ->> 'node' END AS node
    FROM events WHERE type IN ('NodeRegistered', 'NodeLost', 'NodeHeartbeat')
), s AS (
    SELECT *, bool_or(type = 'NodeRegistered') OVER (
                  PARTITION BY node ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
              ) AS registered
    FROM ne
)
SELECT s.node, s.seq, s.at_ms,
       greatest(s.at_ms, coalesce(lead(s.at_ms) OVER (PARTITION BY s.node ORDER BY s.seq),
                                  c.now_ms)) AS until_ms,
       s.type = 'NodeLost' AS lost
FROM s CROSS JOIN clock c WHERE s.registered;

-- GPU-ms of capacity per GPU model in the window: up (node not lost) and down (lost).
CREATE OR REPLACE MACRO capacity_between(w_start, w_end) AS TABLE
WITH g AS (SELECT node, model, count(*) AS gpus FROM gpus GROUP BY node, model),
o AS (
    SELECT g.model, s.lost,
           g.gpus * greatest(0, least(s.until_ms, w_end) - greatest(s.at_ms, w_start)) AS gpu_ms
    FROM node_states s JOIN g USING (node)
)
SELECT model,
       coalesce(sum(gpu_ms) FILTER (WHERE NOT lost), 0) AS up_gpu_ms,
       coalesce(sum(gpu_ms) FILTER (WHERE lost), 0) AS down_gpu_ms
FROM o GROUP BY model;

-- Allocated GPU-ms in the window per allocation interval (member and GPU), with its job's
-- tenant, user and GPU model: the `job_accounting` GPU-hours clipped to the window.
CREATE OR REPLACE MACRO allocated_between(w_start, w_end) AS TABLE
SELECT a.tenant, coalesce(j.user, '-') AS user, a.job_id, a.gpu_model AS model,
       a.gpu_milli / 1000.0 * greatest(
           0, least(coalesce(a.ended_at_ms, c.now_ms), w_end) - greatest(a.placed_at_ms, w_start)
       ) AS gpu_ms
FROM allocations a CROSS JOIN clock c LEFT JOIN jobs j ON j.job_id = a.job_id
WHERE a.gpu_index >= 0;

-- Idle GPU-ms per window's tenant and GPU model in the window: each window's nodes over
-- [start_ms, until_ms) clipped to it and to now (the log's end), less what was allocated or
-- down (lost) there meanwhile (counted as such). `tenant` NULL: a maintenance window, planned
-- down; else the tenant it was held for, reserved.
CREATE OR REPLACE MACRO window_idle_between(w_start, w_end) AS TABLE
WITH g AS (SELECT node, model, count(*) AS gpus FROM gpus GROUP BY node, model),
m AS (
    SELECT window_id, tenant, node, greatest(start_ms, w_start) AS f,
           least(until_ms, w_end, c.now_ms) AS t
    FROM maintenance_windows CROSS JOIN clock c
    WHERE least(until_ms, w_end, c.now_ms) > greatest(start_ms, w_start)
),
span AS (
    SELECT m.window_id, m.tenant, m.node, g.model, m.f, m.t, g.gpus * (m.t - m.f) AS gpu_ms
    FROM m JOIN g USING (node)
),
busy AS (
    SELECT s.window_id, s.node, s.model, sum(a.gpu_milli / 1000.0 * greatest(
               0, least(coalesce(a.ended_at_ms, c.now_ms), s.t) - greatest(a.placed_at_ms, s.f)
           )) AS gpu_ms
    FROM span s CROSS JOIN clock c
    JOIN allocations a ON a.node = s.node AND a.gpu_model = s.model AND a.gpu_index >= 0
    GROUP BY s.window_id, s.node, s.model
),
lost AS (
    SELECT s.window_id, s.node, s.model, sum(g.gpus * greatest(
               0, least(n.until_ms, s.t) - greatest(n.at_ms, s.f)
           )) AS gpu_ms
    FROM span s JOIN node_states n ON n.node = s.node AND n.lost
    JOIN g ON g.node = s.node AND g.model = s.model
    GROUP BY s.window_id, s.node, s.model
)
SELECT s.tenant, s.model,
       sum(greatest(0, s.gpu_ms - coalesce(b.gpu_ms, 0) - coalesce(l.gpu_ms, 0))) AS gpu_ms
FROM span s
LEFT JOIN busy b USING (window_id, node, model)
LEFT JOIN lost l USING (window_id, node, model)
GROUP BY s.tenant, s.model;

-- Planned-down GPU-ms per GPU model in the window: maintenance windows' idle time.
CREATE OR REPLACE MACRO planned_down_between(w_start, w_end) AS TABLE
SELECT model, sum(gpu_ms) AS gpu_ms FROM window_idle_between(w_start, w_end)
WHERE tenant IS NULL GROUP BY model;

-- Reserved GPU-ms per tenant and GPU model in the window: the idle time of windows held for
-- the tenant (sreport's reserved).
CREATE OR REPLACE MACRO reserved_between(w_start, w_end) AS TABLE
SELECT tenant, model, sum(gpu_ms) AS gpu_ms FROM window_idle_between(w_start, w_end)
WHERE tenant IS NOT NULL GROUP BY tenant, model;

-- The window's capacity split (GPU-hours and % of the reported total), sreport's
-- `cluster utilization`: allocated + down + planned down + reserved + idle = reported.
CREATE OR REPLACE MACRO utilisation_between(w_start, w_end) AS TABLE
WITH cap AS (
    SELECT coalesce(sum(up_gpu_ms + down_gpu_ms), 0) AS total,
           coalesce(sum(down_gpu_ms), 0) AS down
    FROM capacity_between(w_start, w_end)
), al AS (
    SELECT coalesce(sum(gpu_ms), 0) AS allocated FROM allocated_between(w_start, w_end)
), pd AS (
    SELECT coalesce(sum(gpu_ms), 0) AS planned_down FROM planned_down_between(w_start, w_end)
), rs AS (
    SELECT coalesce(sum(gpu_ms), 0) AS reserved FROM reserved_between(w_start, w_end)
), p AS (
    SELECT total, allocated, down, planned_down, reserved,
           greatest(0, total - allocated - down - planned_down - reserved) AS idle
    FROM cap, al, pd, rs
)
SELECT w_start AS start_ms, w_end AS end_ms,
       allocated / 3600000.0 AS allocated_gpu_hours,
       idle / 3600000.0 AS idle_gpu_hours,
       down / 3600000.0 AS down_gpu_hours,
       planned_down / 3600000.0 AS planned_down_gpu_hours,
       reserved / 3600000.0 AS reserved_gpu_hours,
       total / 3600000.0 AS reported_gpu_hours,
       100.0 * allocated / nullif(total, 0) AS allocated_pct,
       100.0 * idle / nullif(total, 0) AS idle_pct,
       100.0 * down / nullif(total, 0) AS down_pct,
       100.0 * planned_down / nullif(total, 0) AS planned_down_pct,
       100.0 * reserved / nullif(total, 0) AS reserved_pct
FROM p;

-- Allocated GPU-hours per tenant in the window, most first (sreport `user top` by account),
-- and the GPU-hours its windows held idle for it (reserved; a tenant with only those is
-- listed too).
CREATE OR REPLACE MACRO tenant_usage_between(w_start, w_end) AS TABLE
WITH al AS (
    SELECT tenant, count(DISTINCT job_id) AS jobs, sum(gpu_ms) AS gpu_ms
    FROM allocated_between(w_start, w_end) WHERE gpu_ms > 0 GROUP BY tenant
), rs AS (
    SELECT tenant, sum(gpu_ms) AS gpu_ms FROM reserved_between(w_start, w_end)
    WHERE gpu_ms > 0 GROUP BY tenant
)
SELECT tenant, coalesce(al.jobs, 0) AS jobs, coalesce(al.gpu_ms, 0) / 3600000.0 AS gpu_hours,
       100.0 * coalesce(al.gpu_ms, 0) / nullif((SELECT sum(up_gpu_ms + down_gpu_ms)
                                     FROM capacity_between(w_start, w_end)), 0) AS pct,
       coalesce(rs.gpu_ms, 0) / 3600000.0 AS reserved_gpu_hours
FROM al FULL OUTER JOIN rs USING (tenant)
ORDER BY gpu_hours DESC, reserved_gpu_hours DESC, tenant;

-- Allocated GPU-hours per user (within a tenant) in the window, most first (`user top`).
CREATE OR REPLACE MACRO user_usage_between(w_start, w_end) AS TABLE
SELECT tenant, user, count(DISTINCT job_id) AS jobs, sum(gpu_ms) / 3600000.0 AS gpu_hours,
       100.0 * sum(gpu_ms) / nullif((SELECT sum(up_gpu_ms + down_gpu_ms)
                                     FROM capacity_between(w_start, w_end)), 0) AS pct
FROM allocated_between(w_start, w_end) WHERE gpu_ms > 0
GROUP BY tenant, user ORDER BY gpu_hours DESC, tenant, user;

-- Per GPU model in the window: capacity, allocated, down, planned down, reserved and idle
-- GPU-hours.
CREATE OR REPLACE MACRO model_usage_between(w_start, w_end) AS TABLE
WITH al AS (
    SELECT model, sum(gpu_ms) AS gpu_ms FROM allocated_between(w_start, w_end) GROUP BY model
), rs AS (
    SELECT model, sum(gpu_ms) AS gpu_ms FROM reserved_between(w_start, w_end) GROUP BY model
)
SELECT c.model,
       coalesce(al.gpu_ms, 0) / 3600000.0 AS allocated_gpu_hours,
       greatest(0, c.up_gpu_ms - coalesce(al.gpu_ms, 0) - coalesce(pd.gpu_ms, 0)
                - coalesce(rs.gpu_ms, 0)) / 3600000.0 AS idle_gpu_hours,
       c.down_gpu_ms / 3600000.0 AS down_gpu_hours,
       (c.up_gpu_ms + c.down_gpu_ms) / 3600000.0 AS reported_gpu_hours,
       100.0 * coalesce(al.gpu_ms, 0) / nullif(c.up_gpu_ms + c.down_gpu_ms, 0) AS allocated_pct,
       coalesce(pd.gpu_ms, 0) / 3600000.0 AS planned_down_gpu_hours,
       coalesce(rs.gpu_ms, 0) / 3600000.0 AS reserved_gpu_hours
FROM capacity_between(w_start, w_end) c LEFT JOIN al USING (model)
LEFT JOIN planned_down_between(w_start, w_end) pd USING (model) LEFT JOIN rs USING (model)
ORDER BY c.model;

-- The same over the whole log: its first event to now.
CREATE OR REPLACE VIEW report_utilisation AS
SELECT * FROM utilisation_between((SELECT start_ms FROM run_window), (SELECT now_ms FROM clock));
CREATE OR REPLACE VIEW report_tenants AS
SELECT * FROM tenant_usage_between((SELECT start_ms FROM run_window), (SELECT now_ms FROM clock));
CREATE OR REPLACE VIEW report_users AS
SELECT * FROM user_usage_between((SELECT start_ms FROM run_window), (SELECT now_ms FROM clock));
CREATE OR REPLACE VIEW report_models AS
SELECT * FROM model_usage_between((SELECT start_ms FROM run_window), (SELECT now_ms FROM clock));

COMMENT ON VIEW node_states IS 'Each node''s state over time from its first registration: one interval per node event, lost or not (`gpuledger report`''s down time).';
COMMENT ON COLUMN node_states.seq IS 'Stream sequence of the node event.';
COMMENT ON COLUMN node_states.at_ms IS 'From, epoch ms.';
COMMENT ON COLUMN node_states.until_ms IS 'Until (the node''s next event, else now), epoch ms.';
COMMENT ON COLUMN node_states.lost IS 'The node is lost (NodeLost) for the interval: its GPUs count as down.';

COMMENT ON VIEW report_utilisation IS 'sreport cluster utilization over the whole log (first event to now; `utilisation_between(start_ms, end_ms)` for a window): allocated + idle + down + planned down + reserved = reported GPU-hours.';
COMMENT ON COLUMN report_utilisation.start_ms IS 'Window start, epoch ms.';
COMMENT ON COLUMN report_utilisation.end_ms IS 'Window end, epoch ms.';
COMMENT ON COLUMN report_utilisation.allocated_gpu_hours IS 'GPU-hours held by allocations in the window (job_accounting.gpu_hours clipped to it).';
COMMENT ON COLUMN report_utilisation.idle_gpu_hours IS 'GPU-hours of up nodes nobody held.';
COMMENT ON COLUMN report_utilisation.down_gpu_hours IS 'GPU-hours of nodes while lost (NodeLost until re-registration or heartbeat).';
COMMENT ON COLUMN report_utilisation.planned_down_gpu_hours IS 'GPU-hours of maintenance windows (maintenance_windows: their nodes from start to until) not allocated or down meanwhile.';
COMMENT ON COLUMN report_utilisation.reserved_gpu_hours IS 'GPU-hours of windows held for a tenant (maintenance_windows with a tenant) that nothing ran on (backfill reservations hold nothing idle in the log).';
COMMENT ON COLUMN report_utilisation.reported_gpu_hours IS 'GPU-hours of every registered GPU in the window (the sum of the five parts).';
COMMENT ON COLUMN report_utilisation.allocated_pct IS 'allocated / reported, %.';
COMMENT ON COLUMN report_utilisation.idle_pct IS 'idle / reported, %.';
COMMENT ON COLUMN report_utilisation.down_pct IS 'down / reported, %.';
COMMENT ON COLUMN report_utilisation.planned_down_pct IS 'planned down / reported, %.';
COMMENT ON COLUMN report_utilisation.reserved_pct IS 'reserved / reported, %.';

COMMENT ON VIEW report_tenants IS 'Allocated (and reserved) GPU-hours per tenant over the whole log, most first (`tenant_usage_between(start_ms, end_ms)` for a window).';
COMMENT ON COLUMN report_tenants.jobs IS 'Jobs (replicas and array tasks each count) that held GPUs in the window.';
COMMENT ON COLUMN report_tenants.gpu_hours IS 'Allocated GPU-hours in the window.';
COMMENT ON COLUMN report_tenants.pct IS 'Of the reported GPU-hours, %.';
COMMENT ON COLUMN report_tenants.reserved_gpu_hours IS 'GPU-hours of windows held for the tenant that nothing ran on (reserved).';

COMMENT ON VIEW report_users IS 'Allocated GPU-hours per user of each tenant over the whole log, most first (`user_usage_between(start_ms, end_ms)` for a window).';
COMMENT ON COLUMN report_users.user IS 'Who submitted the jobs (''-'': none named).';
COMMENT ON COLUMN report_users.jobs IS 'Jobs (replicas and array tasks each count) that held GPUs in the window.';
COMMENT ON COLUMN report_users.gpu_hours IS 'Allocated GPU-hours in the window.';
COMMENT ON COLUMN report_users.pct IS 'Of the reported GPU-hours, %.';

COMMENT ON VIEW report_models IS 'Per GPU model over the whole log: allocated, idle, down, planned down and reported GPU-hours (`model_usage_between(start_ms, end_ms)` for a window).';
COMMENT ON COLUMN report_models.allocated_gpu_hours IS 'GPU-hours held by allocations on GPUs of the model.';
COMMENT ON COLUMN report_models.idle_gpu_hours IS 'GPU-hours of the model''s GPUs on up nodes nobody held, outside maintenance windows and windows held for a tenant.';
COMMENT ON COLUMN report_models.reserved_gpu_hours IS 'GPU-hours of the model''s GPUs in windows held for a tenant, not allocated or down meanwhile.';
COMMENT ON COLUMN report_models.down_gpu_hours IS 'GPU-hours of the model''s GPUs while their node was lost.';
COMMENT ON COLUMN report_models.reported_gpu_hours IS 'GPU-hours of every registered GPU of the model.';
COMMENT ON COLUMN report_models.allocated_pct IS 'allocated / reported, %.';
COMMENT ON COLUMN report_models.planned_down_gpu_hours IS 'GPU-hours of the model''s GPUs in maintenance windows, not allocated or down meanwhile.';
