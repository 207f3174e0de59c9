-- Step of awa.install_queue_storage: cheap claims (lanes' claim order key and disorder
-- mark), exact recent-completion counters, and mutable deadlines of live attempts.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));

    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = format('%s.lanes', s)::regclass AND attname = 'disorder_seq'
    ) THEN
        EXECUTE format($q$
            ALTER TABLE %1$s.lanes
                ADD COLUMN tail_run_at timestamptz,
                ADD COLUMN tail_job_id bigint,
                ADD COLUMN disorder_seq bigint NOT NULL DEFAULT -1$q$, s);
        -- Lanes written before the order key existed may hold rows in any order.
        EXECUTE format('UPDATE %s.lanes SET disorder_seq = next_seq - 1', s);
    END IF;

    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = format('%s.leases', s)::regclass AND attname = 'deadline_at'
    ) THEN
        EXECUTE format('ALTER TABLE %s.leases ADD COLUMN deadline_at timestamptz', s);
        EXECUTE format($q$
            UPDATE %1$s.leases l SET deadline_at = c.deadline_at
            FROM %1$s.claims c WHERE c.slot = l.claim_slot AND c.claim_id = l.claim_id$q$, s);
    END IF;

    IF to_regclass(format('%s.completions', s)) IS NULL THEN
        EXECUTE format($q$
            CREATE TABLE %1$s.completions (
                queue  text NOT NULL,
                minute timestamptz NOT NULL,
                bucket smallint NOT NULL,
                n      bigint NOT NULL,
                PRIMARY KEY (queue, minute, bucket)
            ) WITH (fillfactor = 50)$q$, s);
    END IF;

    -- Read the catalog first: CREATE INDEX takes the table's SHARE lock even when the
    -- index exists, and would queue behind every open completion.
    IF to_regclass(format('%s.done_entries_completed_idx', s)) IS NULL THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS done_entries_completed_idx ON %s.done_entries '
            '(finalized_at) WHERE state = ''completed''', s);
    END IF;
END
$upgrade$;
