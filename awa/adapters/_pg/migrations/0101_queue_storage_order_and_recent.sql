-- Queue storage, second step (ADR 0006): cheap claims, exact recent-completion counts and
-- mutable deadlines of live attempts.
--
-- * lanes.tail_run_at / tail_job_id / disorder_seq: the claim order key of the newest row
--   appended to a lane, and the highest lane position appended out of (run_at, job id)
--   order. A claimer walks a lane in lane_seq order (an index range) unless its window
--   still holds such a row, in which case it sorts the window.
-- * completions: signed counters of completed jobs per (queue, UTC minute of
--   finalized_at), so "completed in the last hour" is a sum of at most 60 buckets plus an
--   exact look at the partial boundary minute.
-- * leases.deadline_at: the deadline of a materialised attempt, so an operator can move it.
--
-- The table builder of 0100 keeps its body under a new name; awa.install_queue_storage
-- now builds and then upgrades, and every schema installed so far is upgraded here.

ALTER FUNCTION awa.install_queue_storage(text, int, int, boolean)
    RENAME TO install_queue_storage_tables;

CREATE FUNCTION awa.queue_storage_upgrade(p_schema text) RETURNS void
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
        EXECUTE format($q$
            INSERT INTO %1$s.completions (queue, minute, bucket, n)
            SELECT queue, date_trunc('minute', finalized_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                   0, count(*)
            FROM %1$s.jobs_resolved WHERE state = 'completed'
            GROUP BY 1, 2$q$, s);
    END IF;

    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS done_entries_completed_idx ON %s.done_entries (finalized_at) '
        'WHERE state = ''completed''', s);
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS claims_attempted_idx ON %s.claims (attempted_at)', s);

    -- Same columns as before; a materialised lease now also carries the deadline.
    EXECUTE format($q$
        CREATE OR REPLACE VIEW %1$s.job_facts AS
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
            CASE WHEN c.claim_id IS NULL THEN r.deadline_at
                 WHEN l.job_id IS NULL THEN c.deadline_at ELSE l.deadline_at END AS deadline_at,
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
END
$upgrade$;

CREATE FUNCTION awa.install_queue_storage(
    p_schema text DEFAULT 'awa',
    p_queue_slot_count int DEFAULT 16,
    p_lease_slot_count int DEFAULT 8,
    p_reset boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql AS $install$
BEGIN
    PERFORM awa.install_queue_storage_tables(
        p_schema, p_queue_slot_count, p_lease_slot_count, p_reset);
    PERFORM awa.queue_storage_upgrade(p_schema);
END
$install$;

SELECT awa.queue_storage_upgrade(n.nspname)
FROM pg_namespace n
WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') IS NOT NULL
ORDER BY n.nspname;
