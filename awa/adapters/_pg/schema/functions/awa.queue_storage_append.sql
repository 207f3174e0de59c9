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
LANGUAGE plpgsql AS $$
DECLARE
    s        text := quote_ident(p_schema);
    v_shards int;
    v_shard  int;
    v_seq    bigint;
    v_hint   int;
    cols     text := 'job_id, kind, queue, args, priority, attempt, max_attempts, run_at, '
        'heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, '
        'tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, '
        'progress, ordering_key';
    vals     text := '($1).id, ($1).kind, ($1).queue, ($1).args, ($1).priority, '
        '($1).attempt, ($1).max_attempts, ($1).run_at, ($1).heartbeat_at, ($1).deadline_at, '
        '($1).attempted_at, ($1).finalized_at, ($1).created_at, ($1).errors, ($1).metadata, '
        '($1).tags, ($1).unique_key, ($1).unique_states, ($1).callback_id, '
        '($1).callback_timeout_at, ($1).run_lease, ($1).progress, ($1).ordering_key';
BEGIN
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
            EXECUTE format(
                'SELECT shard FROM %s.lanes WHERE queue = $1 AND priority = $2 AND shard < 0
                 ORDER BY shard = $3 DESC, shard DESC
                 LIMIT 1 FOR UPDATE SKIP LOCKED', s)
                INTO v_shard USING p_job.queue, p_job.priority, v_hint;
            IF v_shard IS NOT NULL THEN
                EXECUTE format(
                    'UPDATE %s.lanes AS l SET
                         next_seq = l.next_seq + 1,
                         tail_run_at = CASE
                             WHEN l.tail_run_at IS NULL
                                 OR ($4, $5) > (l.tail_run_at, l.tail_job_id)
                             THEN $4 ELSE l.tail_run_at END,
                         tail_job_id = CASE
                             WHEN l.tail_run_at IS NULL
                                 OR ($4, $5) > (l.tail_run_at, l.tail_job_id)
                             THEN $5 ELSE l.tail_job_id END,
                         disorder_seq = CASE
                             WHEN (l.tail_run_at IS NULL AND l.next_seq > 0)
                                 OR ($4, $5) < (l.tail_run_at, l.tail_job_id)
                             THEN l.next_seq ELSE l.disorder_seq END
                     WHERE l.queue = $1 AND l.priority = $2 AND l.shard = $3
                     RETURNING l.next_seq', s)
                    INTO v_seq USING p_job.queue, p_job.priority, v_shard, p_job.run_at,
                        p_job.id;
            ELSE
                -- Every such lane is held: open the hint lane, else one picked by backend
                -- pid; only when all 8 exist does the job wait for one.
                -- A lane another open transaction is making is invisible here; its
                -- maker holds the lane's advisory lock, so it is passed over, not waited
                -- for (candidates stream in order: only the chosen one is locked).
                EXECUTE format(
                    'SELECT c.shard FROM (
                         SELECT $3 AS shard
                         UNION ALL
                         SELECT -1 - ((g + pg_backend_pid()) %% 8) FROM generate_series(0, 7) g
                     ) c
                     WHERE NOT EXISTS (
                         SELECT 1 FROM %1$s.lanes l
                         WHERE l.queue = $1 AND l.priority = $2 AND l.shard = c.shard)
                       AND pg_try_advisory_xact_lock(hashtextextended(
                           %2$L || $1 || '':'' || $2 || '':'' || c.shard, 0))
                     LIMIT 1', s, 'awa.lane:' || s || ':')
                    INTO v_shard USING p_job.queue, p_job.priority, v_hint;
                v_shard := coalesce(v_shard, -1 - pg_backend_pid() % 8);
            END IF;
        END IF;
        IF v_seq IS NULL THEN
            -- One position at the lane's head; the returned next_seq is one past it.
            EXECUTE format(
                'INSERT INTO %s.lanes AS l
                     (queue, priority, shard, next_seq, tail_run_at, tail_job_id, disorder_seq)
                 VALUES ($1, $2, $3, 1, $4, $5, -1)
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
                 RETURNING next_seq', s)
                INTO v_seq USING p_job.queue, p_job.priority, v_shard, p_job.run_at, p_job.id;
            EXECUTE format(
                'INSERT INTO %s.claim_heads (queue, priority, shard, claim_seq)
                 VALUES ($1, $2, $3, 0) ON CONFLICT DO NOTHING', s)
                USING p_job.queue, p_job.priority, v_shard;
        END IF;
        EXECUTE format(
            'INSERT INTO %1$s.ready_entries (slot, fact_id, shard, lane_seq, %2$s)
             SELECT (SELECT current_slot FROM %1$s.ring_state), nextval(%3$L), $2, $3, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job, v_shard, v_seq - 1;
        PERFORM pg_notify(awa.wake_channel(p_job.queue), '');
    ELSIF p_job.state IN ('scheduled', 'retryable') THEN
        EXECUTE format(
            'INSERT INTO %1$s.deferred_jobs (fact_id, state, %2$s)
             SELECT nextval(%3$L), ($1).state, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job;
    ELSIF p_job.state IN ('completed', 'failed', 'cancelled') THEN
        EXECUTE format(
            'INSERT INTO %1$s.done_entries (slot, fact_id, state, %2$s)
             SELECT (SELECT current_slot FROM %1$s.ring_state), nextval(%3$L), ($1).state, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job;
    ELSE
        RAISE EXCEPTION 'a job in state % cannot be appended to queue storage', p_job.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_state_check';
    END IF;
    -- Counters last, as in the engine's lock order.
    EXECUTE format(
        'INSERT INTO %s.queue_counts AS c (queue, state, bucket, n)
         VALUES ($1, $2, (pg_backend_pid() %% 8)::smallint, 1)
         ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + 1', s)
        USING p_job.queue, p_job.state;
    IF p_job.state = 'completed' AND p_job.finalized_at IS NOT NULL THEN
        EXECUTE format(
            'INSERT INTO %s.completions AS c (queue, minute, bucket, n)
             VALUES ($1, date_trunc(''minute'', $2 AT TIME ZONE ''UTC'') AT TIME ZONE ''UTC'',
                     (pg_backend_pid() %% 8)::smallint, 1)
             ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + 1', s)
            USING p_job.queue, p_job.finalized_at;
    END IF;
END
$$;
