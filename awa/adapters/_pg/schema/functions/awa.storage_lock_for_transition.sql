-- Locks for a transition step: producers first (exclusive advisory lock), then the row.
CREATE OR REPLACE FUNCTION awa.storage_lock_for_transition() RETURNS awa.storage_transition_state
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state;
BEGIN
    PERFORM pg_advisory_xact_lock(awa.storage_transition_lock_key());
    SELECT * INTO v FROM awa.storage_transition_state FOR UPDATE;
    RETURN v;
END
$$;
