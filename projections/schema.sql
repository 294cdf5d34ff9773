-- gpuledger projection schema (DuckDB). Every table is a fold of the event log; the log is
-- the source of truth. Times are `_ms` (epoch ms live, virtual ms in simulations); GPU
-- quantities are milli-GPUs (1000 = one whole GPU).

CREATE TABLE IF NOT EXISTS projector_meta (
    id            INTEGER NOT NULL,     -- always 1
    last_seq      BIGINT  NOT NULL,     -- last stream sequence applied (same transaction as rows)
    schema_version INTEGER NOT NULL,
    updated_at_ms BIGINT                -- occurred_at_ms of the last applied event
);

-- Every stream message, as the log says it (payload = canonical current-version JSON).
CREATE TABLE IF NOT EXISTS events (
    seq            BIGINT NOT NULL,
    subject        VARCHAR NOT NULL,
    type           VARCHAR NOT NULL,    -- type name without version; `Undecodable` if not an event
    event_id       VARCHAR,
    occurred_at_ms BIGINT,
    causation_id   VARCHAR,
    correlation_id VARCHAR,
    producer       VARCHAR,
    input_seq      BIGINT,              -- decisions only
    config_digest  VARCHAR,             -- decisions only
    leader_epoch   BIGINT,              -- decisions only
    payload        JSON USING COMPRESSION zstd
);

-- Current state of every job (one row per job).
CREATE TABLE IF NOT EXISTS jobs (
    job_id             VARCHAR NOT NULL,
    tenant             VARCHAR,
    "user"             VARCHAR,          -- who submitted it inside the tenant ('-': none named)
    priority_class     VARCHAR,
    priority           BIGINT,
    preemptible        BOOLEAN,
    slo_class          VARCHAR,
    state              VARCHAR NOT NULL, -- submitted pending running preempting completed failed rejected cancelled
    replicas           BIGINT,
    min_members        BIGINT,
    member_gpus        BIGINT,           -- whole GPUs per member
    member_gpu_milli   BIGINT,           -- share of one GPU per member (0 = not sharing)
    member_mig_profile VARCHAR,
    gpu_models         VARCHAR[],        -- allowed models ([] = any)
    min_gpu_memory_mib BIGINT,
    gpu_milli          BIGINT,           -- the whole gang's GPU request
    duration_s         BIGINT,
    submitted_at_ms    BIGINT,
    admitted_at_ms     BIGINT,
    first_placed_at_ms BIGINT,
    placed_at_ms       BIGINT,           -- last placement
    finished_at_ms     BIGINT,
    pending_since_ms   BIGINT,
    allocation_id      VARCHAR,          -- current allocation (NULL when not placed)
    attempts           BIGINT,
    preemptions        BIGINT,
    progress_ms        BIGINT,           -- checkpointed work
    cancel_requested   BOOLEAN,
    reason             VARCHAR,          -- current CamelCase reason (pending / rejected / failed / evicted)
    message            VARCHAR,
    details            JSON,
    updated_at_ms      BIGINT,
    updated_seq        BIGINT
);

CREATE TABLE IF NOT EXISTS job_transitions (
    seq        BIGINT NOT NULL,
    at_ms      BIGINT,
    job_id     VARCHAR NOT NULL,
    tenant     VARCHAR,
    from_state VARCHAR,                 -- NULL for the submission
    to_state   VARCHAR NOT NULL,
    event_type VARCHAR NOT NULL,
    reason     VARCHAR
);

-- One interval per member and GPU (or MIG slice, or milli share) of every placement.
CREATE TABLE IF NOT EXISTS allocations (
    allocation_id VARCHAR NOT NULL,     -- <job>#<attempt>
    job_id        VARCHAR NOT NULL,
    tenant        VARCHAR,
    attempt       BIGINT,
    rank          BIGINT NOT NULL,
    node          VARCHAR NOT NULL,
    gpu_index     BIGINT NOT NULL,      -- -1 for a CPU-only member
    gpu_uuid      VARCHAR,
    gpu_model     VARCHAR,
    clique        VARCHAR,
    sharing       VARCHAR,              -- exclusive | milli | mig | none
    gpu_milli     BIGINT,               -- capacity of this GPU held (1000 whole, share, MIG slices/7)
    mig_profile   VARCHAR,
    mig_start     BIGINT,
    borrowing     BOOLEAN,              -- placement took the tenant above its guarantee
    placed_seq    BIGINT,
    placed_at_ms  BIGINT,
    started_at_ms BIGINT,
    ended_at_ms   BIGINT,               -- NULL while held
    end_reason    VARCHAR               -- member outcome or evicted:<reason> / completed / failed
);

-- Decision events (envelope + reason/message/details where the decision has them).
CREATE TABLE IF NOT EXISTS decisions (
    seq           BIGINT NOT NULL,
    at_ms         BIGINT,
    type          VARCHAR NOT NULL,
    job_id        VARCHAR,              -- the job (or the correlation id: node, config)
    event_id      VARCHAR,
    producer      VARCHAR,
    input_seq     BIGINT,
    config_digest VARCHAR,
    leader_epoch  BIGINT,
    reason        VARCHAR,
    message       VARCHAR,
    details       JSON
);

