-- Unique conflict modes (ADR 0034, awa.domain.unique_conflict): an insert whose metadata
-- carries 'awa:unique_conflict' {"on_conflict": "replace" | "debounce", ...} merges into
-- the job that holds its unique key when that job still waits (scheduled or available,
-- not waiting on parents), and this returns the merged job; it returns no row (and
-- changes nothing) when the insert has no such mode, nobody holds the key, or the holder
-- runs, waits for a retry or a callback, or finished (the insert then goes on as today).
--
-- The holder's claim row is locked first, so concurrent inserts of one key merge one
-- after the other, each on top of the last (latest args win), and an insert that finds
-- no holder and then loses the race to insert sees the winner on its retry. The holder
-- is changed through awa.jobs, whose UPDATE trigger writes either plane and changes
-- nothing when a worker claimed the job meanwhile. Used by both Postgres engines (p_now
-- is the engine's clock) and by awa.insert_job_compat (p_now = now()).
--
-- The rule is awa.domain.unique_conflict.merged: debounce moves run_at to
-- least(p_now + window, created_at + max_wait); replace to p_run_at (absent: p_now);
-- args, priority, tags and metadata become the insert's, keeping the holder's
-- concurrency key; 'inserts' counts the inserts the job absorbed.
--
-- p_schema is the queue-storage schema of the engine inserting (NULL for canonical and
-- the SQL producer). awa.jobs covers canonical, schema awa and the schema the storage
-- transition names; a holder in any other schema (an engine opened on a private one) is
-- read from that schema's jobs_resolved and changed by awa.queue_storage_edit, as the
-- view's UPDATE trigger changes the others.
-- requires: awa.jobs, awa.queue_storage_edit
CREATE OR REPLACE FUNCTION awa.unique_conflict_merge(
    p_unique_key bytea,
    p_args jsonb,
    p_run_at timestamptz,
    p_priority smallint,
    p_tags text[],
    p_metadata jsonb,
    p_now timestamptz,
    p_schema text DEFAULT NULL
) RETURNS SETOF awa.jobs
LANGUAGE plpgsql AS $$
DECLARE
    v_mode   jsonb := p_metadata -> 'awa:unique_conflict';
    v_kind   text := v_mode ->> 'on_conflict';
    v_id     bigint;
    v_old    awa.jobs;
    v_new    awa.jobs;
    v_run_at timestamptz;
    v_meta   jsonb;
    v_window double precision;
    v_max    double precision;
    v_plane  text;
BEGIN
    IF p_unique_key IS NULL OR v_mode IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(v_mode) <> 'object' OR v_kind IS NULL
        OR v_kind NOT IN ('replace', 'debounce') THEN
        RAISE EXCEPTION 'on_conflict: metadata ''awa:unique_conflict'' must be '
            '{"on_conflict": "replace"} or {"on_conflict": "debounce", "window": s, "max_wait": s}'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'on_conflict_check';
    END IF;
    IF v_kind = 'debounce' THEN
        IF jsonb_typeof(v_mode -> 'window') IS DISTINCT FROM 'number'
            OR jsonb_typeof(v_mode -> 'max_wait') IS DISTINCT FROM 'number' THEN
            RAISE EXCEPTION 'on_conflict: a debounce needs numeric "window" and "max_wait"'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'on_conflict_check';
        END IF;
        v_window := (v_mode ->> 'window')::double precision;
        v_max := (v_mode ->> 'max_wait')::double precision;
        IF NOT (v_window > 0 AND v_max >= v_window AND v_max <= 2592000) THEN
            RAISE EXCEPTION 'on_conflict: need 0 < window <= max_wait <= 30 days, got % and %',
                v_window, v_max
                USING ERRCODE = 'check_violation', CONSTRAINT = 'on_conflict_check';
        END IF;
    END IF;

    SELECT c.job_id INTO v_id FROM awa.job_unique_claims AS c
    WHERE c.unique_key = p_unique_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO v_old FROM awa.jobs AS j WHERE j.id = v_id;
    IF NOT FOUND AND p_schema IS NOT NULL THEN
        -- The awa.queue_storage_jobs layout, read by id rather than through that function
        -- (which returns the whole schema).
        EXECUTE format($q$
            SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
                   heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
                   metadata, tags, unique_key, unique_states::bit(8),
                   awa.callback_id_as_uuid(callback_id), callback_timeout_at,
                   NULL::text, NULL::text, NULL::text, NULL::text, run_lease, progress
            FROM %s.jobs_resolved WHERE id = $1$q$, quote_ident(p_schema))
            INTO v_old USING v_id;
        IF v_old.id IS NOT NULL THEN
            v_plane := p_schema;
        END IF;
    END IF;
    IF v_old.id IS NULL OR v_old.state NOT IN ('scheduled', 'available')
        OR EXISTS (SELECT 1 FROM awa.job_dependency_waits AS w WHERE w.child_id = v_id) THEN
        RETURN;
    END IF;

    IF v_kind = 'debounce' THEN
        v_run_at := least(p_now + make_interval(secs => v_window),
                          v_old.created_at + make_interval(secs => v_max));
    ELSE
        v_run_at := coalesce(p_run_at, p_now);
    END IF;
    v_meta := coalesce(p_metadata, '{}'::jsonb) - 'awa:concurrency_key';
    IF v_old.metadata ? 'awa:concurrency_key' THEN
        v_meta := v_meta || jsonb_build_object('awa:concurrency_key',
                                               v_old.metadata -> 'awa:concurrency_key');
    END IF;
    v_meta := jsonb_set(v_meta, '{awa:unique_conflict,inserts}', to_jsonb(
        CASE WHEN jsonb_typeof(v_old.metadata #> '{awa:unique_conflict,inserts}') = 'number'
             THEN (v_old.metadata #>> '{awa:unique_conflict,inserts}')::bigint
             ELSE 1 END + 1));

    IF v_plane IS NOT NULL THEN
        v_new := v_old;
        v_new.args := coalesce(p_args, '{}'::jsonb);
        v_new.run_at := v_run_at;
        v_new.state := CASE WHEN v_run_at > p_now THEN 'scheduled'
                            ELSE 'available' END::awa.job_state;
        v_new.priority := coalesce(p_priority, v_old.priority);
        v_new.tags := coalesce(p_tags, '{}'::text[]);
        v_new.metadata := v_meta;
        IF NOT awa.queue_storage_edit(v_plane, v_old, v_new, false) THEN
            RETURN;
        END IF;
        RETURN NEXT v_new;
        RETURN;
    END IF;
    UPDATE awa.jobs AS j SET
        args = coalesce(p_args, '{}'::jsonb),
        run_at = v_run_at,
        state = CASE WHEN v_run_at > p_now THEN 'scheduled' ELSE 'available' END::awa.job_state,
        priority = coalesce(p_priority, v_old.priority),
        tags = coalesce(p_tags, '{}'::text[]),
        metadata = v_meta
    WHERE j.id = v_id AND j.state = v_old.state
    RETURNING j.* INTO v_new;
    IF NOT FOUND THEN
        -- A worker claimed it between the read and the write: it is no longer waiting.
        RETURN;
    END IF;
    RETURN NEXT v_new;
END
$$;
