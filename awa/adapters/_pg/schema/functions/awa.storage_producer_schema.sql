-- The producers' routing decision, taken inside the producer's transaction: a shared lock
-- held to commit keeps finalize and abort from passing an insert that is still in flight.
CREATE OR REPLACE FUNCTION awa.storage_producer_schema() RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(awa.storage_transition_lock_key());
    RETURN awa.active_queue_storage_schema();
END
$$;
