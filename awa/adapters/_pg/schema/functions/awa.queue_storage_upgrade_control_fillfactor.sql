-- Step of awa.install_queue_storage: the control rows (lane heads, claim cursors,
-- counters, ring state) are updated on every enqueue, claim and completion; a fill factor
-- of 10 on their tiny tables makes every access prune the page's dead versions.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_control_fillfactor(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['lanes', 'claim_heads', 'queue_counts', 'completions',
                             'ring_state', 'queue_prune_stats']
    LOOP
        -- Only where it is not set yet: a repeated install changes no catalog row.
        IF EXISTS (
            SELECT 1 FROM pg_class
            WHERE oid = to_regclass(s || '.' || quote_ident(t))
              AND NOT coalesce('fillfactor=10' = ANY(reloptions), false)
        ) THEN
            EXECUTE format('ALTER TABLE %s.%I SET (fillfactor = 10)', s, t);
        END IF;
    END LOOP;
END
$upgrade$;
