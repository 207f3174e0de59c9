-- The empty stand-ins prune swaps in for a slot's partitions: <table>_<slot>_spare for
-- every partition of the queue ring and of the lease ring, built LIKE the ring table with
-- the partition's storage options. Prune then only renames relations under its lock (ADR
-- 0006, ADR 0012): the stand-in takes the partition's place and the partition, emptied
-- later, becomes the stand-in. A stand-in whose shape differs from its partition's (a
-- table step changed the ring tables since it was built) is built again; rows it may
-- still hold are those of a slot already pruned, which the leader would empty anyway.
-- Returns how many stand-ins it built.
CREATE OR REPLACE FUNCTION awa.queue_storage_install_spares(p_schema text) RETURNS int
LANGUAGE plpgsql AS $spares$
DECLARE
    s         text := quote_ident(p_schema);
    v_table   text;
    v_child   regclass;
    v_spare   regclass;
    v_name    text;
    v_options text[];
    v_built   int := 0;
    i         int;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    FOR v_table, i IN SELECT * FROM awa.queue_storage_ring_partitions(p_schema) LOOP
        v_child := to_regclass(format('%s.%I', s, v_table || '_' || i));
        v_name := v_table || '_' || i || '_spare';
        v_spare := to_regclass(format('%s.%I', s, v_name));
        CONTINUE WHEN v_spare IS NOT NULL AND awa.queue_storage_relation_shape(v_spare)
            = awa.queue_storage_relation_shape(v_child);
        -- The ring table first, as prune locks it before it renames a stand-in: a swap
        -- under way ends before this one changes, and none starts meanwhile.
        EXECUTE format('LOCK TABLE %s.%I IN ACCESS SHARE MODE', s, v_table);
        IF v_spare IS NOT NULL THEN
            EXECUTE format('DROP TABLE %s', v_spare);
        END IF;
        SELECT c.reloptions INTO v_options FROM pg_class c WHERE c.oid = v_child;
        EXECUTE format('CREATE TABLE %s.%I (LIKE %s.%I INCLUDING ALL)%s',
            s, v_name, s, v_table,
            CASE WHEN v_options IS NULL THEN ''
                 ELSE format(' WITH (%s)', array_to_string(v_options, ', ')) END);
        v_built := v_built + 1;
    END LOOP;
    RETURN v_built;
END
$spares$;
