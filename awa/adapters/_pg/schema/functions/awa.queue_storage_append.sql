-- Append one job body (a canonical row value) to queue storage in schema p_schema, as the
-- engine's own enqueue does: available -> a ready row in the current slot of a lane,
-- scheduled / retryable -> the deferred backlog, terminal -> a done fact. A job without
-- an ordering key takes the first free lane of its (queue, priority) that no other open
-- transaction holds (negative shards, at most 8); one with a key keeps its shard's lane,
-- one with a concurrency key (metadata 'awa:concurrency_key') its key's own lane.
-- The caller owns the unique claim. Lock order follows ADR 0006: lanes, claim heads,
-- then counters.
CREATE OR REPLACE FUNCTION awa.queue_storage_append(p_schema text, p_job awa.canonical_jobs)
RETURNS void
LANGUAGE plpgsql
-- The statements below name the storage tables without their schema: the function sets
-- search_path to p_schema for its own run (restored when it returns, by this clause), so
-- they are planned once per session and schema rather than at every call.
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s        text := quote_ident(p_schema);
    v_shards int;
    v_shard  int;
    v_seq    bigint;
    v_hint   int;
BEGIN
    PERFORM set_config('search_path', 'pg_catalog, ' || s || ', pg_temp', true);
    IF p_job.state = 'available' THEN
        SELECT enqueue_shards INTO v_shards FROM awa.queue_meta WHERE queue = p_job.queue;
        v_shards := coalesce(v_shards, 1);
        IF p_job.ordering_key IS NOT NULL THEN
            -- An ordering key always goes to its shard's lane, waiting for it if held.
            v_shard := awa.ordering_key_shard(p_job.ordering_key, v_shards);
        ELSIF p_job.metadata ? 'awa:concurrency_key' THEN
            -- A concurrency key's lane is its own (awa.domain.flow_control.keyed_shard).
            v_shard := 1073741824 + awa.ordering_key_shard(
                convert_to(p_job.metadata ->> 'awa:concurrency_key', 'UTF8'), 1073741824);
        ELSE
            -- The first lane without an ordering key (negative shard) of (queue,
            -- priority) that no open transaction holds, the hint first.
            v_hint := -1 - (p_job.id % least(v_shards, 8))::int;
            SELECT l.shard INTO v_shard FROM lanes l
            WHERE l.queue = p_job.queue AND l.priority = p_job.priority AND l.shard < 0
            ORDER BY l.shard = v_hint DESC, l.shard DESC
            LIMIT 1 FOR UPDATE SKIP LOCKED;
            IF v_shard IS NOT NULL THEN
                UPDATE lanes AS l SET
                    next_seq = l.next_seq + 1,
                    tail_run_at = CASE
                        WHEN l.tail_run_at IS NULL
                            OR (p_job.run_at, p_job.id) > (l.tail_run_at, l.tail_job_id)
                        THEN p_job.run_at ELSE l.tail_run_at END,
                    tail_job_id = CASE
                        WHEN l.tail_run_at IS NULL
                            OR (p_job.run_at, p_job.id) > (l.tail_run_at, l.tail_job_id)
                        THEN p_job.id ELSE l.tail_job_id END,
                    disorder_seq = CASE
                        WHEN (l.tail_run_at IS NULL AND l.next_seq > 0)
                            OR (p_job.run_at, p_job.id) < (l.tail_run_at, l.tail_job_id)
                        THEN l.next_seq ELSE l.disorder_seq END
                WHERE l.queue = p_job.queue AND l.priority = p_job.priority AND l.shard = v_shard
                RETURNING l.next_seq INTO v_seq;
            ELSE
                -- Every such lane is held: open the hint lane, else one picked by backend
                -- pid; only when all 8 exist does the job wait for one.
                -- A lane another open transaction is making is invisible here; its
                -- maker holds the lane's advisory lock, so it is passed over, not waited
                -- for (candidates stream in order: only the chosen one is locked).
                SELECT c.shard INTO v_shard FROM (
                    SELECT v_hint AS shard
                    UNION ALL
                    SELECT -1 - ((g + pg_backend_pid()) % 8) FROM generate_series(0, 7) g
                ) c
                WHERE NOT EXISTS (
                    SELECT 1 FROM lanes l
                    WHERE l.queue = p_job.queue AND l.priority = p_job.priority
                      AND l.shard = c.shard)
                  AND pg_try_advisory_xact_lock(hashtextextended(
                      'awa.lane:' || s || ':' || p_job.queue || ':' || p_job.priority || ':'
                      || c.shard, 0))
                LIMIT 1;
                v_shard := coalesce(v_shard, -1 - pg_backend_pid() % 8);
            END IF;
        END IF;
        IF v_seq IS NULL THEN
            -- One position at the lane's head; the returned next_seq is one past it.
            INSERT INTO lanes AS l
                (queue, priority, shard, next_seq, tail_run_at, tail_job_id, disorder_seq)
            VALUES (p_job.queue, p_job.priority, v_shard, 1, p_job.run_at, p_job.id, -1)
            ON CONFLICT (queue, priority, shard) DO UPDATE SET
                next_seq = l.next_seq + 1,
                tail_run_at = CASE
                    WHEN l.tail_run_at IS NULL
                        OR (EXCLUDED.tail_run_at, EXCLUDED.tail_job_id)
                           > (l.tail_run_at, l.tail_job_id)
                    THEN EXCLUDED.tail_run_at ELSE l.tail_run_at END,
                tail_job_id = CASE
                    WHEN l.tail_run_at IS NULL
                        OR (EXCLUDED.tail_run_at, EXCLUDED.tail_job_id)
                           > (l.tail_run_at, l.tail_job_id)
                    THEN EXCLUDED.tail_job_id ELSE l.tail_job_id END,
                disorder_seq = CASE
                    WHEN (l.tail_run_at IS NULL AND l.next_seq > 0)
                        OR (EXCLUDED.tail_run_at, EXCLUDED.tail_job_id)
                           < (l.tail_run_at, l.tail_job_id)
                    THEN l.next_seq ELSE l.disorder_seq END
            RETURNING l.next_seq INTO v_seq;
            INSERT INTO claim_heads (queue, priority, shard, claim_seq)
            VALUES (p_job.queue, p_job.priority, v_shard, 0) ON CONFLICT DO NOTHING;
        END IF;
        INSERT INTO ready_entries (slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key)
        SELECT (SELECT current_slot FROM ring_state), nextval('fact_seq'), v_shard, v_seq - 1,
            p_job.id, p_job.kind, p_job.queue, p_job.args, p_job.priority, p_job.attempt, p_job.max_attempts, p_job.run_at, p_job.heartbeat_at, p_job.deadline_at, p_job.attempted_at, p_job.finalized_at, p_job.created_at, p_job.errors, p_job.metadata, p_job.tags, p_job.unique_key, p_job.unique_states, p_job.callback_id, p_job.callback_timeout_at, p_job.run_lease, p_job.progress, p_job.ordering_key;
        PERFORM pg_notify(awa.wake_channel(p_job.queue), '');
    ELSIF p_job.state IN ('scheduled', 'retryable') THEN
        INSERT INTO deferred_jobs (fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key)
        SELECT nextval('fact_seq'), p_job.state, p_job.id, p_job.kind, p_job.queue, p_job.args, p_job.priority, p_job.attempt, p_job.max_attempts, p_job.run_at, p_job.heartbeat_at, p_job.deadline_at, p_job.attempted_at, p_job.finalized_at, p_job.created_at, p_job.errors, p_job.metadata, p_job.tags, p_job.unique_key, p_job.unique_states, p_job.callback_id, p_job.callback_timeout_at, p_job.run_lease, p_job.progress, p_job.ordering_key;
    ELSIF p_job.state IN ('completed', 'failed', 'cancelled') THEN
        INSERT INTO done_entries (slot, fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key)
        SELECT (SELECT current_slot FROM ring_state), nextval('fact_seq'), p_job.state,
            p_job.id, p_job.kind, p_job.queue, p_job.args, p_job.priority, p_job.attempt, p_job.max_attempts, p_job.run_at, p_job.heartbeat_at, p_job.deadline_at, p_job.attempted_at, p_job.finalized_at, p_job.created_at, p_job.errors, p_job.metadata, p_job.tags, p_job.unique_key, p_job.unique_states, p_job.callback_id, p_job.callback_timeout_at, p_job.run_lease, p_job.progress, p_job.ordering_key;
    ELSE
        RAISE EXCEPTION 'a job in state % cannot be appended to queue storage', p_job.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_state_check';
    END IF;
    -- Counters last, as in the engine's lock order.
    INSERT INTO queue_counts AS c (queue, state, bucket, n)
    VALUES (p_job.queue, p_job.state, (pg_backend_pid() % 8)::smallint, 1)
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + 1;
    IF p_job.state = 'completed' AND p_job.finalized_at IS NOT NULL THEN
        INSERT INTO completions AS c (queue, minute, bucket, n)
        VALUES (p_job.queue,
                date_trunc('minute', p_job.finalized_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                (pg_backend_pid() % 8)::smallint, 1)
        ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + 1;
    END IF;
END
$$;
