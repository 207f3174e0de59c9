-- Bring every installed queue-storage schema to the current awa.install_queue_storage
-- (its own ring sizes kept). migrate runs this after it applied changed schema files, so a
-- change to a table step, the resolution views or the stand-ins reaches every schema
-- (ADR 0012). Returns how many schemas it visited. The schemas are found in the catalog,
-- which any role may read: to_regclass on each schema name would raise on the schemas a
-- role without superuser may not use (pg_toast), and a queue-storage schema it may not
-- use fails below, naming it.
CREATE OR REPLACE FUNCTION awa.queue_storage_refresh() RETURNS int
LANGUAGE plpgsql AS $refresh$
DECLARE
    v_schema      text;
    v_slots       int;
    v_lease_slots int;
    v_count       int := 0;
BEGIN
    FOR v_schema IN
        SELECT n.nspname
        FROM pg_catalog.pg_namespace n
        WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                      WHERE c.relnamespace = n.oid AND c.relname = 'ring_state'
                        AND c.relkind IN ('r', 'p'))
        ORDER BY n.nspname
    LOOP
        EXECUTE format('SELECT slot_count, lease_slot_count FROM %s.ring_state',
                       quote_ident(v_schema))
            INTO v_slots, v_lease_slots;
        PERFORM awa.install_queue_storage(v_schema, v_slots, v_lease_slots, false);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$refresh$;
