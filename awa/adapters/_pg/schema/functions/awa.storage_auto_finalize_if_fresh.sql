-- A fresh install (no job ever stored, no live runtime) skips the transition and starts on
-- queue storage. Called by every runtime at start; returns whether it switched.
CREATE OR REPLACE FUNCTION awa.storage_auto_finalize_if_fresh(p_schema text DEFAULT 'awa')
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
