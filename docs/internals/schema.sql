-- The tables of schema awa as a freshly migrated database has them: generated from the
-- catalog by tests/support/ddl.py, checked by the drift test in
-- tests/integration/test_migrations.py. Do not edit: change the schema with a migration
-- (awa/adapters/_pg/migrations/), then regenerate this file and schema_snapshot.txt with
--
--     AWA_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/integration/test_migrations.py -k drift
--
-- Functions and views are not repeated here: each has one current definition in
-- awa/adapters/_pg/schema/{functions,views}/<name>.sql.


-- The jobs one batch operation matched, each pending, processed, skipped or errored.
CREATE TABLE awa.batch_operation_items (
    operation_id uuid NOT NULL,
    job_id bigint NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    error text,
    processed_at timestamp with time zone,
    CONSTRAINT batch_operation_items_pkey PRIMARY KEY (operation_id, job_id),
    CONSTRAINT batch_operation_items_operation_id_fkey FOREIGN KEY (operation_id) REFERENCES awa.batch_operations(id) ON DELETE CASCADE,
    CONSTRAINT batch_operation_items_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'processed'::text, 'skipped'::text, 'errored'::text])))
);
CREATE INDEX idx_batch_operation_items_pending ON awa.batch_operation_items USING btree (operation_id, job_id) WHERE (state = 'pending'::text);

-- Admin batch operations (set priority, move queue) over a filter, run in chunks by the maintenance leader.
CREATE TABLE awa.batch_operations (
    id uuid NOT NULL,
    op_kind text NOT NULL,
    filter jsonb NOT NULL,
    spec jsonb NOT NULL,
    state text NOT NULL,
    submitted_by text,
    submitted_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finalized_at timestamp with time zone,
    cursor jsonb,
    total_matched bigint,
    processed bigint DEFAULT 0 NOT NULL,
    skipped bigint DEFAULT 0 NOT NULL,
    errored bigint DEFAULT 0 NOT NULL,
    last_error text,
    runner_instance uuid,
    retention_until timestamp with time zone,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT batch_operations_pkey PRIMARY KEY (id),
    CONSTRAINT batch_operations_op_kind_check CHECK ((op_kind = ANY (ARRAY['set_priority'::text, 'move_queue'::text]))),
    CONSTRAINT batch_operations_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'scanning'::text, 'running'::text, 'cancelling'::text, 'completed'::text, 'cancelled'::text, 'failed'::text])))
);
CREATE INDEX idx_batch_operations_retention ON awa.batch_operations USING btree (retention_until) WHERE (retention_until IS NOT NULL);
CREATE INDEX idx_batch_operations_state_submitted ON awa.batch_operations USING btree (state, submitted_at);