-- One row per PreemptionRequested, completed by checkpoint and eviction.
CREATE TABLE IF NOT EXISTS preemptions (
    request_seq          BIGINT NOT NULL,
    requested_at_ms      BIGINT,
    victim_job_id        VARCHAR NOT NULL,
    victim_tenant        VARCHAR,
    victim_priority      BIGINT,
    allocation_id        VARCHAR NOT NULL,
    beneficiary          VARCHAR,
    beneficiary_tenant   VARCHAR,
    beneficiary_priority BIGINT,
    reason               VARCHAR,       -- Priority | Reclaim
    message              VARCHAR,
    deadline_ms          BIGINT,
    details              JSON,          -- victims chosen, alternatives considered and rejected
    checkpointed_at_ms   BIGINT,        -- first member checkpoint after the request
    checkpointed         BOOLEAN,       -- every member checkpointed before exit
    evicted_at_ms        BIGINT,
    eviction_reason      VARCHAR,
    lost_gpu_ms          BIGINT,
    progress_ms          BIGINT,
    outcome              VARCHAR,       -- requested | evicted | completed | failed
    ended_at_ms          BIGINT
);

CREATE TABLE IF NOT EXISTS pending_reasons (
    seq                   BIGINT NOT NULL,
    at_ms                 BIGINT,
    job_id                VARCHAR NOT NULL,
    tenant                VARCHAR,
    reason                VARCHAR,
    message               VARCHAR,
    details               JSON,
    queue_position        BIGINT,
    preemption_would_help BOOLEAN
);

-- Every FairShareUpdated, one row per tenant.
CREATE TABLE IF NOT EXISTS quota_usage (
    seq                  BIGINT NOT NULL,
    at_ms                BIGINT,
    tenant               VARCHAR NOT NULL,
    guaranteed_gpu_milli BIGINT,
    fair_share_gpu_milli BIGINT,
    allocated_gpu_milli  BIGINT,
    demand_gpu_milli     BIGINT,
    borrowed_gpu_milli   BIGINT         -- max(0, allocated - guaranteed)
);

CREATE TABLE IF NOT EXISTS tenants (
    tenant               VARCHAR NOT NULL,
    parent               VARCHAR,
    guaranteed_gpu_milli BIGINT,
    limit_gpu_milli      BIGINT,
    over_quota_weight    BIGINT,
    fair_share_gpu_milli BIGINT,
    allocated_gpu_milli  BIGINT,
    demand_gpu_milli     BIGINT,
    configured_at_ms     BIGINT,
    updated_at_ms        BIGINT,
    borrowing_limit_gpu_milli BIGINT,
    lending_limit_gpu_milli   BIGINT,
    borrowing_limit_by_model  JSON,
    lending_limit_by_model    JSON,
    submit_limits             JSON,
    user_limits               JSON
);

CREATE TABLE IF NOT EXISTS priority_classes (
    name             VARCHAR NOT NULL,
    value            BIGINT,
    preemptible      BOOLEAN,
    slo_class        VARCHAR,
    description      VARCHAR,
    grace_s          BIGINT,
    allow_timeslice  BOOLEAN,
    configured_at_ms BIGINT
);

CREATE TABLE IF NOT EXISTS nodes (
    node              VARCHAR NOT NULL,
    pool              VARCHAR,
    leaf_switch       VARCHAR,
    cpu_milli         BIGINT,
    memory_mib        BIGINT,
    gpu_count         BIGINT,
    simulated         BOOLEAN,
    status            VARCHAR,          -- nodes.node_status: ready | cordoned | draining | drained | lost
    labels            JSON,
    registered_at_ms  BIGINT,
    last_heartbeat_ms BIGINT,
    lost_at_ms        BIGINT,
    lost_message      VARCHAR,
    running_members   BIGINT,
    status_since_ms   BIGINT,           -- nodes.node_status: since when (NULL while ready)
    status_reason     VARCHAR           -- the operator's words for a cordon or drain
);

CREATE TABLE IF NOT EXISTS maintenance_windows (
    window_id       VARCHAR NOT NULL,
    node            VARCHAR NOT NULL,
    start_ms        BIGINT,
    end_ms          BIGINT,
    until_ms        BIGINT,
    reason          VARCHAR,
    scheduled_at_ms BIGINT,
    cancelled_at_ms BIGINT,
    tenant          VARCHAR             -- held for this tenant (reserved, not planned down)
);

CREATE TABLE IF NOT EXISTS gpus (
    node             VARCHAR NOT NULL,
    gpu_index        BIGINT NOT NULL,
    uuid             VARCHAR,
    model            VARCHAR,
    memory_mib       BIGINT,
    clique           VARCHAR,           -- NVLink clique (members' GPUs stay inside one)
    sharing          VARCHAR,           -- exclusive | mig | mps | timeslice
    healthy          BOOLEAN,
    registered_at_ms BIGINT
);

CREATE TABLE IF NOT EXISTS gpu_metrics (
    seq             BIGINT NOT NULL,
    at_ms           BIGINT,
    node            VARCHAR,
    uuid            VARCHAR,
    mig_uuid        VARCHAR,
    sm_active       DOUBLE,             -- 0..1
    util_source     VARCHAR,            -- gpm | nvml_utilization
    memory_used_mib BIGINT
);

-- Events the acceptance rules refused (services/domain/fold/acceptance.py, the same fold every
-- service runs): a decision of a deposed leader, a placement over GPUs already held, an
-- admission of an unknown job... Nothing else in the projection comes from them; the
-- services fold nothing from them either (and dead-letter the ones that contradict state).
CREATE TABLE IF NOT EXISTS refusals (
    seq            BIGINT NOT NULL,
    at_ms          BIGINT,
    type           VARCHAR NOT NULL,
    job_id         VARCHAR,             -- the job (or entity) the event is about
    subject        VARCHAR,
    producer       VARCHAR,
    code           VARCHAR NOT NULL,    -- StaleLeaderEpoch, PlacementConflict, UnknownJob, ...
    message        VARCHAR
);
