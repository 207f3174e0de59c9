-- requires: awa.ordering_key_shard, awa.runtime_is_live
-- Why an available job is not being claimed (ADR 0029, "Visibility"): the SQL twin of
-- awa.domain.held_back.held_back_reason, read from what the claims keep. NULL when the job
-- is unknown, not available, or no limit holds it back; else the object the CLI and the
-- admin API show as held_back: limit ('max_running_per_key', 'global_rate_limit' or
-- 'global_rate_limit_per_key'), key, running, max_running, next_admission, reason.
-- The limits in force are the queue's overrides (awa.queue_meta), else the smallest the
-- live runtimes publish (awa.runtime_instances.queues); a limiter is its awa.rate_limiters
-- row (GCRA in integer microseconds, awa.domain.rate_limits); time is the database's now().
-- A function, not a column of awa.jobs: it reads four tables per job, a cost only the
-- caller who asks pays; tests/integration/test_job_held_back_sql.py holds it to the rule.
CREATE OR REPLACE FUNCTION awa.job_held_back(p_job_id bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_queue text;
    v_state awa.job_state;
    v_key text;
    v_max int;
    v_running bigint;
    v_rate double precision;
    v_burst int;
    v_key_rate double precision;
    v_key_burst int;
    v_limiter text;
    v_lrate double precision;
    v_lburst int;
    v_tat timestamptz;
    v_interval bigint;
    v_backlog bigint;
    v_next timestamptz;
    v_now timestamptz := now();
BEGIN
    SELECT j.queue, j.state, j.metadata ->> 'awa:concurrency_key'
      INTO v_queue, v_state, v_key
      FROM awa.jobs j WHERE j.id = p_job_id;
    IF NOT FOUND OR v_state <> 'available' THEN
        RETURN NULL;
    END IF;

    WITH live AS (
        SELECT q
        FROM awa.runtime_instances r, jsonb_array_elements(coalesce(r.queues, '[]')) AS q
        WHERE awa.runtime_is_live(r.last_seen_at, r.snapshot_interval_ms, r.shutting_down)
          AND q ->> 'name' = v_queue
    ), workers AS (
        SELECT min((q ->> 'max_running_per_key')::int) AS max_running_per_key,
               min((q ->> 'global_rate_per_second')::double precision) AS rate,
               min((q ->> 'global_rate_burst')::int) AS burst,
               min((q ->> 'global_rate_per_key_per_second')::double precision) AS key_rate,
               min((q ->> 'global_rate_per_key_burst')::int) AS key_burst
        FROM live
    )
    SELECT coalesce(m.override_max_running_per_key, w.max_running_per_key),
           coalesce(m.override_global_rate_per_second, w.rate),
           coalesce(m.override_global_rate_burst, w.burst, 1),
           coalesce(m.override_global_rate_per_key_per_second, w.key_rate),
           coalesce(m.override_global_rate_per_key_burst, w.key_burst, 1)
      INTO v_max, v_rate, v_burst, v_key_rate, v_key_burst
      FROM workers w LEFT JOIN awa.queue_meta m ON m.queue = v_queue;

    -- Its key's slots, all held (the states that hold one: flow_control.SLOT_STATES).
    IF v_key IS NOT NULL AND v_max IS NOT NULL THEN
        SELECT count(*) INTO v_running FROM awa.jobs j
         WHERE j.queue = v_queue
           AND j.state IN ('running', 'waiting_external')
           AND j.metadata ->> 'awa:concurrency_key' = v_key;
        IF v_running >= v_max THEN
            RETURN jsonb_build_object(
                'limit', 'max_running_per_key', 'key', v_key, 'running', v_running,
                'max_running', v_max, 'next_admission', NULL,
                'reason', format('held back: key %s has %s of %s running (max_running_per_key)',
                                 v_key, v_running, v_max));
        END IF;
    END IF;

    -- A limiter (the queue's, then its key's) that admits nothing now.
    FOR v_limiter, v_lrate, v_lburst IN
        SELECT '', v_rate, v_burst
        UNION ALL
        SELECT (1073741824 + awa.ordering_key_shard(convert_to(v_key, 'UTF8'), 1073741824))::text,
               v_key_rate, v_key_burst
        WHERE v_key IS NOT NULL
    LOOP
        CONTINUE WHEN v_lrate IS NULL;
        SELECT l.tat INTO v_tat FROM awa.rate_limiters l
         WHERE l.queue = v_queue AND l.limiter = v_limiter;
        CONTINUE WHEN v_tat IS NULL;
        v_interval := greatest(1, ceil(1000000 / v_lrate))::bigint;
        v_backlog := greatest(0, floor(extract(epoch FROM v_tat - v_now) * 1000000))::bigint;
        CONTINUE WHEN (v_lburst * v_interval - v_backlog) / v_interval > 0;
        v_next := v_tat - ((v_lburst - 1) * v_interval) * interval '1 microsecond';
        RETURN jsonb_build_object(
            'limit', CASE WHEN v_limiter = '' THEN 'global_rate_limit'
                          ELSE 'global_rate_limit_per_key' END,
            'key', CASE WHEN v_limiter = '' THEN NULL ELSE v_key END,
            'running', NULL, 'max_running', NULL,
            'next_admission', v_next,
            'reason', CASE WHEN v_limiter = '' THEN 'held back: queue rate limit (global_rate_limit)'
                           ELSE format('held back: key %s rate limit (global_rate_limit_per_key)', v_key)
                      END || ', next admission at ' || to_char(v_next AT TIME ZONE 'UTC',
                                                               'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'));
    END LOOP;
    RETURN NULL;
END
$$;
