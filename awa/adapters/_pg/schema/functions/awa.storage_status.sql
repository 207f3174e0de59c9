-- The storage transition state (`awa storage status`, SQL_SURFACE.md).
CREATE OR REPLACE FUNCTION awa.storage_status() RETURNS SETOF awa.storage_status_row
LANGUAGE sql STABLE AS $$
    SELECT current_engine, active_engine, prepared_engine, state, transition_epoch, details,
           entered_at, updated_at, finalized_at
    FROM awa.storage_transition_state
$$;
