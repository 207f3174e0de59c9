-- Core schema: the job state enum, canonical job storage, control tables and the DLQ.
-- Forward-only: never edit this file once released; add a new migration instead.

CREATE SCHEMA IF NOT EXISTS awa;

CREATE TABLE awa.schema_version (
    version     int PRIMARY KEY,
    description text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TYPE awa.job_state AS ENUM (
    'scheduled',
    'available',
    'running',
    'completed',
    'retryable',
    'failed',
    'cancelled',
    'waiting_external'
);

-- Job ids are shared by every engine so a job keeps its id across a storage transition.
CREATE SEQUENCE awa.jobs_id_seq AS bigint;

-- Bit i of a unique-state mask (reading the bit string left to right) is job_state i.
CREATE FUNCTION awa.job_state_index(p_state awa.job_state) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_state
        WHEN 'scheduled' THEN 0
        WHEN 'available' THEN 1
        WHEN 'running' THEN 2
        WHEN 'completed' THEN 3
        WHEN 'retryable' THEN 4
        WHEN 'failed' THEN 5
        WHEN 'cancelled' THEN 6
        WHEN 'waiting_external' THEN 7
    END
$$;

-- Callback ids are opaque text to the engines; the public view shows them as uuid (ids the
-- runtime issues are uuids; any other text maps to a stable md5-derived uuid).
CREATE FUNCTION awa.callback_id_as_uuid(p_callback_id text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_callback_id IS NULL THEN NULL
        WHEN p_callback_id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            THEN p_callback_id::uuid
        ELSE md5(p_callback_id)::uuid
    END
$$;

CREATE FUNCTION awa.job_state_in_bitmask(p_mask bit(8), p_state awa.job_state) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_mask IS NOT NULL AND get_bit(p_mask, awa.job_state_index(p_state)) = 1
$$;

-- The canonical engine keeps one mutable row per job, in every state. Partial indexes give
-- the ready path, the deferred backlog and the rescue sweeps their own small access paths.
CREATE TABLE awa.canonical_jobs (
    id                   bigint PRIMARY KEY DEFAULT nextval('awa.jobs_id_seq'),
    kind                 text NOT NULL,
    queue                text NOT NULL DEFAULT 'default',
    args                 jsonb NOT NULL DEFAULT '{}'::jsonb,
    state                awa.job_state NOT NULL DEFAULT 'available',
    priority             smallint NOT NULL DEFAULT 2,
    attempt              smallint NOT NULL DEFAULT 0,
    max_attempts         smallint NOT NULL DEFAULT 25,
    run_at               timestamptz NOT NULL DEFAULT now(),
    heartbeat_at         timestamptz,
    deadline_at          timestamptz,
    attempted_at         timestamptz,
    finalized_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    errors               jsonb[] NOT NULL DEFAULT '{}'::jsonb[],
    metadata             jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags                 text[] NOT NULL DEFAULT '{}'::text[],
    unique_key           bytea,
    unique_states        bit(8) DEFAULT B'11111000',
    callback_id          text,
    callback_timeout_at  timestamptz,
    callback_filter      text,
    callback_on_complete text,
    callback_on_fail     text,
    callback_transform   text,
    run_lease            bigint NOT NULL DEFAULT 0,
    progress             jsonb,
    ordering_key         bytea,
    CONSTRAINT canonical_jobs_kind_check
        CHECK (char_length(kind) BETWEEN 1 AND 200),
    CONSTRAINT canonical_jobs_queue_check
        CHECK (char_length(queue) BETWEEN 1 AND 200),
    CONSTRAINT canonical_jobs_priority_check
        CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT canonical_jobs_max_attempts_check
        CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT canonical_jobs_attempt_check
        CHECK (attempt >= 0),
    CONSTRAINT canonical_jobs_tags_check
        CHECK (cardinality(tags) <= 20),
    CONSTRAINT canonical_jobs_metadata_check
        CHECK (jsonb_typeof(metadata) = 'object'),
    CONSTRAINT canonical_jobs_run_lease_check
        CHECK (run_lease >= 0)
);

CREATE INDEX canonical_jobs_ready_idx
    ON awa.canonical_jobs (queue, priority, run_at, id)
    WHERE state = 'available';
CREATE INDEX canonical_jobs_deferred_idx
    ON awa.canonical_jobs (run_at, id)
    WHERE state IN ('scheduled', 'retryable');
CREATE INDEX canonical_jobs_heartbeat_idx
    ON awa.canonical_jobs (heartbeat_at)
    WHERE state = 'running';
CREATE INDEX canonical_jobs_deadline_idx
    ON awa.canonical_jobs (deadline_at)
    WHERE state = 'running' AND deadline_at IS NOT NULL;
CREATE INDEX canonical_jobs_callback_timeout_idx
    ON awa.canonical_jobs (callback_timeout_at)
    WHERE state = 'waiting_external';
CREATE INDEX canonical_jobs_callback_id_idx
    ON awa.canonical_jobs (callback_id)
    WHERE callback_id IS NOT NULL;
CREATE INDEX canonical_jobs_terminal_idx
    ON awa.canonical_jobs (finalized_at, id)
    WHERE state IN ('completed', 'failed', 'cancelled');
CREATE INDEX canonical_jobs_queue_state_idx
    ON awa.canonical_jobs (queue, state);
CREATE INDEX canonical_jobs_kind_idx
    ON awa.canonical_jobs (kind);

-- One row per live unique key; the primary key is what makes a duplicate insert fail.
CREATE TABLE awa.job_unique_claims (
    unique_key bytea PRIMARY KEY,
    job_id     bigint NOT NULL
);
CREATE INDEX job_unique_claims_job_id_idx ON awa.job_unique_claims (job_id);

CREATE TABLE awa.queue_meta (
    queue                           text PRIMARY KEY,
    paused                          boolean NOT NULL DEFAULT false,
    paused_at                       timestamptz,
    paused_by                       text,
    enqueue_shards                  int NOT NULL DEFAULT 1,
    dlq_enabled                     boolean NOT NULL DEFAULT false,
    override_poll_interval_ms       bigint,
    override_claim_batch_size       int,
    override_rate_limit_per_second  double precision,
    override_rate_limit_burst       int,
    override_deadline_ms            bigint,
    updated_at                      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_meta_enqueue_shards_check CHECK (enqueue_shards BETWEEN 1 AND 64),
    CONSTRAINT queue_meta_queue_check CHECK (char_length(queue) BETWEEN 1 AND 200),
    CONSTRAINT queue_meta_override_poll_interval_ms_check
        CHECK (override_poll_interval_ms IS NULL OR override_poll_interval_ms > 0),
    CONSTRAINT queue_meta_override_claim_batch_size_check
        CHECK (override_claim_batch_size IS NULL OR override_claim_batch_size > 0),
    CONSTRAINT queue_meta_override_rate_limit_per_second_check
        CHECK (override_rate_limit_per_second IS NULL OR override_rate_limit_per_second > 0),
    CONSTRAINT queue_meta_override_rate_limit_burst_check
        CHECK (override_rate_limit_burst IS NULL OR override_rate_limit_burst > 0)
);

-- The dead-letter hold: the job body as it was when it left, plus why and when.
CREATE TABLE awa.dlq_entries (
    job_id               bigint PRIMARY KEY,
    kind                 text NOT NULL,
    queue                text NOT NULL,
    args                 jsonb NOT NULL,
    state                awa.job_state NOT NULL,
    priority             smallint NOT NULL,
    attempt              smallint NOT NULL,
    max_attempts         smallint NOT NULL,
    run_at               timestamptz NOT NULL,
    heartbeat_at         timestamptz,
    deadline_at          timestamptz,
    attempted_at         timestamptz,
    finalized_at         timestamptz,
    created_at           timestamptz NOT NULL,
    errors               jsonb[] NOT NULL,
    metadata             jsonb NOT NULL,
    tags                 text[] NOT NULL,
    unique_key           bytea,
    unique_states        bit(8),
    callback_id          text,
    callback_timeout_at  timestamptz,
    run_lease            bigint NOT NULL,
    progress             jsonb,
    ordering_key         bytea,
    dlq_reason           text NOT NULL,
    dlq_at               timestamptz NOT NULL,
    original_run_lease   bigint NOT NULL
);
CREATE INDEX dlq_entries_dlq_at_idx ON awa.dlq_entries (dlq_at, job_id);
CREATE INDEX dlq_entries_queue_idx ON awa.dlq_entries (queue, dlq_at, job_id);

CREATE TABLE awa.runtime_instances (
    id                          uuid PRIMARY KEY,
    hostname                    text,
    pid                         int,
    version                     text NOT NULL,
    queues                      jsonb NOT NULL DEFAULT '[]'::jsonb,
    storage_capability          text NOT NULL DEFAULT 'canonical',
    transition_role             text NOT NULL DEFAULT 'auto',
    leader                      boolean NOT NULL DEFAULT false,
    healthy                     boolean NOT NULL DEFAULT true,
    postgres_connected          boolean NOT NULL DEFAULT true,
    poll_loop_alive             boolean NOT NULL DEFAULT true,
    heartbeat_alive             boolean NOT NULL DEFAULT true,
    maintenance_alive           boolean NOT NULL DEFAULT true,
    shutting_down               boolean NOT NULL DEFAULT false,
    snapshot_interval_ms        bigint NOT NULL DEFAULT 10000,
    queue_descriptor_hashes     jsonb NOT NULL DEFAULT '{}'::jsonb,
    job_kind_descriptor_hashes  jsonb NOT NULL DEFAULT '{}'::jsonb,
    started_at                  timestamptz NOT NULL DEFAULT now(),
    last_seen_at                timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT runtime_instances_storage_capability_check
        CHECK (storage_capability IN ('canonical', 'canonical_drain_only', 'queue_storage')),
    CONSTRAINT runtime_instances_transition_role_check
        CHECK (transition_role IN ('auto', 'canonical_drain', 'queue_storage_target'))
);
CREATE INDEX runtime_instances_last_seen_at_idx ON awa.runtime_instances (last_seen_at);

CREATE TABLE awa.cron_jobs (
    name               text PRIMARY KEY,
    cron_expr          text NOT NULL,
    timezone           text NOT NULL DEFAULT 'UTC',
    kind               text NOT NULL,
    queue              text NOT NULL DEFAULT 'default',
    args               jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority           smallint NOT NULL DEFAULT 2,
    max_attempts       smallint NOT NULL DEFAULT 25,
    tags               text[] NOT NULL DEFAULT '{}'::text[],
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    last_enqueued_at   timestamptz,
    paused             boolean NOT NULL DEFAULT false,
    missed_fire_policy text NOT NULL DEFAULT 'coalesce',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cron_jobs_priority_check CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT cron_jobs_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT cron_jobs_missed_fire_policy_check
        CHECK (missed_fire_policy IN ('coalesce', 'catch_up', 'skip'))
);

CREATE TABLE awa.queue_descriptors (
    queue            text PRIMARY KEY,
    display_name     text,
    description      text,
    owner            text,
    docs_url         text,
    tags             text[] NOT NULL DEFAULT '{}'::text[],
    extra            jsonb NOT NULL DEFAULT '{}'::jsonb,
    descriptor_hash  text,
    sync_interval_ms bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE awa.job_kind_descriptors (
    kind             text PRIMARY KEY,
    display_name     text,
    description      text,
    owner            text,
    docs_url         text,
    tags             text[] NOT NULL DEFAULT '{}'::text[],
    extra            jsonb NOT NULL DEFAULT '{}'::jsonb,
    descriptor_hash  text,
    sync_interval_ms bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now()
);

-- Singleton describing which engine producers and workers use; later migrations add the
-- transition functions.
CREATE TABLE awa.storage_transition_state (
    singleton        boolean PRIMARY KEY DEFAULT true,
    current_engine   text NOT NULL DEFAULT 'canonical',
    active_engine    text NOT NULL DEFAULT 'canonical',
    prepared_engine  text,
    state            text NOT NULL DEFAULT 'canonical',
    transition_epoch bigint NOT NULL DEFAULT 0,
    details          jsonb NOT NULL DEFAULT '{}'::jsonb,
    entered_at       timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finalized_at     timestamptz,
    CONSTRAINT storage_transition_state_singleton_check CHECK (singleton),
    CONSTRAINT storage_transition_state_state_check
        CHECK (state IN ('canonical', 'prepared', 'mixed_transition', 'active'))
);
INSERT INTO awa.storage_transition_state (singleton) VALUES (true);
