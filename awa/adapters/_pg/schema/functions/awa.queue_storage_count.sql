-- Add signed deltas to a queue-storage schema's counters (last locks, in key order).
CREATE OR REPLACE FUNCTION awa.queue_storage_count(
    p_schema text, p_queues text[], p_states awa.job_state[], p_deltas bigint[],
    p_completed_queues text[], p_completed_at timestamptz[], p_completed_deltas bigint[]
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    s text := quote_ident(p_schema);
BEGIN
    EXECUTE format($q$
        INSERT INTO %s.queue_counts AS c (queue, state, bucket, n)
        SELECT q, st, (pg_backend_pid() %% 8)::smallint, sum(d)
        FROM unnest($1, $2, $3) AS i(q, st, d)
        GROUP BY q, st HAVING sum(d) <> 0
        ORDER BY q, st
        ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n$q$, s)
        USING p_queues, p_states, p_deltas;
    EXECUTE format($q$
        INSERT INTO %s.completions AS c (queue, minute, bucket, n)
        SELECT q, date_trunc('minute', fin AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
               (pg_backend_pid() %% 8)::smallint, sum(d)
        FROM unnest($1, $2, $3) AS i(q, fin, d)
        WHERE fin IS NOT NULL
        GROUP BY 1, 2 HAVING sum(d) <> 0
        ORDER BY 1, 2
        ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n$q$, s)
        USING p_completed_queues, p_completed_at, p_completed_deltas;
END
$$;
