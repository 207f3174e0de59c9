-- INSERT through awa.jobs: always a canonical row (SQL_SURFACE.md); producers use
-- awa.insert_job_compat to reach queue storage.
CREATE OR REPLACE FUNCTION awa.jobs_view_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
BEGIN
    INSERT INTO awa.canonical_jobs (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
        heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
        metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
        callback_filter, callback_on_complete, callback_on_fail, callback_transform,
        run_lease, progress
    ) VALUES (
        coalesce(NEW.id, nextval('awa.jobs_id_seq')),
        NEW.kind,
        coalesce(NEW.queue, 'default'),
        coalesce(NEW.args, '{}'::jsonb),
        coalesce(NEW.state, 'available'),
        coalesce(NEW.priority, 2),
        coalesce(NEW.attempt, 0),
        coalesce(NEW.max_attempts, 25),
        coalesce(NEW.run_at, v_now),
        NEW.heartbeat_at,
        NEW.deadline_at,
        NEW.attempted_at,
        NEW.finalized_at,
        coalesce(NEW.created_at, v_now),
        coalesce(NEW.errors, '{}'::jsonb[]),
        coalesce(NEW.metadata, '{}'::jsonb),
        coalesce(NEW.tags, '{}'::text[]),
        NEW.unique_key,
        coalesce(NEW.unique_states, B'11111000'),
        NEW.callback_id::text,
        NEW.callback_timeout_at,
        NEW.callback_filter,
        NEW.callback_on_complete,
        NEW.callback_on_fail,
        NEW.callback_transform,
        coalesce(NEW.run_lease, 0),
        NEW.progress
    )
    RETURNING
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
        heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
        metadata, tags, unique_key, unique_states, awa.callback_id_as_uuid(callback_id),
        callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
        callback_transform, run_lease, progress
    INTO NEW;
    RETURN NEW;
END
$$;
