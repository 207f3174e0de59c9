-- Queue storage (ADR 0006): index the "is this ready row claimed?" probe by its full key.
--
-- Every probe of claims by ready row names the slot and the ready fact. With only an index
-- on ready_fact the planner ANDed it with the (slot, claim_id) primary key, scanning the
-- whole slot's key for every probe, so claims and cursor advances slowed down as a slot
-- filled. claims (slot, ready_fact) answers the probe with one index descent and replaces
-- the ready_fact index (no statement probes by ready fact alone).

CREATE FUNCTION awa.queue_storage_upgrade_claim_probe(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    old_index text;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS claims_ready_probe_idx ON %s.claims (slot, ready_fact)', s);
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

CREATE OR REPLACE FUNCTION awa.install_queue_storage(
    p_schema text DEFAULT 'awa',
    p_queue_slot_count int DEFAULT 16,
    p_lease_slot_count int DEFAULT 8,
    p_reset boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql AS $install$
BEGIN
    PERFORM awa.install_queue_storage_tables(
        p_schema, p_queue_slot_count, p_lease_slot_count, p_reset);
    PERFORM awa.queue_storage_upgrade(p_schema);
    PERFORM awa.queue_storage_upgrade_claim_probe(p_schema);
END
$install$;

SELECT awa.queue_storage_upgrade_claim_probe(n.nspname)
FROM pg_namespace n
WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') IS NOT NULL
ORDER BY n.nspname;
