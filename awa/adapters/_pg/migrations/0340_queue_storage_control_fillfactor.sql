-- Queue storage (ADR 0006): the control rows (lane heads, claim cursors, counters, ring
-- state) are updated on every enqueue, claim and completion. Their tables are tiny, so
-- a fill factor of 10 costs nothing in space and makes every access prune the page's
-- dead versions: after a drain they hold a few dozen instead of up to a page each.
-- The default schema `awa` keeps the ring sizes the migrations gave it (SQLSTATE 22023
-- for any other); another schema takes any size.

CREATE FUNCTION awa.queue_storage_upgrade_control_fillfactor(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['lanes', 'claim_heads', 'queue_counts', 'completions',
                             'ring_state', 'queue_prune_stats']
    LOOP
        IF to_regclass(s || '.' || quote_ident(t)) IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %s.%I SET (fillfactor = 10)', s, t);
        END IF;
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
END
$install$;

SELECT awa.queue_storage_upgrade_control_fillfactor(n.nspname)
FROM pg_namespace n
WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') IS NOT NULL
ORDER BY n.nspname;
