-- Operator repair through the view: canonical rows as before (rewritten only if the
-- attempt identity the statement read is still current), queue-storage jobs by facts.
CREATE OR REPLACE FUNCTION awa.jobs_view_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_plane text := awa.job_plane(OLD.id);
BEGIN
    IF v_plane IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_plane <> 'canonical' THEN
        IF NOT awa.queue_storage_edit(v_plane, OLD, NEW, false) THEN
            RETURN NULL;
        END IF;
        RETURN NEW;
    END IF;
    UPDATE awa.canonical_jobs AS j SET
        kind = NEW.kind,
        queue = NEW.queue,
        args = NEW.args,
        state = NEW.state,
        priority = NEW.priority,
        attempt = NEW.attempt,
        max_attempts = NEW.max_attempts,
        run_at = NEW.run_at,
        heartbeat_at = NEW.heartbeat_at,
        deadline_at = NEW.deadline_at,
        attempted_at = NEW.attempted_at,
        finalized_at = NEW.finalized_at,
        created_at = NEW.created_at,
        errors = NEW.errors,
        metadata = NEW.metadata,
        tags = NEW.tags,
        unique_key = NEW.unique_key,
        unique_states = NEW.unique_states,
        callback_id = CASE
            WHEN NEW.callback_id IS DISTINCT FROM OLD.callback_id THEN NEW.callback_id::text
            ELSE j.callback_id
        END,
        callback_timeout_at = NEW.callback_timeout_at,
        callback_filter = NEW.callback_filter,
        callback_on_complete = NEW.callback_on_complete,
        callback_on_fail = NEW.callback_on_fail,
        callback_transform = NEW.callback_transform,
        run_lease = NEW.run_lease,
        progress = NEW.progress
    WHERE j.id = OLD.id
      AND j.state = OLD.state
      AND j.run_lease = OLD.run_lease
      AND awa.callback_id_as_uuid(j.callback_id) IS NOT DISTINCT FROM OLD.callback_id
    RETURNING
        j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt, j.max_attempts,
        j.run_at, j.heartbeat_at, j.deadline_at, j.attempted_at, j.finalized_at,
        j.created_at, j.errors, j.metadata, j.tags, j.unique_key, j.unique_states,
        awa.callback_id_as_uuid(j.callback_id), j.callback_timeout_at, j.callback_filter,
        j.callback_on_complete, j.callback_on_fail, j.callback_transform, j.run_lease,
        j.progress
    INTO NEW;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- An operator cancelling a live attempt tells its worker, as the Python API does.
    IF NEW.state = 'cancelled' AND OLD.state IN ('running', 'waiting_external') THEN
        PERFORM pg_notify(
            'awa:cancel',
            json_build_object('job_id', NEW.id, 'run_lease', NEW.run_lease)::text
        );
    END IF;
    RETURN NEW;
END
$$;
