-- The partitions of both rings of an installed schema, one row per (ring table, slot):
-- the five queue-ring tables for every queue slot and `leases` for every lease slot, as
-- ring_state sizes them. The install's steps that treat every partition alike (the
-- stand-ins, the storage options) walk this list.
CREATE OR REPLACE FUNCTION awa.queue_storage_ring_partitions(p_schema text)
RETURNS TABLE (ring_table text, slot int)
LANGUAGE plpgsql STABLE AS $partitions$
DECLARE
    v_slots  int;
    v_leases int;
BEGIN
    EXECUTE format('SELECT slot_count, lease_slot_count FROM %s.ring_state',
                   quote_ident(p_schema))
        INTO v_slots, v_leases;
    RETURN QUERY
        SELECT t.name, g.i
        FROM unnest(ARRAY['ready_entries', 'claims', 'closures', 'tombstones',
                          'done_entries', 'leases']) WITH ORDINALITY AS t(name, n)
        CROSS JOIN LATERAL generate_series(
            0, CASE WHEN t.name = 'leases' THEN v_leases ELSE v_slots END - 1) AS g(i)
        ORDER BY t.n, g.i;
END
$partitions$;
