-- Step of awa.install_queue_storage: claims (slot, ready_fact) answers the "is this ready
-- row claimed?" probe with one index descent and replaces the ready_fact index.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_claim_probe(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    old_index text;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    -- Only when missing: CREATE INDEX locks the table even when the index exists.
    IF to_regclass(format('%s.claims_ready_probe_idx', s)) IS NULL THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS claims_ready_probe_idx ON %s.claims (slot, ready_fact)', s);
    END IF;
    FOR old_index IN
        SELECT i.relname
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
        WHERE x.indrelid = format('%s.claims', s)::regclass
          AND x.indnatts = 1 AND a.attname = 'ready_fact'
    LOOP
        EXECUTE format('DROP INDEX %s.%I', s, old_index);
    END LOOP;
END
$upgrade$;
