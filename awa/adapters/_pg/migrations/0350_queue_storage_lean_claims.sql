-- Queue storage (ADR 0006): fewer index entries per claim.
--
-- Every claim wrote six index entries besides its heap row, and each is a WAL record of
-- its own. Three of them served only lookups that do not need them:
--   * claims (attempted_at) and claims (deadline_at) WHERE deadline_at IS NOT NULL were
--     read only by the rescue sweeps (every 30 s). Their ranges ("attempted before the
--     staleness cutoff", "deadline passed") hold nearly every claim in the ring except the
--     newest ones, so the sweeps visited most of the ring through them anyway; a
--     sequential scan of the claims reads the same rows in order.
--   * claims (job_id, run_lease) served the completion and heartbeat lookups by job id.
--     A claim's job and attempt are those of its ready row plus one (run_lease + 1), so the
--     lookup goes through ready_entries (job_id) and the claim probe (slot, ready_fact).

CREATE FUNCTION awa.queue_storage_upgrade_lean_claims(p_schema text) RETURNS void
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
    -- Prune swaps in empty stand-ins built ahead (<table>_<slot>_spare, LIKE the ring
    -- table INCLUDING ALL). Any built before this change carry the old indexes: drop them,
    -- prune builds new ones. Every later change to the ring tables' shape does the same.
    FOR old_index IN
        SELECT c.relname
        FROM pg_class c
        WHERE c.relnamespace = p_schema::regnamespace
          AND c.relkind = 'r'
          AND c.relname ~ '^(ready_entries|claims|closures|tombstones|done_entries|leases)_[0-9]+_spare$'
    LOOP
        EXECUTE format('DROP TABLE %s.%I', s, old_index);
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
    IF p_schema = 'awa' AND (p_queue_slot_count <> 16 OR p_lease_slot_count <> 8) THEN
        RAISE EXCEPTION 'the default schema awa keeps 16 queue slots and 8 lease slots; '
            'install queue storage into another schema for other sizes'
            USING ERRCODE = '22023';
    END IF;
    PERFORM awa.install_queue_storage_tables(
        p_schema, p_queue_slot_count, p_lease_slot_count, p_reset);
    PERFORM awa.queue_storage_upgrade(p_schema);
    PERFORM awa.queue_storage_upgrade_claim_probe(p_schema);
    PERFORM awa.queue_storage_upgrade_lease_ring(p_schema);
    PERFORM awa.queue_storage_upgrade_control_fillfactor(p_schema);
    PERFORM awa.queue_storage_upgrade_lean_claims(p_schema);
END
$install$;

SELECT awa.queue_storage_upgrade_lean_claims(n.nspname)
FROM pg_namespace n
WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') IS NOT NULL
ORDER BY n.nspname;
