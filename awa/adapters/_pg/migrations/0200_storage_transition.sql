-- The staged storage transition (ADR 0007): canonical -> prepared -> mixed_transition ->
-- active (plus abort), driven by SQL functions so external migration tooling can call them.
-- Producers (awa.insert_job_compat and the Python client) route new jobs by the state read
-- inside their own transaction under a shared advisory lock; every transition step takes
-- the same lock exclusively, so no producer commits into an engine the state has left.

ALTER TABLE awa.storage_transition_state
    ADD CONSTRAINT storage_transition_state_current_engine_check
        CHECK (current_engine IN ('canonical', 'queue_storage')),
    ADD CONSTRAINT storage_transition_state_active_engine_check
        CHECK (active_engine IN ('canonical', 'queue_storage')),
    ADD CONSTRAINT storage_transition_state_prepared_engine_check
        CHECK (prepared_engine IS NULL OR prepared_engine = 'queue_storage');

-- One key for the producer/transition lock ("AWA_STOR").
CREATE FUNCTION awa.storage_transition_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 4707489254420959058::bigint $$;

-- A runtime counts as live while its snapshot is younger than max(3 x its snapshot
-- interval, 30 s) and it has not announced its shutdown.
CREATE FUNCTION awa.runtime_is_live(
    p_last_seen_at timestamptz, p_snapshot_interval_ms bigint, p_shutting_down boolean
) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT coalesce(p_shutting_down, false)
        AND p_last_seen_at > now() - make_interval(
            secs => greatest(coalesce(p_snapshot_interval_ms, 10000) * 3, 30000) / 1000.0)
$$;

-- The status row every transition function returns.
CREATE TYPE awa.storage_status_row AS (
    current_engine   text,
    active_engine    text,
    prepared_engine  text,
    state            text,
    transition_epoch bigint,
    details          jsonb,
    entered_at       timestamptz,
    updated_at       timestamptz,
    finalized_at     timestamptz
);

CREATE FUNCTION awa.storage_status() RETURNS SETOF awa.storage_status_row
LANGUAGE sql STABLE AS $$
    SELECT current_engine, active_engine, prepared_engine, state, transition_epoch, details,
           entered_at, updated_at, finalized_at
    FROM awa.storage_transition_state
$$;

-- The queue-storage schema producers write to, or NULL while they route to canonical.
CREATE FUNCTION awa.active_queue_storage_schema() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN state IN ('mixed_transition', 'active')
                THEN coalesce(nullif(details ->> 'schema', ''), 'awa') END
    FROM awa.storage_transition_state
$$;

-- Canonical jobs that still need a worker: everything not terminal, including scheduled,
-- retryable and waiting_external jobs.
CREATE FUNCTION awa.canonical_live_backlog() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*)::bigint FROM awa.canonical_jobs
    WHERE state NOT IN ('completed', 'failed', 'cancelled')
$$;

-- The producers' routing decision, taken inside the producer's transaction: a shared lock
-- held to commit keeps finalize and abort from passing an insert that is still in flight.
CREATE FUNCTION awa.storage_producer_schema() RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(awa.storage_transition_lock_key());
    RETURN awa.active_queue_storage_schema();
END
$$;

