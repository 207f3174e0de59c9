-- Install the queue-storage engine (ADR 0006) into p_schema, or bring an installed one up
-- to date; with p_reset, rebuild it empty (refused for schema awa). Idempotent: every step
-- checks what it changes, and migrate calls this again for every installed schema
-- (awa.queue_storage_refresh) whenever a schema file changed, so the steps below are the
-- one description of what an installed schema holds (ADR 0012).
--
-- The steps, in order: the tables as the engine first built them, then each later change
-- to them, then the resolution views in their current definitions, then the empty
-- stand-ins prune swaps in (everything the engine needs exists once this returns). A new
-- change to the engine's tables is a new idempotent step function called before the views.
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
    PERFORM awa.queue_storage_upgrade_retire_mark(p_schema);
    PERFORM awa.queue_storage_upgrade_run_at_bounds(p_schema);
    PERFORM awa.queue_storage_upgrade_ring_autovacuum(p_schema);
    PERFORM awa.queue_storage_install_views(p_schema);
    PERFORM awa.queue_storage_install_spares(p_schema);
END
$install$;
