-- Step of awa.install_queue_storage: autovacuum leaves the ring's partitions and their
-- stand-ins alone. Prune reclaims a whole slot one ring turn after it was written (the
-- queue ring's rows are only appended; a lease row, updated in place, lives one turn of
-- the lease ring), so VACUUM has nothing to do there that the swap does not do sooner.
-- Each ANALYZE or VACUUM of a
-- partition also rewrote its statistics in pg_class, which made every connection plan
-- the claim, the completion and the enqueue again on its next use: every partition written
-- since autovacuum last came round, each one more round of planning in every worker.
-- Anti-wraparound vacuums still run (the setting does not stop them), and a stand-in is
-- emptied by TRUNCATE before it takes a slot again, which resets its frozen xid.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_ring_autovacuum(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s        text := quote_ident(p_schema);
    v_table  text;
    v_rel    regclass;
    v_suffix text;
    i        int;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    FOR v_table, i IN SELECT * FROM awa.queue_storage_ring_partitions(p_schema) LOOP
        FOREACH v_suffix IN ARRAY ARRAY['', '_spare'] LOOP
            v_rel := to_regclass(format('%s.%I', s, v_table || '_' || i || v_suffix));
            -- Only where it is not set yet: a repeated install changes no catalog row.
            IF v_rel IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM pg_class
                WHERE oid = v_rel AND 'autovacuum_enabled=false' = ANY(reloptions)
            ) THEN
                EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', v_rel);
            END IF;
        END LOOP;
    END LOOP;
END
$upgrade$;