CREATE FUNCTION awa.queue_storage_installed(p_schema text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT to_regclass(quote_ident(p_schema) || '.ring_state') IS NOT NULL
       AND to_regclass(quote_ident(p_schema) || '.ready_entries') IS NOT NULL
       AND to_regclass(quote_ident(p_schema) || '.leases') IS NOT NULL
       AND to_regclass(quote_ident(p_schema) || '.deferred_jobs') IS NOT NULL
$$;

-- Whether the queue-storage schema holds any job fact (ready, deferred or terminal).
CREATE FUNCTION awa.queue_storage_has_rows(p_schema text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s text := quote_ident(p_schema);
    found boolean;
BEGIN
    IF NOT awa.queue_storage_installed(p_schema) THEN
        RETURN false;
    END IF;
    EXECUTE format(
        'SELECT EXISTS (SELECT 1 FROM %1$s.ready_entries)
             OR EXISTS (SELECT 1 FROM %1$s.deferred_jobs)
             OR EXISTS (SELECT 1 FROM %1$s.done_entries WHERE state IS NOT NULL)', s)
        INTO found;
    RETURN found;
END
$$;

-- Refusals carry SQLSTATE 55000 and a message starting with the gate's name.
CREATE FUNCTION awa.storage_refuse(p_gate text, p_detail text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'storage transition refused by gate %: %', p_gate, p_detail
        USING ERRCODE = 'object_not_in_prerequisite_state', HINT = p_gate;
END
$$;

-- Locks for a transition step: producers first (exclusive advisory lock), then the row.
CREATE FUNCTION awa.storage_lock_for_transition() RETURNS awa.storage_transition_state
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state;
BEGIN
    PERFORM pg_advisory_xact_lock(awa.storage_transition_lock_key());
    SELECT * INTO v FROM awa.storage_transition_state FOR UPDATE;
    RETURN v;
END
$$;

CREATE FUNCTION awa.storage_prepare(p_engine text, p_details jsonb DEFAULT '{}')
RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_details jsonb := coalesce(p_details, '{}'::jsonb);
BEGIN
    IF v.state NOT IN ('canonical', 'prepared') THEN
        PERFORM awa.storage_refuse('prepare_from_canonical',
            format('prepare needs state canonical or prepared, the cluster is %s', v.state));
    END IF;
    IF p_engine IS DISTINCT FROM 'queue_storage' THEN
        PERFORM awa.storage_refuse('engine_is_queue_storage',
            format('the only engine to prepare is queue_storage, got %s',
                coalesce(p_engine, 'null')));
    END IF;
    IF p_engine = v.current_engine THEN
        PERFORM awa.storage_refuse('engine_differs_from_current',
            format('the cluster already runs %s', p_engine));
    END IF;
    IF jsonb_typeof(v_details) <> 'object' THEN
        PERFORM awa.storage_refuse('details_is_object', 'details must be a JSON object');
    END IF;
    IF coalesce(nullif(v_details ->> 'schema', ''), 'awa') !~ '^[A-Za-z_][A-Za-z0-9_]*$' THEN
        PERFORM awa.storage_refuse('schema_is_identifier',
            format('schema %s is not a plain SQL identifier', v_details ->> 'schema'));
    END IF;
    v_details := v_details || jsonb_build_object(
        'schema', coalesce(nullif(v_details ->> 'schema', ''), 'awa'));
    UPDATE awa.storage_transition_state SET
        prepared_engine = p_engine,
        state = 'prepared',
        details = v_details,
        transition_epoch = transition_epoch + CASE WHEN state = 'prepared' THEN 0 ELSE 1 END,
        entered_at = CASE WHEN state = 'prepared' THEN entered_at ELSE now() END,
        updated_at = now(),
        finalized_at = NULL;
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;

CREATE FUNCTION awa.storage_enter_mixed_transition() RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_schema text := coalesce(nullif(v.details ->> 'schema', ''), 'awa');
    v_canonical_only bigint;
    v_capable bigint;
BEGIN
    IF v.state <> 'prepared' THEN
        PERFORM awa.storage_refuse('state_is_prepared',
            format('enter-mixed-transition needs state prepared, the cluster is %s', v.state));
    END IF;
    IF v.prepared_engine IS DISTINCT FROM 'queue_storage' THEN
        PERFORM awa.storage_refuse('engine_is_queue_storage',
            'the prepared engine is not queue_storage');
    END IF;
    IF NOT awa.queue_storage_installed(v_schema) THEN
        PERFORM awa.storage_refuse('queue_storage_schema_installed',
            format('schema %s has no queue-storage tables: run '
                   '`awa storage prepare-queue-storage-schema --schema %s`', v_schema, v_schema));
    END IF;
    SELECT count(*) FILTER (WHERE storage_capability = 'canonical'),
           count(*) FILTER (WHERE storage_capability = 'queue_storage')
    INTO v_canonical_only, v_capable
    FROM awa.runtime_instances
    WHERE awa.runtime_is_live(last_seen_at, snapshot_interval_ms, shutting_down);
    IF v_canonical_only > 0 THEN
        PERFORM awa.storage_refuse('no_live_canonical_only_runtime',
            format('%s live runtime(s) can only run canonical storage; '
                   'upgrade or stop them first', v_canonical_only));
    END IF;
    IF v_capable = 0 THEN
        PERFORM awa.storage_refuse('live_queue_storage_runtime',
            'no live runtime can execute queue storage; start one first');
    END IF;
    UPDATE awa.storage_transition_state SET
        state = 'mixed_transition',
        active_engine = 'queue_storage',
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now();
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;

CREATE FUNCTION awa.storage_finalize() RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_backlog bigint;
BEGIN
    IF v.state <> 'mixed_transition' THEN
        PERFORM awa.storage_refuse('state_is_mixed_transition',
            format('finalize needs state mixed_transition, the cluster is %s', v.state));
    END IF;
    -- Read after the exclusive lock: every producer that routed to canonical has committed.
    v_backlog := awa.canonical_live_backlog();
    IF v_backlog > 0 THEN
        PERFORM awa.storage_refuse('canonical_backlog_drained',
            format('%s canonical job(s) are not finished yet', v_backlog));
    END IF;
    UPDATE awa.storage_transition_state SET
        current_engine = 'queue_storage',
        active_engine = 'queue_storage',
        prepared_engine = NULL,
        state = 'active',
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now(),
        finalized_at = now();
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;

CREATE FUNCTION awa.storage_abort() RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_schema text := coalesce(nullif(v.details ->> 'schema', ''), 'awa');
BEGIN
    IF v.state NOT IN ('prepared', 'mixed_transition') THEN
        PERFORM awa.storage_refuse('transition_in_progress',
            format('abort needs state prepared or mixed_transition, the cluster is %s',
                v.state));
    END IF;
    -- Read after the exclusive lock: every producer that routed to queue storage committed.
    IF v.state = 'mixed_transition' AND awa.queue_storage_has_rows(v_schema) THEN
        PERFORM awa.storage_refuse('no_queue_storage_rows',
            format('schema %s already holds queue-storage jobs; finish the transition '
                   'with `awa storage finalize`', v_schema));
    END IF;
    UPDATE awa.storage_transition_state SET
        current_engine = 'canonical',
        active_engine = 'canonical',
        prepared_engine = NULL,
        state = 'canonical',
        details = '{}'::jsonb,
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now(),
        finalized_at = NULL;
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;

-- A fresh install (no job ever stored, no live runtime) skips the transition and starts on
-- queue storage. Called by every runtime at start; returns whether it switched.
CREATE FUNCTION awa.storage_auto_finalize_if_fresh(p_schema text DEFAULT 'awa')
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_schema text := coalesce(nullif(p_schema, ''), 'awa');
BEGIN
    IF v.state NOT IN ('canonical', 'prepared') THEN
        RETURN false;
    END IF;
    IF v.state = 'prepared' AND coalesce(nullif(v.details ->> 'schema', ''), 'awa') <> v_schema
    THEN
        RETURN false;
    END IF;
    IF NOT awa.queue_storage_installed(v_schema)
        OR EXISTS (SELECT 1 FROM awa.canonical_jobs)
        OR EXISTS (SELECT 1 FROM awa.dlq_entries)
        OR EXISTS (
            SELECT 1 FROM awa.runtime_instances
            WHERE awa.runtime_is_live(last_seen_at, snapshot_interval_ms, shutting_down))
    THEN
        RETURN false;
    END IF;
    UPDATE awa.storage_transition_state SET
        current_engine = 'queue_storage',
        active_engine = 'queue_storage',
        prepared_engine = NULL,
        state = 'active',
        details = details || jsonb_build_object('schema', v_schema, 'fresh_install', true),
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now(),
        finalized_at = now();
    RETURN true;
END
$$;

-- The enqueue shard of an ordering key: the same FNV-style hash as awa.domain.routing.
CREATE FUNCTION awa.ordering_key_shard(p_key bytea, p_shards int) RETURNS int
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    h numeric := 14695981039346656037;
    i int;
BEGIN
    IF p_shards IS NULL OR p_shards <= 1 OR p_key IS NULL THEN
        RETURN 0;
    END IF;
    FOR i IN 0 .. length(p_key) - 1 LOOP
        h := mod(h * 1099511628211 + get_byte(p_key, i), 18446744073709551616);
    END LOOP;
    RETURN mod(h, p_shards)::int;
END
$$;

-- Append one job body (a canonical row value) to queue storage in schema p_schema, as the
-- engine's own enqueue does: available -> a ready row in the current slot of its lane,
-- scheduled / retryable -> the deferred backlog, terminal -> a done fact. The caller owns
-- the unique claim. Lock order follows ADR 0006: lanes, claim heads, then counters.
CREATE FUNCTION awa.queue_storage_append(p_schema text, p_job awa.canonical_jobs)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    s        text := quote_ident(p_schema);
    v_shards int;
    v_shard  int;
    v_seq    bigint;
    cols     text := 'job_id, kind, queue, args, priority, attempt, max_attempts, run_at, '
        'heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, '
        'tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, '
        'progress, ordering_key';
    vals     text := '($1).id, ($1).kind, ($1).queue, ($1).args, ($1).priority, '
        '($1).attempt, ($1).max_attempts, ($1).run_at, ($1).heartbeat_at, ($1).deadline_at, '
        '($1).attempted_at, ($1).finalized_at, ($1).created_at, ($1).errors, ($1).metadata, '
        '($1).tags, ($1).unique_key, ($1).unique_states, ($1).callback_id, '
        '($1).callback_timeout_at, ($1).run_lease, ($1).progress, ($1).ordering_key';
BEGIN
    IF p_job.state = 'available' THEN
        SELECT enqueue_shards INTO v_shards FROM awa.queue_meta WHERE queue = p_job.queue;
        v_shards := coalesce(v_shards, 1);
        IF v_shards <= 1 THEN
            v_shard := 0;
        ELSIF p_job.ordering_key IS NOT NULL THEN
            v_shard := awa.ordering_key_shard(p_job.ordering_key, v_shards);
        ELSE
            v_shard := (p_job.id % v_shards)::int;
        END IF;
        EXECUTE format(
            'INSERT INTO %s.lanes AS l (queue, priority, shard, next_seq) VALUES ($1, $2, $3, 1)
             ON CONFLICT (queue, priority, shard) DO UPDATE SET next_seq = l.next_seq + 1
             RETURNING next_seq', s)
            INTO v_seq USING p_job.queue, p_job.priority, v_shard;
        EXECUTE format(
            'INSERT INTO %s.claim_heads (queue, priority, shard, claim_seq)
             VALUES ($1, $2, $3, 0) ON CONFLICT DO NOTHING', s)
            USING p_job.queue, p_job.priority, v_shard;
        EXECUTE format(
            'INSERT INTO %1$s.ready_entries (slot, fact_id, shard, lane_seq, %2$s)
             SELECT (SELECT current_slot FROM %1$s.ring_state), nextval(%3$L), $2, $3, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job, v_shard, v_seq - 1;
        PERFORM pg_notify('awa:' || p_job.queue, '');
    ELSIF p_job.state IN ('scheduled', 'retryable') THEN
        EXECUTE format(
            'INSERT INTO %1$s.deferred_jobs (fact_id, state, %2$s)
             SELECT nextval(%3$L), ($1).state, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job;
    ELSIF p_job.state IN ('completed', 'failed', 'cancelled') THEN
        EXECUTE format(
            'INSERT INTO %1$s.done_entries (slot, fact_id, state, %2$s)
             SELECT (SELECT current_slot FROM %1$s.ring_state), nextval(%3$L), ($1).state, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job;
    ELSE
        RAISE EXCEPTION 'a job in state % cannot be appended to queue storage', p_job.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_state_check';
    END IF;
    EXECUTE format(
        'INSERT INTO %s.queue_counts AS c (queue, state, bucket, n)
         VALUES ($1, $2, (pg_backend_pid() %% 8)::smallint, 1)
         ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + 1', s)
        USING p_job.queue, p_job.state;
END
$$;

-- Move the canonical backlog that is not running (available, scheduled, retryable) into
-- queue storage under the same ids, oldest first. Runs while producers route to queue
-- storage, so canonical retries and operator retries continue there and finalize only
-- waits for attempts already running on canonical. Rows locked by a claimer are skipped.
CREATE FUNCTION awa.storage_move_canonical_backlog(p_limit int DEFAULT 1000) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_schema text := awa.active_queue_storage_schema();
    v_job    awa.canonical_jobs;
    v_moved  int := 0;
BEGIN
    IF v_schema IS NULL OR NOT awa.queue_storage_installed(v_schema) THEN
        RETURN 0;
    END IF;
    FOR v_job IN
        DELETE FROM awa.canonical_jobs c
        WHERE c.id IN (
            SELECT id FROM awa.canonical_jobs
            WHERE state IN ('available', 'scheduled', 'retryable')
            ORDER BY run_at, id
            LIMIT greatest(p_limit, 0)
            FOR UPDATE SKIP LOCKED
        )
          AND c.state IN ('available', 'scheduled', 'retryable')
        RETURNING c.*
    LOOP
        -- The delete trigger released the key; the same job takes it back in the new engine.
        IF v_job.unique_key IS NOT NULL
            AND awa.job_state_in_bitmask(v_job.unique_states, v_job.state) THEN
            INSERT INTO awa.job_unique_claims (unique_key, job_id)
            VALUES (v_job.unique_key, v_job.id);
        END IF;
        PERFORM awa.queue_storage_append(v_schema, v_job);
        v_moved := v_moved + 1;
    END LOOP;
    RETURN v_moved;
END
$$;

-- The SQL producer contract, now routed by the transition state (same signature).
CREATE OR REPLACE FUNCTION awa.insert_job_compat(
    p_kind text,
    p_queue text DEFAULT 'default',
    p_args jsonb DEFAULT '{}',
    p_state awa.job_state DEFAULT 'available',
    p_priority smallint DEFAULT 2,
    p_max_attempts smallint DEFAULT 25,
    p_run_at timestamptz DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_tags text[] DEFAULT '{}',
    p_unique_key bytea DEFAULT NULL,
    p_unique_states bit(8) DEFAULT NULL,
    p_ordering_key bytea DEFAULT NULL
) RETURNS awa.jobs
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := now();
    v_state  awa.job_state := coalesce(p_state, 'available');
    v_schema text := awa.storage_producer_schema();
    v_job    awa.canonical_jobs;
    v_row    awa.jobs;
BEGIN
    IF v_state = 'available' AND p_run_at IS NOT NULL AND p_run_at > v_now THEN
        v_state := 'scheduled';
    END IF;
    IF v_schema IS NULL THEN
        INSERT INTO awa.canonical_jobs (
            kind, queue, args, state, priority, max_attempts, run_at, finalized_at,
            created_at, metadata, tags, unique_key, unique_states, ordering_key
        ) VALUES (
            p_kind,
            coalesce(p_queue, 'default'),
            coalesce(p_args, '{}'::jsonb),
            v_state,
            coalesce(p_priority, 2),
            coalesce(p_max_attempts, 25),
            coalesce(p_run_at, v_now),
            CASE WHEN v_state IN ('completed', 'failed', 'cancelled') THEN v_now END,
            v_now,
            coalesce(p_metadata, '{}'::jsonb),
            coalesce(p_tags, '{}'::text[]),
            p_unique_key,
            coalesce(p_unique_states, B'11111000'),
            p_ordering_key
        )
        RETURNING * INTO v_job;
    ELSE
        -- Validate exactly as the canonical table would, without writing to it.
        IF p_kind IS NULL OR char_length(p_kind) NOT BETWEEN 1 AND 200 THEN
            RAISE EXCEPTION 'kind must be 1..200 characters'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_kind_check';
        END IF;
        IF char_length(coalesce(p_queue, 'default')) NOT BETWEEN 1 AND 200 THEN
            RAISE EXCEPTION 'queue must be 1..200 characters'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_queue_check';
        END IF;
        IF coalesce(p_priority, 2) NOT BETWEEN 1 AND 4 THEN
            RAISE EXCEPTION 'priority must be between 1 and 4'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_priority_check';
        END IF;
        IF coalesce(p_max_attempts, 25) NOT BETWEEN 1 AND 1000 THEN
            RAISE EXCEPTION 'max_attempts must be between 1 and 1000'
                USING ERRCODE = 'check_violation',
                      CONSTRAINT = 'canonical_jobs_max_attempts_check';
        END IF;
        IF cardinality(coalesce(p_tags, '{}'::text[])) > 20 THEN
            RAISE EXCEPTION 'at most 20 tags'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_tags_check';
        END IF;
        IF jsonb_typeof(coalesce(p_metadata, '{}'::jsonb)) <> 'object' THEN
            RAISE EXCEPTION 'metadata must be a JSON object'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_metadata_check';
        END IF;
        v_job.id := nextval('awa.jobs_id_seq');
        v_job.kind := p_kind;
        v_job.queue := coalesce(p_queue, 'default');
        v_job.args := coalesce(p_args, '{}'::jsonb);
        v_job.state := v_state;
        v_job.priority := coalesce(p_priority, 2);
        v_job.attempt := 0;
        v_job.max_attempts := coalesce(p_max_attempts, 25);
        v_job.run_at := coalesce(p_run_at, v_now);
        v_job.finalized_at :=
            CASE WHEN v_state IN ('completed', 'failed', 'cancelled') THEN v_now END;
        v_job.created_at := v_now;
        v_job.errors := '{}'::jsonb[];
        v_job.metadata := coalesce(p_metadata, '{}'::jsonb);
        v_job.tags := coalesce(p_tags, '{}'::text[]);
        v_job.unique_key := p_unique_key;
        v_job.unique_states := coalesce(p_unique_states, B'11111000');
        v_job.run_lease := 0;
        v_job.ordering_key := p_ordering_key;
        IF v_job.unique_key IS NOT NULL
            AND awa.job_state_in_bitmask(v_job.unique_states, v_job.state) THEN
            -- A clash is a unique_violation on job_unique_claims_pkey, as on canonical.
            INSERT INTO awa.job_unique_claims (unique_key, job_id)
            VALUES (v_job.unique_key, v_job.id);
        END IF;
        PERFORM awa.queue_storage_append(v_schema, v_job);
    END IF;
    v_row.id := v_job.id;
    v_row.kind := v_job.kind;
    v_row.queue := v_job.queue;
    v_row.args := v_job.args;
    v_row.state := v_job.state;
    v_row.priority := v_job.priority;
    v_row.attempt := v_job.attempt;
    v_row.max_attempts := v_job.max_attempts;
    v_row.run_at := v_job.run_at;
    v_row.heartbeat_at := v_job.heartbeat_at;
    v_row.deadline_at := v_job.deadline_at;
    v_row.attempted_at := v_job.attempted_at;
    v_row.finalized_at := v_job.finalized_at;
    v_row.created_at := v_job.created_at;
    v_row.errors := v_job.errors;
    v_row.metadata := v_job.metadata;
    v_row.tags := v_job.tags;
    v_row.unique_key := v_job.unique_key;
    v_row.unique_states := v_job.unique_states;
    v_row.callback_id := awa.callback_id_as_uuid(v_job.callback_id);
    v_row.callback_timeout_at := v_job.callback_timeout_at;
    v_row.callback_filter := v_job.callback_filter;
    v_row.callback_on_complete := v_job.callback_on_complete;
    v_row.callback_on_fail := v_job.callback_on_fail;
    v_row.callback_transform := v_job.callback_transform;
    v_row.run_lease := v_job.run_lease;
    v_row.progress := v_job.progress;
    RETURN v_row;
END
$$;