-- One row per batch (id: its callback job's): its size, and how its jobs ended once its dependency edges were pruned (counted_at).
CREATE TABLE awa.batches (
    id bigint NOT NULL,
    size integer NOT NULL,
    completed integer,
    failed integer,
    cancelled integer,
    counted_at timestamp with time zone,
    CONSTRAINT batches_pkey PRIMARY KEY (id),
    CONSTRAINT batches_counted_check CHECK ((((counted_at IS NULL) = (completed IS NULL)) AND ((counted_at IS NULL) = (failed IS NULL)) AND ((counted_at IS NULL) = (cancelled IS NULL)))),
    CONSTRAINT batches_size_check CHECK ((size > 0))
);
CREATE INDEX batches_counted_at_idx ON awa.batches USING btree (counted_at) WHERE (counted_at IS NOT NULL);

-- The CEL filter and transform expressions of a job waiting for an external callback, by callback id.
CREATE TABLE awa.callback_expressions (
    callback_id text NOT NULL,
    queue_schema text NOT NULL,
    job_id bigint NOT NULL,
    run_lease bigint NOT NULL,
    filter text,
    on_complete text,
    on_fail text,
    transform text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT callback_expressions_pkey PRIMARY KEY (callback_id)
);
CREATE INDEX idx_callback_expressions_created ON awa.callback_expressions USING btree (created_at);

-- Canonical storage: one mutable row per job, updated in place on every transition.
CREATE TABLE awa.canonical_jobs (
    id bigint DEFAULT nextval('awa.jobs_id_seq'::regclass) NOT NULL,
    kind text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    state awa.job_state DEFAULT 'available'::awa.job_state NOT NULL,
    priority smallint DEFAULT 2 NOT NULL,
    attempt smallint DEFAULT 0 NOT NULL,
    max_attempts smallint DEFAULT 25 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone,
    deadline_at timestamp with time zone,
    attempted_at timestamp with time zone,
    finalized_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    errors jsonb[] DEFAULT '{}'::jsonb[] NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    unique_key bytea,
    unique_states bit(8) DEFAULT '11111000'::"bit",
    callback_id text,
    callback_timeout_at timestamp with time zone,
    callback_filter text,
    callback_on_complete text,
    callback_on_fail text,
    callback_transform text,
    run_lease bigint DEFAULT 0 NOT NULL,
    progress jsonb,
    ordering_key bytea,
    CONSTRAINT canonical_jobs_pkey PRIMARY KEY (id),
    CONSTRAINT canonical_jobs_attempt_check CHECK ((attempt >= 0)),
    CONSTRAINT canonical_jobs_kind_check CHECK (((char_length(kind) >= 1) AND (char_length(kind) <= 200))),
    CONSTRAINT canonical_jobs_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT canonical_jobs_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT canonical_jobs_priority_check CHECK (((priority >= 1) AND (priority <= 4))),
    CONSTRAINT canonical_jobs_queue_check CHECK (((char_length(queue) >= 1) AND (char_length(queue) <= 200))),
    CONSTRAINT canonical_jobs_run_lease_check CHECK ((run_lease >= 0)),
    CONSTRAINT canonical_jobs_tags_check CHECK ((cardinality(tags) <= 20))
);
CREATE INDEX canonical_jobs_callback_id_idx ON awa.canonical_jobs USING btree (callback_id) WHERE (callback_id IS NOT NULL);
CREATE INDEX canonical_jobs_callback_timeout_idx ON awa.canonical_jobs USING btree (callback_timeout_at) WHERE (state = 'waiting_external'::awa.job_state);
CREATE INDEX canonical_jobs_deadline_idx ON awa.canonical_jobs USING btree (deadline_at) WHERE ((state = 'running'::awa.job_state) AND (deadline_at IS NOT NULL));
CREATE INDEX canonical_jobs_deferred_idx ON awa.canonical_jobs USING btree (run_at, id) WHERE (state = ANY (ARRAY['scheduled'::awa.job_state, 'retryable'::awa.job_state]));
CREATE INDEX canonical_jobs_heartbeat_idx ON awa.canonical_jobs USING btree (heartbeat_at) WHERE (state = 'running'::awa.job_state);
CREATE INDEX canonical_jobs_key_live_idx ON awa.canonical_jobs USING btree (queue, ((metadata ->> 'awa:concurrency_key'::text))) WHERE ((state = ANY (ARRAY['running'::awa.job_state, 'waiting_external'::awa.job_state])) AND (metadata ? 'awa:concurrency_key'::text));
CREATE INDEX canonical_jobs_key_ready_idx ON awa.canonical_jobs USING btree (queue, ((metadata ->> 'awa:concurrency_key'::text)), priority, run_at, id) WHERE ((state = 'available'::awa.job_state) AND (metadata ? 'awa:concurrency_key'::text));
CREATE INDEX canonical_jobs_keyless_ready_idx ON awa.canonical_jobs USING btree (queue, priority, run_at, id) WHERE ((state = 'available'::awa.job_state) AND (NOT (metadata ? 'awa:concurrency_key'::text)));
CREATE INDEX canonical_jobs_kind_idx ON awa.canonical_jobs USING btree (kind);
CREATE INDEX canonical_jobs_queue_state_idx ON awa.canonical_jobs USING btree (queue, state);
CREATE INDEX canonical_jobs_ready_idx ON awa.canonical_jobs USING btree (queue, priority, run_at, id) WHERE (state = 'available'::awa.job_state);
CREATE INDEX canonical_jobs_terminal_idx ON awa.canonical_jobs USING btree (finalized_at, id) WHERE (state = ANY (ARRAY['completed'::awa.job_state, 'failed'::awa.job_state, 'cancelled'::awa.job_state]));

-- Queue storage: the claim end of each lane: every row before claim_seq is claimed or tombstoned.
CREATE TABLE awa.claim_heads (
    queue text NOT NULL,
    priority smallint NOT NULL,
    shard integer NOT NULL,
    claim_seq bigint DEFAULT 0 NOT NULL,
    retired_xid xid8,
    CONSTRAINT claim_heads_pkey PRIMARY KEY (queue, priority, shard)
) WITH (fillfactor=10);

-- Queue storage: the receipt a claim writes for one attempt of a ready row. Partitioned by ring slot.
CREATE TABLE awa.claims (
    slot integer NOT NULL,
    claim_id bigint NOT NULL,
    ready_fact bigint NOT NULL,
    job_id bigint NOT NULL,
    run_lease bigint NOT NULL,
    queue text NOT NULL,
    attempted_at timestamp with time zone NOT NULL,
    deadline_at timestamp with time zone,
    CONSTRAINT claims_pkey PRIMARY KEY (slot, claim_id)
) PARTITION BY LIST (slot);
-- Partitions:
--   claims_0 .. claims_15 (16 partitions): claims_0 FOR VALUES IN (0), ..., claims_15 FOR VALUES IN (15)
-- and 16 stand-ins (claims_<slot>_spare) of the same shape, swapped in by prune.
CREATE INDEX claims_ready_probe_idx ON ONLY awa.claims USING btree (slot, ready_fact);

-- Queue storage: closes one claim, completed or moved on to a newer fact. Partitioned by ring slot.
CREATE TABLE awa.closures (
    slot integer NOT NULL,
    claim_id bigint NOT NULL,
    fact_id bigint NOT NULL,
    queue text NOT NULL,
    outcome text NOT NULL,
    finalized_at timestamp with time zone NOT NULL,
    CONSTRAINT closures_pkey PRIMARY KEY (slot, claim_id),
    CONSTRAINT closures_outcome_check CHECK ((outcome = ANY (ARRAY['completed'::text, 'moved'::text])))
) PARTITION BY LIST (slot);
-- Partitions:
--   closures_0 .. closures_15 (16 partitions): closures_0 FOR VALUES IN (0), ..., closures_15 FOR VALUES IN (15)
-- and 16 stand-ins (closures_<slot>_spare) of the same shape, swapped in by prune.
CREATE INDEX closures_finalized_at_idx ON ONLY awa.closures USING btree (finalized_at) WHERE (outcome = 'completed'::text);

-- Queue storage: signed count of completed jobs per queue and UTC minute, for throughput charts.
CREATE TABLE awa.completions (
    queue text NOT NULL,
    minute timestamp with time zone NOT NULL,
    bucket smallint NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT completions_pkey PRIMARY KEY (queue, minute, bucket)
) WITH (fillfactor=10);

-- Periodic schedules: cron expression, time zone, the job to insert, the last fire enqueued, paused or not.
CREATE TABLE awa.cron_jobs (
    name text NOT NULL,
    cron_expr text NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    kind text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority smallint DEFAULT 2 NOT NULL,
    max_attempts smallint DEFAULT 25 NOT NULL,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    last_enqueued_at timestamp with time zone,
    missed_fire_policy text DEFAULT 'coalesce'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_at timestamp with time zone,
    paused_by text,
    paused boolean GENERATED ALWAYS AS ((paused_at IS NOT NULL)) STORED,
    CONSTRAINT cron_jobs_pkey PRIMARY KEY (name),
    CONSTRAINT cron_jobs_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT cron_jobs_missed_fire_policy_check CHECK ((missed_fire_policy = ANY (ARRAY['coalesce'::text, 'catch_up'::text]))),
    CONSTRAINT cron_jobs_priority_check CHECK (((priority >= 1) AND (priority <= 4)))
);

-- Queue storage: scheduled and retryable jobs with their whole body, until promotion appends them to a lane.
CREATE TABLE awa.deferred_jobs (
    fact_id bigint NOT NULL,
    state awa.job_state NOT NULL,
    job_id bigint NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    args jsonb NOT NULL,
    priority smallint NOT NULL,
    attempt smallint NOT NULL,
    max_attempts smallint NOT NULL,
    run_at timestamp with time zone NOT NULL,
    heartbeat_at timestamp with time zone,
    deadline_at timestamp with time zone,
    attempted_at timestamp with time zone,
    finalized_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    errors jsonb[] NOT NULL,
    metadata jsonb NOT NULL,
    tags text[] NOT NULL,
    unique_key bytea,
    unique_states bit(8),
    callback_id text,
    callback_timeout_at timestamp with time zone,
    run_lease bigint NOT NULL,
    progress jsonb,
    ordering_key bytea,
    CONSTRAINT deferred_jobs_pkey PRIMARY KEY (job_id),
    CONSTRAINT deferred_jobs_run_at_check CHECK (awa.run_at_in_range(run_at)) NOT VALID,
    CONSTRAINT deferred_jobs_state_check CHECK ((state = ANY (ARRAY['scheduled'::awa.job_state, 'retryable'::awa.job_state])))
);
CREATE INDEX deferred_jobs_queue_state_idx ON awa.deferred_jobs USING btree (queue, state);
CREATE INDEX deferred_jobs_run_at_job_id_idx ON awa.deferred_jobs USING btree (run_at, job_id);

-- Parents of unresolved dependency edges found gone, before their children are answered as if they were cancelled.
CREATE TABLE awa.dependency_vanished_parents (
    parent_id bigint NOT NULL,
    seen_at timestamp with time zone NOT NULL,
    deleted boolean DEFAULT false NOT NULL,
    CONSTRAINT dependency_vanished_parents_pkey PRIMARY KEY (parent_id)
);

-- The dead-letter queue: failed jobs set aside with their whole body for an operator to retry or purge.
CREATE TABLE awa.dlq_entries (
    job_id bigint NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    args jsonb NOT NULL,
    state awa.job_state NOT NULL,
    priority smallint NOT NULL,
    attempt smallint NOT NULL,
    max_attempts smallint NOT NULL,
    run_at timestamp with time zone NOT NULL,
    heartbeat_at timestamp with time zone,
    deadline_at timestamp with time zone,
    attempted_at timestamp with time zone,
    finalized_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    errors jsonb[] NOT NULL,
    metadata jsonb NOT NULL,
    tags text[] NOT NULL,
    unique_key bytea,
    unique_states bit(8),
    callback_id text,
    callback_timeout_at timestamp with time zone,
    run_lease bigint NOT NULL,
    progress jsonb,
    ordering_key bytea,
    dlq_reason text NOT NULL,
    dlq_at timestamp with time zone NOT NULL,
    original_run_lease bigint NOT NULL,
    CONSTRAINT dlq_entries_pkey PRIMARY KEY (job_id)
);
CREATE INDEX dlq_entries_dlq_at_idx ON awa.dlq_entries USING btree (dlq_at, job_id);
CREATE INDEX dlq_entries_queue_idx ON awa.dlq_entries USING btree (queue, dlq_at, job_id);

-- Queue storage: a terminal job with its whole body (cancelled while deferred, failed and carried forward) or a deletion marker. Partitioned by ring slot.
CREATE TABLE awa.done_entries (
    slot integer NOT NULL,
    fact_id bigint NOT NULL,
    state awa.job_state,
    job_id bigint,
    kind text,
    queue text,
    args jsonb,
    priority smallint,
    attempt smallint,
    max_attempts smallint,
    run_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    deadline_at timestamp with time zone,
    attempted_at timestamp with time zone,
    finalized_at timestamp with time zone,
    created_at timestamp with time zone,
    errors jsonb[],
    metadata jsonb,
    tags text[],
    unique_key bytea,
    unique_states bit(8),
    callback_id text,
    callback_timeout_at timestamp with time zone,
    run_lease bigint,
    progress jsonb,
    ordering_key bytea,
    CONSTRAINT done_entries_pkey PRIMARY KEY (slot, fact_id)
) PARTITION BY LIST (slot);
-- Partitions:
--   done_entries_0 .. done_entries_15 (16 partitions): done_entries_0 FOR VALUES IN (0), ..., done_entries_15 FOR VALUES IN (15)
-- and 16 stand-ins (done_entries_<slot>_spare) of the same shape, swapped in by prune.
CREATE INDEX done_entries_completed_idx ON ONLY awa.done_entries USING btree (finalized_at) WHERE (state = 'completed'::awa.job_state);
CREATE INDEX done_entries_job_id_idx ON ONLY awa.done_entries USING btree (job_id);

-- Job dependency edges: the child runs once every parent completed (satisfied_at set when it did).
CREATE TABLE awa.job_dependencies (
    child_id bigint NOT NULL,
    parent_id bigint NOT NULL,
    satisfied_at timestamp with time zone,
    on_failure text DEFAULT 'cancel'::text NOT NULL,  -- What the parent failing or being cancelled for good does to the child: cancel, run or dlq.
    failed_at timestamp with time zone,  -- When the parent failing or being cancelled doomed the child through this edge; cleared when the parent is retried.
    parent_outcome text,  -- How the parent ended when its failure resolved this run edge: failed or cancelled; null while the parent has not finished, or when it completed (satisfied_at set).
    CONSTRAINT job_dependencies_pkey PRIMARY KEY (child_id, parent_id),
    CONSTRAINT job_dependencies_not_self CHECK ((child_id <> parent_id)),
    CONSTRAINT job_dependencies_on_failure_check CHECK ((on_failure = ANY (ARRAY['cancel'::text, 'run'::text, 'dlq'::text]))),
    CONSTRAINT job_dependencies_parent_outcome_check CHECK ((parent_outcome = ANY (ARRAY['failed'::text, 'cancelled'::text])))
);
CREATE INDEX job_dependencies_failed_idx ON awa.job_dependencies USING btree (child_id) WHERE (failed_at IS NOT NULL);
CREATE INDEX job_dependencies_parent_idx ON awa.job_dependencies USING btree (parent_id);
CREATE INDEX job_dependencies_resolved_idx ON awa.job_dependencies USING btree (COALESCE(satisfied_at, failed_at), child_id) WHERE (COALESCE(satisfied_at, failed_at) IS NOT NULL);

-- Per waiting child, how many of its parents have not completed yet; the row goes when none are left.
CREATE TABLE awa.job_dependency_waits (
    child_id bigint NOT NULL,
    pending integer NOT NULL,
    CONSTRAINT job_dependency_waits_pkey PRIMARY KEY (child_id),
    CONSTRAINT job_dependency_waits_pending_check CHECK ((pending > 0))
);

-- Per job kind: the display name, description, owner and links that workers declare (job_kind_descriptor()).
CREATE TABLE awa.job_kind_descriptors (
    kind text NOT NULL,
    display_name text,
    description text,
    owner text,
    docs_url text,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    extra jsonb DEFAULT '{}'::jsonb NOT NULL,
    descriptor_hash text NOT NULL,
    sync_interval_ms bigint DEFAULT 10000 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_kind_descriptors_pkey PRIMARY KEY (kind),
    CONSTRAINT job_kind_descriptors_description_len CHECK (((description IS NULL) OR (length(description) <= 2000))),
    CONSTRAINT job_kind_descriptors_display_length CHECK (((display_name IS NULL) OR (length(display_name) <= 200))),
    CONSTRAINT job_kind_descriptors_docs_url_length CHECK (((docs_url IS NULL) OR (length(docs_url) <= 2048))),
    CONSTRAINT job_kind_descriptors_hash_length CHECK ((length(descriptor_hash) <= 128)),
    CONSTRAINT job_kind_descriptors_hash_nonempty CHECK ((length(descriptor_hash) > 0)),
    CONSTRAINT job_kind_descriptors_kind_length CHECK ((length(kind) <= 200)),
    CONSTRAINT job_kind_descriptors_kind_nonempty CHECK ((length(kind) > 0)),
    CONSTRAINT job_kind_descriptors_owner_length CHECK (((owner IS NULL) OR (length(owner) <= 200))),
    CONSTRAINT job_kind_descriptors_sync_interval_ms CHECK ((sync_interval_ms > 0)),
    CONSTRAINT job_kind_descriptors_tags_count CHECK ((cardinality(tags) <= 20))
);
CREATE INDEX job_kind_descriptors_last_seen_at_idx ON awa.job_kind_descriptors USING btree (last_seen_at);

-- The handler return values of tasks that store results, by job id, kept until expires_at (default seven days after they were stored) whatever happens to the job row.
CREATE TABLE awa.job_results (
    job_id bigint NOT NULL,
    result jsonb NOT NULL,
    stored_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    kind text,  -- The kind of the job whose handler returned the result (null when not recorded).
    CONSTRAINT job_results_pkey PRIMARY KEY (job_id)
);
CREATE INDEX job_results_expires_at_idx ON awa.job_results USING btree (expires_at);

-- One row per live unique key, shared by both engines; its primary key is what refuses a duplicate insert.
CREATE TABLE awa.job_unique_claims (
    unique_key bytea NOT NULL,
    job_id bigint NOT NULL,
    CONSTRAINT job_unique_claims_pkey PRIMARY KEY (unique_key)
);
CREATE INDEX job_unique_claims_job_id_idx ON awa.job_unique_claims USING btree (job_id);

-- Queue storage: the append end of each lane (queue, priority, shard): next position and the order key of its last row.
CREATE TABLE awa.lanes (
    queue text NOT NULL,
    priority smallint NOT NULL,
    shard integer NOT NULL,
    next_seq bigint NOT NULL,
    tail_run_at timestamp with time zone,
    tail_job_id bigint,
    disorder_seq bigint DEFAULT '-1'::integer NOT NULL,
    CONSTRAINT lanes_pkey PRIMARY KEY (queue, priority, shard)
) WITH (fillfactor=10);

-- The maintenance leader's lease: holder, term and expiry, renewed by its holder (ADR 0014).
CREATE TABLE awa.leader_leases (
    name text NOT NULL,
    holder text NOT NULL,
    term bigint NOT NULL,
    acquired_at timestamp with time zone NOT NULL,
    renewed_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT leader_leases_pkey PRIMARY KEY (name),
    CONSTRAINT leader_leases_holder_length CHECK (((length(holder) >= 1) AND (length(holder) <= 200))),
    CONSTRAINT leader_leases_name_length CHECK (((length(name) >= 1) AND (length(name) <= 64))),
    CONSTRAINT leader_leases_term_positive CHECK ((term > 0))
);

-- Queue storage: the mutable row of an attempt that heartbeats, reports progress or waits for a callback. Partitioned by lease slot.
CREATE TABLE awa.leases (
    lease_slot integer NOT NULL,
    job_id bigint NOT NULL,
    run_lease bigint NOT NULL,
    claim_slot integer NOT NULL,
    claim_id bigint NOT NULL,
    queue text NOT NULL,
    waiting boolean DEFAULT false NOT NULL,
    heartbeat_at timestamp with time zone NOT NULL,
    progress jsonb,
    metadata jsonb NOT NULL,
    callback_id text,
    callback_timeout_at timestamp with time zone,
    deadline_at timestamp with time zone,
    CONSTRAINT leases_pkey PRIMARY KEY (job_id, run_lease, lease_slot)
) PARTITION BY LIST (lease_slot);
-- Partitions:
--   leases_0 .. leases_7 (8 partitions): leases_0 FOR VALUES IN (0), ..., leases_7 FOR VALUES IN (7)
-- and 8 stand-ins (leases_<slot>_spare) of the same shape, swapped in by prune.
CREATE INDEX leases_callback_id_idx ON ONLY awa.leases USING btree (callback_id) WHERE (callback_id IS NOT NULL);

-- Queue storage: signed counters of jobs per queue and state, spread over buckets so writers do not contend.
CREATE TABLE awa.queue_counts (
    queue text NOT NULL,
    state awa.job_state NOT NULL,
    bucket smallint NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT queue_counts_pkey PRIMARY KEY (queue, state, bucket)
) WITH (fillfactor=10);

-- Per queue: the display name, description, owner and links that workers declare (queue_descriptor()).
CREATE TABLE awa.queue_descriptors (
    queue text NOT NULL,
    display_name text,
    description text,
    owner text,
    docs_url text,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    extra jsonb DEFAULT '{}'::jsonb NOT NULL,
    descriptor_hash text NOT NULL,
    sync_interval_ms bigint DEFAULT 10000 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queue_descriptors_pkey PRIMARY KEY (queue),
    CONSTRAINT queue_descriptors_description_len CHECK (((description IS NULL) OR (length(description) <= 2000))),
    CONSTRAINT queue_descriptors_display_length CHECK (((display_name IS NULL) OR (length(display_name) <= 200))),
    CONSTRAINT queue_descriptors_docs_url_length CHECK (((docs_url IS NULL) OR (length(docs_url) <= 2048))),
    CONSTRAINT queue_descriptors_hash_length CHECK ((length(descriptor_hash) <= 128)),
    CONSTRAINT queue_descriptors_hash_nonempty CHECK ((length(descriptor_hash) > 0)),
    CONSTRAINT queue_descriptors_owner_length CHECK (((owner IS NULL) OR (length(owner) <= 200))),
    CONSTRAINT queue_descriptors_queue_length CHECK ((length(queue) <= 200)),
    CONSTRAINT queue_descriptors_queue_nonempty CHECK ((length(queue) > 0)),
    CONSTRAINT queue_descriptors_sync_interval_ms CHECK ((sync_interval_ms > 0)),
    CONSTRAINT queue_descriptors_tags_count CHECK ((cardinality(tags) <= 20))
);
CREATE INDEX queue_descriptors_last_seen_at_idx ON awa.queue_descriptors USING btree (last_seen_at);

-- Per queue: paused, enqueue shards, DLQ on or off, and the live overrides set by operators.
CREATE TABLE awa.queue_meta (
    queue text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    paused_at timestamp with time zone,
    paused_by text,
    enqueue_shards integer DEFAULT 1 NOT NULL,
    dlq_enabled boolean DEFAULT false NOT NULL,
    override_poll_interval_ms bigint,
    override_claim_batch_size integer,
    override_rate_limit_per_second double precision,
    override_rate_limit_burst integer,
    override_deadline_ms bigint,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    overrides_updated_at timestamp with time zone,
    override_max_running_per_key integer,
    override_global_rate_per_second double precision,
    override_global_rate_burst integer,
    override_global_rate_per_key_per_second double precision,
    override_global_rate_per_key_burst integer,
    CONSTRAINT queue_meta_pkey PRIMARY KEY (queue),
    CONSTRAINT queue_meta_enqueue_shards_check CHECK (((enqueue_shards >= 1) AND (enqueue_shards <= 64))),
    CONSTRAINT queue_meta_override_claim_batch_size_check CHECK (((override_claim_batch_size IS NULL) OR (override_claim_batch_size > 0))),
    CONSTRAINT queue_meta_override_deadline_ms_check CHECK (((override_deadline_ms IS NULL) OR (override_deadline_ms >= 0))),
    CONSTRAINT queue_meta_override_global_rate_check CHECK ((((override_global_rate_per_second IS NULL) OR ((override_global_rate_per_second >= ((1.0 / (86400)::numeric))::double precision) AND (override_global_rate_per_second <= (1000000)::double precision))) AND ((override_global_rate_burst IS NULL) OR ((override_global_rate_burst >= 1) AND (override_global_rate_burst <= 1000000))) AND ((override_global_rate_per_key_per_second IS NULL) OR ((override_global_rate_per_key_per_second >= ((1.0 / (86400)::numeric))::double precision) AND (override_global_rate_per_key_per_second <= (1000000)::double precision))) AND ((override_global_rate_per_key_burst IS NULL) OR ((override_global_rate_per_key_burst >= 1) AND (override_global_rate_per_key_burst <= 1000000))))),
    CONSTRAINT queue_meta_override_max_running_per_key_check CHECK (((override_max_running_per_key IS NULL) OR ((override_max_running_per_key >= 1) AND (override_max_running_per_key <= 1000000)))),
    CONSTRAINT queue_meta_override_poll_interval_ms_check CHECK (((override_poll_interval_ms IS NULL) OR (override_poll_interval_ms > 0))),
    CONSTRAINT queue_meta_override_rate_limit_burst_check CHECK (((override_rate_limit_burst IS NULL) OR (override_rate_limit_burst > 0))),
    CONSTRAINT queue_meta_override_rate_limit_per_second_check CHECK (((override_rate_limit_per_second IS NULL) OR (override_rate_limit_per_second > (0)::double precision))),
    CONSTRAINT queue_meta_queue_check CHECK (((char_length(queue) >= 1) AND (char_length(queue) <= 200)))
);

-- Queue storage: per queue, how many completed and failed jobs reclaiming a slot removed.
CREATE TABLE awa.queue_prune_stats (
    queue text NOT NULL,
    pruned_completed bigint DEFAULT 0 NOT NULL,
    pruned_cancelled bigint DEFAULT 0 NOT NULL,
    pruned_failed bigint DEFAULT 0 NOT NULL,
    CONSTRAINT queue_prune_stats_pkey PRIMARY KEY (queue)
) WITH (fillfactor=10);

-- Per queue and minute: jobs available, scheduled, retryable, running and waiting, and the lag, recorded by the maintenance leader for the admin charts; kept a day.
CREATE TABLE awa.queue_samples (
    sampled_at timestamp with time zone NOT NULL,
    queue text NOT NULL,
    available bigint NOT NULL,
    scheduled bigint NOT NULL,
    retryable bigint NOT NULL,
    running bigint NOT NULL,
    waiting_external bigint NOT NULL,
    lag_seconds double precision NOT NULL,
    CONSTRAINT queue_samples_pkey PRIMARY KEY (sampled_at, queue)
);

-- Fleet-wide rate limiters (GCRA): limiter '' is the queue's global_rate_limit, others a concurrency key's global_rate_limit_per_key (by its lane shard).
CREATE TABLE awa.rate_limiters (
    queue text NOT NULL,
    limiter text NOT NULL,
    tat timestamp with time zone NOT NULL,
    rate double precision NOT NULL,
    burst integer NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT rate_limiters_pkey PRIMARY KEY (queue, limiter),
    CONSTRAINT rate_limiters_burst_check CHECK ((burst >= 1)),
    CONSTRAINT rate_limiters_rate_check CHECK ((rate > (0)::double precision))
);

-- Queue storage: the runnable body of a job in a lane, appended at enqueue, promotion or retry; never updated. Partitioned by ring slot.
CREATE TABLE awa.ready_entries (
    slot integer NOT NULL,
    fact_id bigint NOT NULL,
    shard integer NOT NULL,
    lane_seq bigint NOT NULL,
    job_id bigint NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    args jsonb NOT NULL,
    priority smallint NOT NULL,
    attempt smallint NOT NULL,
    max_attempts smallint NOT NULL,
    run_at timestamp with time zone NOT NULL,
    heartbeat_at timestamp with time zone,
    deadline_at timestamp with time zone,
    attempted_at timestamp with time zone,
    finalized_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    errors jsonb[] NOT NULL,
    metadata jsonb NOT NULL,
    tags text[] NOT NULL,
    unique_key bytea,
    unique_states bit(8),
    callback_id text,
    callback_timeout_at timestamp with time zone,
    run_lease bigint NOT NULL,
    progress jsonb,
    ordering_key bytea,
    CONSTRAINT ready_entries_pkey PRIMARY KEY (slot, fact_id),
    CONSTRAINT ready_entries_run_at_check CHECK (awa.run_at_in_range(run_at)) NOT VALID
) PARTITION BY LIST (slot);
-- Partitions:
--   ready_entries_0 .. ready_entries_15 (16 partitions): ready_entries_0 FOR VALUES IN (0), ..., ready_entries_15 FOR VALUES IN (15)
-- and 16 stand-ins (ready_entries_<slot>_spare) of the same shape, swapped in by prune.
CREATE INDEX ready_entries_job_id_idx ON ONLY awa.ready_entries USING btree (job_id);
CREATE INDEX ready_entries_queue_priority_shard_lane_seq_idx ON ONLY awa.ready_entries USING btree (queue, priority, shard, lane_seq);

-- Queue storage: the last outcome of each ring duty (rotate, prune, compaction) and what blocked it, for awa storage status.
CREATE TABLE awa.ring_maintenance (
    schema_name text NOT NULL,
    concern text NOT NULL,
    outcome text NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    blocker_pid integer,
    blocker_xact_start timestamp with time zone,
    detail text,
    CONSTRAINT ring_maintenance_pkey PRIMARY KEY (schema_name, concern)
);

-- Queue storage: the current queue and lease slots, the slot counts and their generations.
CREATE TABLE awa.ring_state (
    singleton boolean DEFAULT true NOT NULL,
    slot_count integer NOT NULL,
    current_slot integer DEFAULT 0 NOT NULL,
    generation bigint DEFAULT 0 NOT NULL,
    lease_slot_count integer NOT NULL,
    rotated_at timestamp with time zone,
    current_lease_slot integer DEFAULT 0 NOT NULL,
    lease_generation bigint DEFAULT 0 NOT NULL,
    lease_rotated_at timestamp with time zone,
    CONSTRAINT ring_state_pkey PRIMARY KEY (singleton),
    CONSTRAINT ring_state_singleton_check CHECK (singleton)
) WITH (fillfactor=10);

-- One row per worker process: its queues, configuration and last heartbeat, for awa health and the admin UI.
CREATE TABLE awa.runtime_instances (
    id uuid NOT NULL,
    hostname text,
    pid integer,
    version text NOT NULL,
    queues jsonb DEFAULT '[]'::jsonb NOT NULL,
    storage_capability text DEFAULT 'canonical'::text NOT NULL,
    transition_role text DEFAULT 'auto'::text NOT NULL,
    leader boolean DEFAULT false NOT NULL,
    healthy boolean DEFAULT true NOT NULL,
    postgres_connected boolean DEFAULT true NOT NULL,
    poll_loop_alive boolean DEFAULT true NOT NULL,
    heartbeat_alive boolean DEFAULT true NOT NULL,
    maintenance_alive boolean DEFAULT true NOT NULL,
    shutting_down boolean DEFAULT false NOT NULL,
    snapshot_interval_ms bigint DEFAULT 10000 NOT NULL,
    queue_descriptor_hashes jsonb DEFAULT '{}'::jsonb NOT NULL,
    job_kind_descriptor_hashes jsonb DEFAULT '{}'::jsonb NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT runtime_instances_pkey PRIMARY KEY (id),
    CONSTRAINT runtime_instances_storage_capability_check CHECK ((storage_capability = ANY (ARRAY['canonical'::text, 'canonical_drain_only'::text, 'queue_storage'::text]))),
    CONSTRAINT runtime_instances_transition_role_check CHECK ((transition_role = ANY (ARRAY['auto'::text, 'canonical_drain'::text, 'queue_storage_target'::text])))
);
CREATE INDEX runtime_instances_last_seen_at_idx ON awa.runtime_instances USING btree (last_seen_at);

-- The functions and views migrate applied from their schema files, with each file's SHA-256 (ADR 0012).
CREATE TABLE awa.schema_objects (
    name text NOT NULL,
    kind text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schema_objects_pkey PRIMARY KEY (name),
    CONSTRAINT schema_objects_kind_check CHECK ((kind = ANY (ARRAY['function'::text, 'view'::text])))
);

-- One row per applied migration (version, description, checksum of its file).
CREATE TABLE awa.schema_version (
    version integer NOT NULL,
    description text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    checksum text,
    CONSTRAINT schema_version_pkey PRIMARY KEY (version)
);

-- The singleton that says which engine holds new jobs: canonical, a transition in progress, or queue storage (ADR 0007).
CREATE TABLE awa.storage_transition_state (
    singleton boolean DEFAULT true NOT NULL,
    current_engine text DEFAULT 'canonical'::text NOT NULL,
    active_engine text DEFAULT 'canonical'::text NOT NULL,
    prepared_engine text,
    state text DEFAULT 'canonical'::text NOT NULL,
    transition_epoch bigint DEFAULT 0 NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    entered_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finalized_at timestamp with time zone,
    CONSTRAINT storage_transition_state_pkey PRIMARY KEY (singleton),
    CONSTRAINT storage_transition_state_active_engine_check CHECK ((active_engine = ANY (ARRAY['canonical'::text, 'queue_storage'::text]))),
    CONSTRAINT storage_transition_state_current_engine_check CHECK ((current_engine = ANY (ARRAY['canonical'::text, 'queue_storage'::text]))),
    CONSTRAINT storage_transition_state_prepared_engine_check CHECK (((prepared_engine IS NULL) OR (prepared_engine = 'queue_storage'::text))),
    CONSTRAINT storage_transition_state_singleton_check CHECK (singleton),
    CONSTRAINT storage_transition_state_state_check CHECK ((state = ANY (ARRAY['canonical'::text, 'prepared'::text, 'mixed_transition'::text, 'active'::text])))
);

-- Queue storage: marks a ready row that must not be claimed (cancelled, moved or deleted before its claim). Partitioned by ring slot.
CREATE TABLE awa.tombstones (
    slot integer NOT NULL,
    ready_fact bigint NOT NULL,
    fact_id bigint NOT NULL,
    CONSTRAINT tombstones_pkey PRIMARY KEY (slot, ready_fact)
) PARTITION BY LIST (slot);
-- Partitions:
--   tombstones_0 .. tombstones_15 (16 partitions): tombstones_0 FOR VALUES IN (0), ..., tombstones_15 FOR VALUES IN (15)
-- and 16 stand-ins (tombstones_<slot>_spare) of the same shape, swapped in by prune.
