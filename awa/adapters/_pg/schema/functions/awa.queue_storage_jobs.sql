-- The queue-storage jobs of p_schema in the awa.jobs column layout (none for NULL).
CREATE OR REPLACE FUNCTION awa.queue_storage_jobs(p_schema text) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt smallint, max_attempts smallint, run_at timestamptz, heartbeat_at timestamptz,
    deadline_at timestamptz, attempted_at timestamptz, finalized_at timestamptz,
    created_at timestamptz, errors jsonb[], metadata jsonb, tags text[], unique_key bytea,
    unique_states bit(8), callback_id uuid, callback_timeout_at timestamptz,
    callback_filter text, callback_on_complete text, callback_on_fail text,
    callback_transform text, run_lease bigint, progress jsonb
)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_schema IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($q$
        SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
               heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
               metadata, tags, unique_key, unique_states,
               awa.callback_id_as_uuid(callback_id), callback_timeout_at,
               NULL::text, NULL::text, NULL::text, NULL::text, run_lease, progress
        FROM %s.jobs_resolved$q$, quote_ident(p_schema));
END
$$;
