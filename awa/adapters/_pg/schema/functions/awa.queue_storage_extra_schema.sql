-- A non-default queue-storage schema named by the storage transition, or NULL.
CREATE OR REPLACE FUNCTION awa.queue_storage_extra_schema() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT t.s FROM (
        SELECT CASE WHEN state IN ('mixed_transition', 'active')
                    THEN nullif(details ->> 'schema', '') END AS s
        FROM awa.storage_transition_state
    ) t
    WHERE t.s IS NOT NULL AND t.s <> 'awa'
      AND to_regclass(quote_ident(t.s) || '.jobs_resolved') IS NOT NULL
$$;
