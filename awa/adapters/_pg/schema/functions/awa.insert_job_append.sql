-- The write of the SQL producer contract (awa.insert_job_compat, SQL_SURFACE.md): insert
-- one job in the caller's transaction, with the database clock, into the storage the
-- transition state routes producers to. A held unique key raises unique_violation.
-- requires: awa.jobs
CREATE OR REPLACE FUNCTION awa.insert_job_append(
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
    v_problem text;
BEGIN
    -- Names the admin UI and REST API can reach (awa.job_name_problem), on both routes.
    v_problem := awa.job_name_problem('kind', p_kind);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem
            USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_kind_check';
    END IF;
    v_problem := awa.job_name_problem('queue', coalesce(p_queue, 'default'));
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem
            USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_queue_check';
    END IF;
    -- A concurrency key (metadata 'awa:concurrency_key', ADR 0029): text of 1 to 255
    -- bytes, and not beside an ordering key (awa.domain.flow_control).
    IF p_metadata ? 'awa:concurrency_key' AND (
        jsonb_typeof(p_metadata -> 'awa:concurrency_key') <> 'string'
        OR octet_length(p_metadata ->> 'awa:concurrency_key') NOT BETWEEN 1 AND 255
        OR p_ordering_key IS NOT NULL
    ) THEN
        RAISE EXCEPTION 'concurrency_key: must be text of 1 to 255 bytes, without an ordering_key'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'concurrency_key_check';
    END IF;
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
