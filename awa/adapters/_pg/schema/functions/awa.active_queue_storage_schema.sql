-- The queue-storage schema of a cluster in mixed transition or active on queue storage;
-- NULL before (canonical, prepared).
-- The producers' route reads it on every insert (awa.storage_producer_schema,
-- awa.queue_storage_route_check, awa.insert_job_compat). PL/pgSQL, not SQL: a SQL function
-- with a FROM clause cannot be inlined, so every call parsed and planned its body again;
-- as PL/pgSQL its statement is planned once per session and reused.
CREATE OR REPLACE FUNCTION awa.active_queue_storage_schema() RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_schema text;
BEGIN
    SELECT CASE WHEN state IN ('mixed_transition', 'active')
                THEN coalesce(nullif(details ->> 'schema', ''), 'awa') END
    INTO v_schema
    FROM awa.storage_transition_state;
    RETURN v_schema;
END
$$;
