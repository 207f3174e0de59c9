-- Step of awa.install_queue_storage: leases become a ring of lease_slot_count LIST
-- partitions on lease_slot, reclaimed by TRUNCATE like the queue ring; rows that exist
-- move into the current lease slot.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_lease_ring(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s         text := quote_ident(p_schema);
    v_count   int;
    v_current int;
    i         int;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));

    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = format('%s.ring_state', s)::regclass
          AND attname = 'current_lease_slot'
    ) THEN
        EXECUTE format($q$
            ALTER TABLE %1$s.ring_state
                ADD COLUMN current_lease_slot int NOT NULL DEFAULT 0,
                ADD COLUMN lease_generation bigint NOT NULL DEFAULT 0,
                ADD COLUMN lease_rotated_at timestamptz$q$, s);
    END IF;

    IF (SELECT relkind FROM pg_class WHERE oid = format('%s.leases', s)::regclass) = 'p' THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT lease_slot_count, current_lease_slot FROM %s.ring_state', s)
        INTO v_count, v_current;

    -- Rebuild: the plain table steps aside, the ring takes its name and its rows, and the
    -- plain table goes (the resolution views are built after every table step).
    EXECUTE format('LOCK TABLE %s.leases IN ACCESS EXCLUSIVE MODE', s);
    EXECUTE format('ALTER TABLE %s.leases RENAME TO leases_plain', s);
    EXECUTE format($q$
        CREATE TABLE %1$s.leases (
            lease_slot          int NOT NULL,
            job_id              bigint NOT NULL,
            run_lease           bigint NOT NULL,
            claim_slot          int NOT NULL,
            claim_id            bigint NOT NULL,
            queue               text NOT NULL,
            waiting             boolean NOT NULL DEFAULT false,
            heartbeat_at        timestamptz NOT NULL,
            progress            jsonb,
            metadata            jsonb NOT NULL,
            callback_id         text,
            callback_timeout_at timestamptz,
            deadline_at         timestamptz
        ) PARTITION BY LIST (lease_slot)$q$, s);
    FOR i IN 0 .. v_count - 1 LOOP
        -- Room on the page keeps a heartbeat's in-place update HOT.
        EXECUTE format('CREATE TABLE %1$s.%2$I PARTITION OF %1$s.leases FOR VALUES IN (%3$s) '
                       'WITH (fillfactor = 70)', s, 'leases_' || i, i);
    END LOOP;
    EXECUTE format($q$
        INSERT INTO %1$s.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue,
            waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
            deadline_at)
        SELECT $1, job_id, run_lease, claim_slot, claim_id, queue, waiting, heartbeat_at,
            progress, metadata, callback_id, callback_timeout_at, deadline_at
        FROM %1$s.leases_plain$q$, s) USING v_current;

    EXECUTE format('DROP TABLE %s.leases_plain', s);
    -- (job_id, run_lease) first: every lookup names the attempt, never the slot.
    EXECUTE format('ALTER TABLE %s.leases ADD PRIMARY KEY (job_id, run_lease, lease_slot)', s);
    EXECUTE format('CREATE INDEX ON %s.leases (callback_id) WHERE callback_id IS NOT NULL', s);
END
$upgrade$;
