-- Step of awa.install_queue_storage: the tables producers write refuse a run_at Python
-- cannot read back (awa.run_at_in_range). NOT VALID: no scan, and rows already stored
-- stay readable by the reads that skip them.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_run_at_bounds(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    t text;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    -- The tables a producer writes: ready rows (run_at now or past) and deferred rows.
    -- Later states copy run_at from these.
    FOREACH t IN ARRAY ARRAY['ready_entries', 'deferred_jobs'] LOOP
        IF NOT EXISTS (
            SELECT 1 FROM pg_constraint
            WHERE conrelid = format('%s.%I', s, t)::regclass
              AND conname = t || '_run_at_check'
        ) THEN
            EXECUTE format(
                'ALTER TABLE %s.%I ADD CONSTRAINT %I CHECK (awa.run_at_in_range(run_at)) NOT VALID',
                s, t, t || '_run_at_check');
        END IF;
    END LOOP;
END
$upgrade$;
