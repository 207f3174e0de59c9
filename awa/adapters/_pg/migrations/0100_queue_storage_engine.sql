-- The queue-storage engine (ADR 0006): an append-only ring of job facts reclaimed by
-- TRUNCATE. awa.install_queue_storage builds the engine's tables in any schema; this
-- migration installs it into schema awa.

CREATE FUNCTION awa.install_queue_storage(
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

    -- Resolution: a ready row, its claim, closure, tombstone and lease give one snapshot;
    -- the job's snapshot is its fact with the highest fact_id; state NULL means "gone".
    EXECUTE format($q$
        CREATE VIEW %1$s.job_facts AS
        SELECT
            r.job_id AS id, r.kind, r.queue, r.args,
            (CASE
                WHEN t.ready_fact IS NOT NULL THEN NULL
                WHEN c.claim_id IS NULL THEN 'available'
                WHEN x.claim_id IS NULL THEN
                    CASE WHEN l.waiting THEN 'waiting_external' ELSE 'running' END
                WHEN x.outcome = 'completed' THEN 'completed'
                ELSE NULL
            END)::awa.job_state AS state,
            r.priority,
            (r.attempt + CASE WHEN c.claim_id IS NULL THEN 0 ELSE 1 END)::smallint AS attempt,
            r.max_attempts, r.run_at,
            CASE WHEN c.claim_id IS NULL THEN r.heartbeat_at
                 WHEN l.job_id IS NULL THEN c.attempted_at ELSE l.heartbeat_at END AS heartbeat_at,
            CASE WHEN c.claim_id IS NULL THEN r.deadline_at ELSE c.deadline_at END AS deadline_at,
            CASE WHEN c.claim_id IS NULL THEN r.attempted_at ELSE c.attempted_at END AS attempted_at,
            CASE WHEN x.outcome = 'completed' THEN x.finalized_at ELSE r.finalized_at END
                AS finalized_at,
            r.created_at, r.errors,
            CASE WHEN l.job_id IS NULL THEN r.metadata ELSE l.metadata END AS metadata,
            r.tags, r.unique_key, r.unique_states,
            CASE WHEN l.job_id IS NULL THEN r.callback_id ELSE l.callback_id END AS callback_id,
            CASE WHEN l.job_id IS NULL THEN r.callback_timeout_at
                 ELSE l.callback_timeout_at END AS callback_timeout_at,
            r.run_lease + CASE WHEN c.claim_id IS NULL THEN 0 ELSE 1 END AS run_lease,
            CASE WHEN x.outcome = 'completed' THEN NULL
                 WHEN l.job_id IS NULL THEN r.progress ELSE l.progress END AS progress,
            r.ordering_key,
            greatest(r.fact_id, c.claim_id, x.fact_id, t.fact_id) AS fact_id,
            r.slot AS ready_slot, r.fact_id AS ready_fact, c.claim_id,
            (c.claim_id IS NOT NULL AND x.claim_id IS NULL) AS open_claim
        FROM %1$s.ready_entries r
        LEFT JOIN %1$s.tombstones t ON t.slot = r.slot AND t.ready_fact = r.fact_id
        LEFT JOIN %1$s.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
        LEFT JOIN %1$s.closures x ON x.slot = c.slot AND x.claim_id = c.claim_id
        LEFT JOIN %1$s.leases l
            ON l.job_id = c.job_id AND l.run_lease = c.run_lease AND x.claim_id IS NULL
        UNION ALL
        SELECT
            d.job_id, d.kind, d.queue, d.args, d.state, d.priority, d.attempt, d.max_attempts,
            d.run_at, d.heartbeat_at, d.deadline_at, d.attempted_at, d.finalized_at,
            d.created_at, d.errors, d.metadata, d.tags, d.unique_key, d.unique_states,
            d.callback_id, d.callback_timeout_at, d.run_lease, d.progress, d.ordering_key,
            d.fact_id, NULL::int, NULL::bigint, NULL::bigint, false
        FROM %1$s.deferred_jobs d
        UNION ALL
        SELECT
            w.job_id, w.kind, w.queue, w.args, w.state, w.priority, w.attempt, w.max_attempts,
            w.run_at, w.heartbeat_at, w.deadline_at, w.attempted_at, w.finalized_at,
            w.created_at, w.errors, w.metadata, w.tags, w.unique_key, w.unique_states,
            w.callback_id, w.callback_timeout_at, w.run_lease, w.progress, w.ordering_key,
            w.fact_id, NULL::int, NULL::bigint, NULL::bigint, false
        FROM %1$s.done_entries w$q$, s);
    EXECUTE format($q$
        CREATE VIEW %1$s.jobs_resolved AS
        SELECT * FROM (
            SELECT DISTINCT ON (id) * FROM %1$s.job_facts ORDER BY id, fact_id DESC
        ) heads
        WHERE state IS NOT NULL$q$, s);
    EXECUTE format($q$
        CREATE VIEW %1$s.terminal_jobs AS
        SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
               heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
               metadata, tags, unique_key, unique_states,
               awa.callback_id_as_uuid(callback_id) AS callback_id, callback_timeout_at,
               NULL::text AS callback_filter, NULL::text AS callback_on_complete,
               NULL::text AS callback_on_fail, NULL::text AS callback_transform,
               run_lease, progress
        FROM %1$s.jobs_resolved
        WHERE state IN ('completed', 'failed', 'cancelled')$q$, s);
END
$install$;

SELECT awa.install_queue_storage('awa', 16, 8, false);
