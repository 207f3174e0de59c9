-- Step of awa.install_queue_storage: claims keep only their key and the claim probe. The
-- rescue sweeps scan the claims in order, and lookups by job go through ready_entries
-- (job_id) and the probe, so the attempted_at, deadline_at and (job_id, run_lease)
-- indexes only cost WAL.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_lean_claims(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    old_index text;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    -- The indexes on the partitioned claims table (their partition indexes go with them):
    -- every index whose first column is attempted_at, deadline_at or job_id.
    FOR old_index IN
        SELECT i.relname
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
        WHERE x.indrelid = format('%s.claims', s)::regclass
          AND NOT x.indisprimary
          AND a.attname IN ('attempted_at', 'deadline_at', 'job_id')
    LOOP
        EXECUTE format('DROP INDEX %s.%I', s, old_index);
    END LOOP;
END
$upgrade$;
