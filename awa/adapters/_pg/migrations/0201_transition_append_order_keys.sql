-- The transition's SQL append into queue storage keeps the lane order keys and completion
-- counters added by migration 0101, exactly as the engine's own enqueue does: the lane's
-- tail (run_at, job id) moves forward, a row appended behind the tail marks the lane
-- disordered at its position (claimers then sort that window), and a job inserted as
-- completed is counted in its minute bucket.

CREATE OR REPLACE FUNCTION awa.queue_storage_append(p_schema text, p_job awa.canonical_jobs)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    s        text := quote_ident(p_schema);
    v_shards int;
    v_shard  int;
    v_seq    bigint;
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
        IF v_shards <= 1 THEN
            v_shard := 0;
        ELSIF p_job.ordering_key IS NOT NULL THEN
            v_shard := awa.ordering_key_shard(p_job.ordering_key, v_shards);
        ELSE
            v_shard := (p_job.id % v_shards)::int;
        END IF;
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
        EXECUTE format(
            'INSERT INTO %1$s.ready_entries (slot, fact_id, shard, lane_seq, %2$s)
             SELECT (SELECT current_slot FROM %1$s.ring_state), nextval(%3$L), $2, $3, %4$s',
            s, cols, s || '.fact_seq', vals)
            USING p_job, v_shard, v_seq - 1;
        PERFORM pg_notify('awa:' || p_job.queue, '');
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
