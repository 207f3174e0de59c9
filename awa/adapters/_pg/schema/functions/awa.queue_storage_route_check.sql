-- A producer that remembers where new jobs go sends this check ahead of its insert, in
-- the same transaction: it takes the shared producer lock (as awa.storage_producer_schema
-- does) and fails when producers no longer write to p_schema, which rolls the insert back
-- before anything commits. The producer then reads the route and inserts again.
CREATE OR REPLACE FUNCTION awa.queue_storage_route_check(p_schema text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF awa.storage_producer_schema() IS DISTINCT FROM p_schema THEN
        RAISE EXCEPTION 'producers no longer write to queue storage schema %', p_schema
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'awa_route_changed';
    END IF;
END
$$;
