-- First step of awa.install_queue_storage: the engine's tables as it first built them
-- (the later steps change them); nothing when p_schema is installed, unless p_reset.
CREATE OR REPLACE FUNCTION awa.install_queue_storage_tables(
    p_schema text DEFAULT 'awa',
    p_queue_slot_count int DEFAULT 16,
    p_lease_slot_count int DEFAULT 8,
    p_reset boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql AS $install$
DECLARE
    s text := quote_ident(p_schema);
    body text := $cols$
        job_id              bigint NOT NULL,
        kind                text NOT NULL,
        queue               text NOT NULL,
        args                jsonb NOT NULL,
        priority            smallint NOT NULL,
        attempt             smallint NOT NULL,
        max_attempts        smallint NOT NULL,
        run_at              timestamptz NOT NULL,
        heartbeat_at        timestamptz,
        deadline_at         timestamptz,
        attempted_at        timestamptz,
        finalized_at        timestamptz,
        created_at          timestamptz NOT NULL,
        errors              jsonb[] NOT NULL,
        metadata            jsonb NOT NULL,
        tags                text[] NOT NULL,
        unique_key          bytea,
        unique_states       bit(8),
        callback_id         text,
        callback_timeout_at timestamptz,
        run_lease           bigint NOT NULL,
        progress            jsonb,
        ordering_key        bytea
    $cols$;
    ring_tables text[] := ARRAY['ready_entries', 'claims', 'closures', 'tombstones', 'done_entries'];
    t text;
    i int;
BEGIN
    IF p_schema IS NULL OR p_schema = '' THEN
        RAISE EXCEPTION 'queue storage schema must be a non-empty name';
    END IF;
    IF p_queue_slot_count NOT BETWEEN 2 AND 256 THEN
        RAISE EXCEPTION 'queue_slot_count must be between 2 and 256, got %', p_queue_slot_count;
    END IF;
    IF p_lease_slot_count NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'lease_slot_count must be between 1 and 256, got %', p_lease_slot_count;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    IF p_reset THEN
        IF p_schema = 'awa' THEN
            RAISE EXCEPTION 'refusing to reset queue storage in schema awa';
        END IF;
        EXECUTE format('DROP SCHEMA IF EXISTS %s CASCADE', s);
    END IF;
    IF to_regclass(format('%s.ring_state', s)) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE SCHEMA IF NOT EXISTS %s', s);

    -- One uncached sequence orders every fact; caching would let two sessions hand out
    -- out-of-order ids to causally ordered facts of one job.
    EXECUTE format('CREATE SEQUENCE %s.fact_seq AS bigint CACHE 1', s);

    EXECUTE format($q$
        CREATE TABLE %1$s.ring_state (
            singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            slot_count         int NOT NULL,
            current_slot       int NOT NULL DEFAULT 0,
            generation         bigint NOT NULL DEFAULT 0,
            lease_slot_count   int NOT NULL,
            rotated_at         timestamptz
        ) WITH (fillfactor = 50)$q$, s);
    EXECUTE format('INSERT INTO %s.ring_state (slot_count, lease_slot_count) VALUES (%s, %s)',
        s, p_queue_slot_count, p_lease_slot_count);

    -- Lane heads. Updated in place without touching an indexed column (HOT), so their
    -- dead versions are pruned on page access; fillfactor leaves room for that.
    EXECUTE format($q$
        CREATE TABLE %1$s.lanes (
            queue    text NOT NULL,
            priority smallint NOT NULL,
            shard    int NOT NULL,
            next_seq bigint NOT NULL,
            PRIMARY KEY (queue, priority, shard)
        ) WITH (fillfactor = 50)$q$, s);
    EXECUTE format($q$
        CREATE TABLE %1$s.claim_heads (
            queue     text NOT NULL,
            priority  smallint NOT NULL,
            shard     int NOT NULL,
            claim_seq bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (queue, priority, shard)
        ) WITH (fillfactor = 50)$q$, s);
    EXECUTE format($q$
        CREATE TABLE %1$s.queue_counts (
            queue  text NOT NULL,
            state  awa.job_state NOT NULL,
            bucket smallint NOT NULL,
            n      bigint NOT NULL,
            PRIMARY KEY (queue, state, bucket)
        ) WITH (fillfactor = 50)$q$, s);
    EXECUTE format($q$
        CREATE TABLE %1$s.queue_prune_stats (
            queue            text PRIMARY KEY,
            pruned_completed bigint NOT NULL DEFAULT 0,
            pruned_cancelled bigint NOT NULL DEFAULT 0,
            pruned_failed    bigint NOT NULL DEFAULT 0
        )$q$, s);

    -- The queue ring: every table LIST-partitioned by slot.
    EXECUTE format($q$
        CREATE TABLE %1$s.ready_entries (
            slot     int NOT NULL,
            fact_id  bigint NOT NULL,
            shard    int NOT NULL,
            lane_seq bigint NOT NULL,
            %2$s,
            PRIMARY KEY (slot, fact_id)
        ) PARTITION BY LIST (slot)$q$, s, body);
    EXECUTE format($q$
        CREATE TABLE %1$s.claims (
            slot         int NOT NULL,
            claim_id     bigint NOT NULL,
            ready_fact   bigint NOT NULL,
            job_id       bigint NOT NULL,
            run_lease    bigint NOT NULL,
            queue        text NOT NULL,
            attempted_at timestamptz NOT NULL,
            deadline_at  timestamptz,
            PRIMARY KEY (slot, claim_id)
        ) PARTITION BY LIST (slot)$q$, s);
    EXECUTE format($q$
        CREATE TABLE %1$s.closures (
            slot         int NOT NULL,
            claim_id     bigint NOT NULL,
            fact_id      bigint NOT NULL,
            queue        text NOT NULL,
            outcome      text NOT NULL CHECK (outcome IN ('completed', 'moved')),
            finalized_at timestamptz NOT NULL,
            PRIMARY KEY (slot, claim_id)
        ) PARTITION BY LIST (slot)$q$, s);
    EXECUTE format($q$
        CREATE TABLE %1$s.tombstones (
            slot       int NOT NULL,
            ready_fact bigint NOT NULL,
            fact_id    bigint NOT NULL,
            PRIMARY KEY (slot, ready_fact)
        ) PARTITION BY LIST (slot)$q$, s);
    EXECUTE format($q$
        CREATE TABLE %1$s.done_entries (
            slot    int NOT NULL,
            fact_id bigint NOT NULL,
            state   awa.job_state,
            %2$s,
            PRIMARY KEY (slot, fact_id)
        ) PARTITION BY LIST (slot)$q$, s,
        -- A deletion marker (state IS NULL) carries only the job id.
        regexp_replace(body, ' NOT NULL', '', 'g'));

    FOR i IN 0 .. p_queue_slot_count - 1 LOOP
        FOREACH t IN ARRAY ring_tables LOOP
            EXECUTE format('CREATE TABLE %1$s.%2$I PARTITION OF %1$s.%3$I FOR VALUES IN (%4$s)',
                s, t || '_' || i, t, i);
        END LOOP;
    END LOOP;

    EXECUTE format('CREATE INDEX ON %s.ready_entries (queue, priority, shard, lane_seq)', s);
    EXECUTE format('CREATE INDEX ON %s.ready_entries (job_id)', s);
    EXECUTE format('CREATE INDEX ON %s.claims (ready_fact)', s);
    EXECUTE format('CREATE INDEX ON %s.claims (job_id, run_lease)', s);
    EXECUTE format('CREATE INDEX ON %s.claims (deadline_at) WHERE deadline_at IS NOT NULL', s);
    EXECUTE format('CREATE INDEX ON %s.closures (finalized_at) WHERE outcome = ''completed''', s);
    EXECUTE format('CREATE INDEX ON %s.done_entries (job_id)', s);

    -- Mutable per-attempt state, materialised only by heartbeat, progress or callbacks.
    EXECUTE format($q$
        CREATE TABLE %1$s.leases (
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
            PRIMARY KEY (job_id, run_lease)
        ) WITH (fillfactor = 70)$q$, s);
    EXECUTE format('CREATE INDEX ON %s.leases (callback_id) WHERE callback_id IS NOT NULL', s);

    -- The deferred backlog (scheduled / retryable): full bodies, deleted by promotion.
    EXECUTE format($q$
        CREATE TABLE %1$s.deferred_jobs (
            fact_id bigint NOT NULL,
            state   awa.job_state NOT NULL CHECK (state IN ('scheduled', 'retryable')),
            %2$s,
            PRIMARY KEY (job_id)
        )$q$, s, body);
    EXECUTE format('CREATE INDEX ON %s.deferred_jobs (run_at, job_id)', s);
    EXECUTE format('CREATE INDEX ON %s.deferred_jobs (queue, state)', s);

    -- Schema awa shares the canonical dead-letter table; other schemas get their own.
    EXECUTE format('CREATE TABLE IF NOT EXISTS %s.dlq_entries (LIKE awa.dlq_entries INCLUDING ALL)', s);
END
$install$;
