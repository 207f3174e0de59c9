-- Statements of the queue-storage engine: the hot path (enqueue, claim, completion) and
-- the snapshot writes every operation shares. Placeholders are listed in statements.py;
-- every time value is a parameter taken from the engine's clock.

-- name: lane_stamp
-- The run_at a batch ``w`` of new jobs (``w.fresh``: every row stamped ``w.first_run``,
-- the producer's clock when it began) gets in lane ``l``, read under the lane's row lock.
-- A producer stamps its jobs before it takes a lane, so another producer that stamped
-- later may have taken the lane first: the batch would then start below the lane's tail
-- order key and leave the lane disordered (claims sort its whole unclaimed window). Such
-- a batch is stamped just after the tail instead (ADR 0006, "Stamped under the lane
-- lock"), as if it had been stamped when it got the lane, unless the tail is more than
-- {stamp_slack_ms} ms ahead of the batch's clock (a clock far off): that batch keeps its stamp
-- and the lane is marked disordered, as for any other append below the tail.
CASE WHEN w.fresh AND l.tail_run_at IS NOT NULL
        AND (w.first_run, w.first_id) < (l.tail_run_at, l.tail_job_id)
        AND l.tail_run_at < w.first_run + {stamp_slack_ms} * interval '1 millisecond'
    THEN l.tail_run_at + interval '1 microsecond'
    ELSE w.first_run END

-- name: lane_tail
-- The values of lane ``l``'s ``(tail_run_at, tail_job_id, disorder_seq)`` once the batch
-- ``w`` (want's columns; one row, from the slot ``batch`` or the enclosing statement) is
-- appended at positions ``l.next_seq ..``: the tail order key advances to the batch's
-- largest one (for new jobs the lane_stamp), and the lane is marked disordered when the
-- batch is not in (run_at, job id) order itself, when rows without an order key (SQL
-- producers) are in the lane, or when the batch starts below the tail.
(SELECT
    CASE WHEN l.tail_run_at IS NULL OR (t.last_at, t.last_id) > (l.tail_run_at, l.tail_job_id)
        THEN t.last_at ELSE l.tail_run_at END,
    CASE WHEN l.tail_run_at IS NULL OR (t.last_at, t.last_id) > (l.tail_run_at, l.tail_job_id)
        THEN t.last_id ELSE l.tail_job_id END,
    CASE WHEN NOT t.sorted
            -- rows appended without an order key (SQL producers) have no known order
            OR (l.tail_run_at IS NULL AND l.next_seq > 0)
            OR (t.first_at, t.first_id) < (l.tail_run_at, l.tail_job_id)
        THEN l.next_seq + t.n - 1 ELSE l.disorder_seq END
 FROM (SELECT u.*, CASE WHEN u.fresh THEN u.first_at ELSE u.last_run END AS last_at
       FROM (SELECT w.*, {lane_stamp} AS first_at {?batch}) u) t)

-- name: lane_tail_named
FROM named w
WHERE w.q = EXCLUDED.queue AND w.p = EXCLUDED.priority AND w.sh = EXCLUDED.shard

-- name: lane_tail_fresh
FROM fresh w
WHERE w.q = EXCLUDED.queue AND w.p = EXCLUDED.priority AND w.shard = EXCLUDED.shard

-- name: reserve_lanes_cte
-- The lane reservation shared by reserve_lanes, enqueue_ready and copy_begin, as CTEs
-- after a CTE ``want(q, p, sh, hint, n, first_run, first_id, last_run, last_id, sorted,
-- fresh)``: one row per lane a batch needs (``fresh``: new jobs, all stamped
-- ``first_run``, which lane_stamp may move). ``sh`` names a lane: an ordering key's
-- shard (0 and up), whose row
-- lock the batch waits for. ``sh IS NULL`` is for jobs without an ordering key: they live
-- in the negative lanes of ``(q, p)``, at most {keyless_lanes} of them, and the batch takes the
-- first one that no other open transaction holds (``SKIP LOCKED``, the ``hint`` lane
-- first), so producers of one queue do not wait for each other's commit. When every such
-- lane is held, a new one is made (the ``hint`` lane, else one chosen by backend pid);
-- only when all {keyless_lanes} exist and are held does the batch wait for one. Named lanes are
-- locked first (sorted), free lanes after them without waiting, so a statement never
-- waits while it holds a lane it took out of order. Every lane row lock is held to
-- commit, so lane position k+1 never becomes visible before k. Output: ``lanes_out(q, p,
-- asked, shard, next_seq, stamp)``, ``asked`` being ``want.sh`` and ``stamp`` the run_at
-- of a fresh batch's rows (lane_stamp; meaningless for other batches). A claim head is
-- created for every new lane (no write when present); an unreferenced data-modifying CTE
-- runs after the main statement, so the lock order (lanes, then claim_heads) holds.
named AS (
    SELECT * FROM want WHERE sh IS NOT NULL
), held AS (
    INSERT INTO {s}.lanes AS l (queue, priority, shard, next_seq, tail_run_at, tail_job_id,
        disorder_seq)
    SELECT q, p, sh, n, last_run, last_id, CASE WHEN sorted THEN -1 ELSE n - 1 END
    FROM named
    ORDER BY q, p, sh
    ON CONFLICT (queue, priority, shard) DO UPDATE SET
        next_seq = l.next_seq + EXCLUDED.next_seq,
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail batch=lane_tail_named}
    RETURNING queue, priority, shard, next_seq, tail_run_at, tail_job_id
), free AS (
    SELECT w.*, f.shard AS got
    FROM want w
    LEFT JOIN LATERAL (
        SELECT l.shard FROM {s}.lanes l
        WHERE l.queue = w.q AND l.priority = w.p AND l.shard < 0
        ORDER BY l.shard = w.hint DESC, l.shard DESC
        LIMIT 1
        FOR UPDATE OF l SKIP LOCKED
    ) f ON true
    -- after the named lanes (a one-time filter on them runs first)
    WHERE w.sh IS NULL AND (SELECT count(*) FROM held) >= 0
), fresh AS (
    SELECT w.q, w.p, coalesce(c.shard, -1 - (pg_backend_pid() %% {keyless_lanes})) AS shard,
        w.n, w.first_run, w.first_id, w.last_run, w.last_id, w.sorted, w.fresh
    FROM free w
    LEFT JOIN LATERAL (
        -- Candidates stream in order (no sort), so the try-lock is only taken on the
        -- first one that is free: a lane another open transaction is making is invisible
        -- here, and its maker holds the same advisory lock, so it is passed over instead
        -- of waited for.
        SELECT c.shard FROM (
            SELECT w.hint AS shard
            UNION ALL
            SELECT -1 - ((g + pg_backend_pid()) %% {keyless_lanes}) FROM generate_series(0, {keyless_lanes} - 1) g
        ) c
        WHERE NOT EXISTS (
              SELECT 1 FROM {s}.lanes l
              WHERE l.queue = w.q AND l.priority = w.p AND l.shard = c.shard)
          AND pg_try_advisory_xact_lock(
              hashtextextended('awa.lane:{s}:' || w.q || ':' || w.p || ':' || c.shard, 0))
        LIMIT 1
    ) c ON true
    WHERE w.got IS NULL
), moved AS (
    UPDATE {s}.lanes l SET
        next_seq = l.next_seq + w.n,
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail}
    FROM free w
    WHERE w.got IS NOT NULL
      AND l.queue = w.q AND l.priority = w.p AND l.shard = w.got
    RETURNING l.queue, l.priority, l.shard, l.next_seq,
        CASE WHEN l.tail_job_id = w.last_id THEN l.tail_run_at ELSE w.first_run END AS stamp
), made AS (
    INSERT INTO {s}.lanes AS l (queue, priority, shard, next_seq, tail_run_at, tail_job_id,
        disorder_seq)
    SELECT q, p, shard, n, last_run, last_id, CASE WHEN sorted THEN -1 ELSE n - 1 END
    FROM fresh
    ORDER BY q, p, shard
    ON CONFLICT (queue, priority, shard) DO UPDATE SET
        next_seq = l.next_seq + EXCLUDED.next_seq,
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail batch=lane_tail_fresh}
    RETURNING queue, priority, shard, next_seq, tail_run_at, tail_job_id
), heads AS (
    -- A named lane that has a head already is left out: inserting over it would wait
    -- for a writer marking that head (a retire), while this statement holds the lane.
    INSERT INTO {s}.claim_heads (queue, priority, shard, claim_seq)
    SELECT n.q, n.p, n.sh, 0 FROM named n
    WHERE NOT EXISTS (SELECT 1 FROM {s}.claim_heads h
                      WHERE h.queue = n.q AND h.priority = n.p AND h.shard = n.sh)
    UNION ALL
    SELECT q, p, shard, 0 FROM fresh
    ORDER BY 1, 2, 3
    ON CONFLICT DO NOTHING
), lanes_out AS (
    -- A fresh batch that became its lane's tail has the tail's run_at (lane_stamp);
    -- otherwise it kept its own stamp (and marked the lane disordered).
    SELECT h.queue AS q, h.priority AS p, h.shard AS asked, h.shard, h.next_seq,
        CASE WHEN h.tail_job_id = n.last_id THEN h.tail_run_at ELSE n.first_run END AS stamp
    FROM held h JOIN named n ON n.q = h.queue AND n.p = h.priority AND n.sh = h.shard
    UNION ALL
    SELECT queue, priority, NULL::int, shard, next_seq, stamp FROM moved
    UNION ALL
    SELECT m.queue, m.priority, NULL::int, m.shard, m.next_seq,
        CASE WHEN m.tail_job_id = f.last_id THEN m.tail_run_at ELSE f.first_run END
    FROM made m JOIN fresh f ON f.q = m.queue AND f.p = m.priority AND f.shard = m.shard
)

-- name: reserve_lanes
-- Reserve lane positions for a batch (see reserve_lanes_cte).
WITH want AS (
    SELECT * FROM unnest(
        %(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[], %(hints)s::int[],
        %(counts)s::bigint[], %(first_runs)s::timestamptz[], %(first_ids)s::bigint[],
        %(last_runs)s::timestamptz[], %(last_ids)s::bigint[], %(sorted)s::boolean[],
        %(fresh)s::boolean[]
    ) AS i(q, p, sh, hint, n, first_run, first_id, last_run, last_id, sorted, fresh)
), {reserve_lanes_cte}
SELECT q AS queue, p AS priority, asked, shard, next_seq, stamp FROM lanes_out

-- name: lock_lanes
-- The named lanes a writer that retires unclaimed rows is about to append to, locked
-- before it marks any claim head (lock order: lanes, then claim_heads; ADR 0006): made
-- if missing, otherwise left unchanged (the later reservation writes them).
INSERT INTO {s}.lanes AS l (queue, priority, shard, next_seq, tail_run_at, tail_job_id,
    disorder_seq)
SELECT q, p, sh, 0, NULL, NULL, -1
FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[]) AS i(q, p, sh)
ORDER BY q, p, sh
ON CONFLICT (queue, priority, shard) DO UPDATE SET next_seq = l.next_seq WHERE false

-- name: generic_plans
-- enqueue_ready is a long statement whose planning costs more than its execution, and
-- the server's automatic choice keeps re-planning it: this transaction uses the prepared
-- generic plan. The setting in force before is kept in awa.plan_cache_mode_was, so a
-- caller's unit of work gets it back (restore_plans).
SELECT set_config('awa.plan_cache_mode_was', current_setting('plan_cache_mode'), true),
    set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: plan_generically
-- Once, on a connection the engine keeps for one hot statement (never a pooled one): its
-- session plans every prepared statement generically, so the statement is sent alone.
SET plan_cache_mode = force_generic_plan

-- name: generic_plan_here
-- Sent with one statement in a pipeline (one implicit transaction): the statement runs
-- under its prepared generic plan, and the setting ends with that transaction.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: quiet_commit
-- An expression a claim statement evaluates once (in its `mixed` row): the claim's
-- transaction commits without waiting for the WAL flush. A claim lost in a server crash
-- leaves its jobs available, so they run again, as after any crash (at-least-once); any
-- later durable commit (the attempt's completion, a retry) flushes the WAL up to and
-- including the claim, so a recorded outcome never lacks its claim. Under load every
-- claim otherwise queued behind the producers' flushes: most of its round trip and the
-- tail of pickup latency. The setting is local to the transaction and is read at its
-- commit.
set_config('synchronous_commit', 'off', true)

-- name: restore_plans
SELECT set_config('plan_cache_mode', current_setting('awa.plan_cache_mode_was'), true)

-- name: enqueue_ready
-- A whole enqueue without unique keys in one statement: job ids in input order, lane
-- positions (reserve_lanes_cte; an ordering key's lane is its shard of the queue's
-- enqueue_shards, a concurrency key's lane its own, any other job takes a free lane),
-- ready rows in the current slot,
-- deferred rows for specs with run_at, then the counters (counts_free_cte) and the
-- wake-ups of ``channels``. Returns the ids in input order. The route placeholder below is
-- empty here; in enqueue_ready_routed it is a one-time filter on the input that runs
-- awa.queue_storage_route_check before anything else is read or locked (see
-- enqueue_ready_routed). No estimate depends on a parameter's value (the ids come from the
-- input rows, not from a count), so a custom plan costs what the generic plan costs and the
-- server settles on the generic plan by itself after its first few executions.
WITH x AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS x(
        ord bigint, kind text, queue text, args jsonb, priority smallint,
        max_attempts smallint, run_at timestamptz, metadata jsonb, tags jsonb,
        ordering_key text, unique_states text, hint int)
    {?route}
), ids AS (
    SELECT id, row_number() OVER (ORDER BY id) AS ord
    FROM (SELECT nextval('awa.jobs_id_seq') AS id FROM x) s
), j AS (
    SELECT x.*, ids.id, decode(x.ordering_key, 'hex') AS okey,
        CASE WHEN x.ordering_key IS NOT NULL THEN awa.ordering_key_shard(
            decode(x.ordering_key, 'hex'),
            coalesce((SELECT m.enqueue_shards FROM awa.queue_meta m WHERE m.queue = x.queue), 1))
            -- a concurrency key's own lane (awa.domain.flow_control.keyed_shard)
            WHEN x.metadata ? 'awa:concurrency_key' THEN 1073741824 + awa.ordering_key_shard(
                convert_to(x.metadata ->> 'awa:concurrency_key', 'UTF8'), 1073741824)
        END AS sh
    FROM x JOIN ids USING (ord)
), want AS (
    SELECT queue AS q, priority AS p, sh, min(hint) AS hint, count(*) AS n,
        %(now)s::timestamptz AS first_run, min(id) AS first_id,
        %(now)s::timestamptz AS last_run, max(id) AS last_id, true AS sorted,
        true AS fresh
    FROM j WHERE run_at IS NULL
    GROUP BY queue, priority, sh
), {reserve_lanes_cte}, ready AS (
    INSERT INTO {s}.ready_entries (
        slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
        max_attempts, run_at, created_at, errors, metadata, tags, unique_states, run_lease,
        ordering_key
    )
    SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), o.shard,
        o.next_seq - o.n + j.k - 1, j.id, j.kind, j.queue, coalesce(j.args, 'null'::jsonb),
        j.priority, 0, j.max_attempts, o.stamp, %(now)s, '{}'::jsonb[],
        coalesce(j.metadata, '{}'::jsonb), ARRAY(SELECT jsonb_array_elements_text(j.tags)),
        j.unique_states::bit(8), 0, j.okey
    FROM (SELECT j.*, row_number() OVER (PARTITION BY queue, priority, sh ORDER BY id) AS k
          FROM j WHERE run_at IS NULL) j
    JOIN (SELECT lo.*, w.n FROM lanes_out lo
          JOIN want w ON w.q = lo.q AND w.p = lo.p AND w.sh IS NOT DISTINCT FROM lo.asked) o
        ON o.q = j.queue AND o.p = j.priority AND o.asked IS NOT DISTINCT FROM j.sh
    ORDER BY j.id
    RETURNING job_id, run_at
), later AS (
    INSERT INTO {s}.deferred_jobs (
        fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
        created_at, errors, metadata, tags, unique_states, run_lease, ordering_key
    )
    SELECT nextval('{s}.fact_seq'), 'scheduled', j.id, j.kind, j.queue,
        coalesce(j.args, 'null'::jsonb), j.priority, 0, j.max_attempts, j.run_at, %(now)s,
        '{}'::jsonb[], coalesce(j.metadata, '{}'::jsonb),
        ARRAY(SELECT jsonb_array_elements_text(j.tags)), j.unique_states::bit(8), 0, j.okey
    FROM j WHERE run_at IS NOT NULL
    ORDER BY j.id
    RETURNING 1
), cnt_in AS (
    -- after the rows (a one-time filter on them runs first): counters are the last locks
    SELECT queue AS q, CASE WHEN run_at IS NULL THEN 'available' ELSE 'scheduled' END
            ::awa.job_state AS st,
        count(*) AS d
    FROM j
    WHERE (SELECT count(*) FROM ready) + (SELECT count(*) FROM later) >= 0
    GROUP BY 1, 2
), {counts_free_cte}
SELECT ids.id, r.run_at,
    (SELECT count(*) FROM cnt_added) + (SELECT count(*) FROM cnt_made) AS counted,
    (SELECT count(pg_notify(c, '')) FROM unnest(%(channels)s::text[]) c) AS woken
FROM ids LEFT JOIN ready r ON r.job_id = ids.id
ORDER BY ids.id

-- name: enqueue_ready_routed
-- enqueue_ready as one statement on its own (autocommit), for a producer that remembers
-- that new jobs go to this schema: the route check (awa.queue_storage_route_check, which
-- takes the producer lock and raises when producers write elsewhere now) is a one-time
-- filter on the input rows, so it runs before any id is drawn or any lane is locked, and
-- its lock is held until the statement commits.
{enqueue_ready route=route_check}

-- name: route_check
-- The route check of enqueue_ready_routed: a one-time filter (an init plan evaluated before
-- the first input row is read), so the producer lock is taken before any lane lock.
WHERE (SELECT awa.queue_storage_route_check(%(schema)s)) IS NOT NULL

-- name: enqueue_one_routed
-- The common insert() (one available job, no ordering key, no unique key, a producer that
-- remembers the route) in a fraction of enqueue_ready_routed's work, when the queue
-- already has a counter bucket and a lane for its priority that no other open transaction
-- holds: route check first (a one-time filter, as in enqueue_ready_routed), then a free
-- counter bucket and a free lane (both SKIP LOCKED, so the statement never waits while
-- it holds a row), then the id, the lane advance (exactly reserve_lanes_cte's ``moved``
-- for a one-job batch), the ready row and the counter. When either row is missing or held
-- it writes nothing and returns no row; the caller then runs enqueue_ready_routed. The
-- job's values arrive as one JSON object, so no estimate depends on a parameter's value
-- and the server settles on the generic plan by itself.
WITH x AS (
    SELECT * FROM jsonb_to_record(%(job)s::jsonb) AS x(
        kind text, queue text, args jsonb, priority smallint, max_attempts smallint,
        metadata jsonb, tags jsonb, unique_states text, hint int)
    WHERE (SELECT awa.queue_storage_route_check(%(schema)s)) IS NOT NULL
), bucket AS (
    SELECT c.queue, c.state, c.bucket
    FROM x, LATERAL (
        SELECT c.queue, c.state, c.bucket FROM {s}.queue_counts c
        WHERE c.queue = x.queue AND c.state = 'available' AND c.bucket < {count_buckets}
        ORDER BY c.bucket = pg_backend_pid() %% {count_buckets} DESC, c.bucket
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ) c
), lane AS (
    SELECT l.queue, l.priority, l.shard
    FROM x, LATERAL (
        SELECT l.queue, l.priority, l.shard FROM {s}.lanes l
        WHERE l.queue = x.queue AND l.priority = x.priority AND l.shard < 0
        ORDER BY l.shard = x.hint DESC, l.shard DESC
        LIMIT 1
        FOR UPDATE OF l SKIP LOCKED
    ) l
    WHERE EXISTS (SELECT 1 FROM bucket)
), job AS (
    SELECT nextval('awa.jobs_id_seq') AS id FROM lane
), moved AS (
    UPDATE {s}.lanes l SET
        next_seq = l.next_seq + 1,
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail}
    FROM (SELECT lane.*, 1 AS n, %(now)s::timestamptz AS first_run, job.id AS first_id,
              %(now)s::timestamptz AS last_run, job.id AS last_id, true AS sorted,
              true AS fresh
          FROM lane, job) w
    WHERE l.queue = w.queue AND l.priority = w.priority AND l.shard = w.shard
    RETURNING l.shard, l.next_seq, w.first_id AS id,
        CASE WHEN l.tail_job_id = w.last_id THEN l.tail_run_at ELSE w.first_run END AS stamp
), ready AS (
    INSERT INTO {s}.ready_entries (
        slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
        max_attempts, run_at, created_at, errors, metadata, tags, unique_states, run_lease,
        ordering_key
    )
    SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), m.shard,
        m.next_seq - 1, m.id, x.kind, x.queue, coalesce(x.args, 'null'::jsonb), x.priority, 0,
        x.max_attempts, m.stamp, %(now)s, '{}'::jsonb[], coalesce(x.metadata, '{}'::jsonb),
        ARRAY(SELECT jsonb_array_elements_text(x.tags)), x.unique_states::bit(8), 0, NULL
    FROM moved m, x
    RETURNING job_id, run_at
), counted AS (
    UPDATE {s}.queue_counts c SET n = c.n + 1
    FROM bucket b
    WHERE c.queue = b.queue AND c.state = b.state AND c.bucket = b.bucket
      AND EXISTS (SELECT 1 FROM ready)
    RETURNING 1
)
SELECT r.job_id AS id, r.run_at,
    (SELECT count(*) FROM counted) AS counted,
    (SELECT count(pg_notify(c, '')) FROM unnest(%(channels)s::text[]) c) AS woken
FROM ready r

-- name: copy_begin
-- The direct COPY path (every job available, no unique key): job ids in input order, lane
-- positions for each lane's input range (reserve_lanes_cte; ``first``/``last`` are the
-- 1-based input positions of a lane's first and last job), the current slot and one fact
-- id per job, so the rows can be copied straight into ready_entries.
WITH ids AS MATERIALIZED (
    SELECT array_agg(id ORDER BY id) AS a
    FROM (SELECT nextval('awa.jobs_id_seq') AS id FROM generate_series(1, %(n)s)) s
), want AS (
    SELECT q, p, sh, hint, n, %(now)s::timestamptz AS first_run,
        (SELECT a[fo] FROM ids) AS first_id, %(now)s::timestamptz AS last_run,
        (SELECT a[lo] FROM ids) AS last_id, true AS sorted, true AS fresh
    FROM unnest(
        %(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[], %(hints)s::int[],
        %(counts)s::bigint[], %(firsts)s::int[], %(lasts)s::int[]
    ) AS i(q, p, sh, hint, n, fo, lo)
), {reserve_lanes_cte}
SELECT (SELECT a FROM ids) AS ids,
    (SELECT current_slot FROM {s}.ring_state) AS slot,
    ARRAY(SELECT nextval('{s}.fact_seq') FROM generate_series(1, %(n)s)) AS facts,
    (SELECT jsonb_agg(jsonb_build_array(q, p, asked, shard, next_seq, stamp)) FROM lanes_out)
        AS lanes

-- name: copy_direct
COPY {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, created_at, errors, metadata, tags, unique_states, run_lease,
    ordering_key
) FROM STDIN

-- name: enqueue_shards
-- The queues' enqueue_shards (an ordering key's lane depends on it).
SELECT queue, enqueue_shards FROM awa.queue_meta WHERE queue = ANY(%(queues)s::text[])

-- name: dlq_queues
SELECT queue FROM awa.queue_meta WHERE dlq_enabled

-- name: next_job_ids
SELECT nextval('awa.jobs_id_seq') AS id FROM generate_series(1, %(n)s) ORDER BY 1

-- name: insert_ready
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
    errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
    run_lease, progress, ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), x.shard,
    x.lane_seq, {snapshot_values}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset})

-- name: create_copy_stage
-- The staging table of one COPY with unique keys or run_at (dropped at commit; a fresh
-- name per call lets one transaction copy twice).
CREATE TEMP TABLE {stage} (job_id int8, kind text, queue text, args jsonb, priority int2,
    max_attempts int2, run_at timestamptz, created_at timestamptz, metadata jsonb,
    tags text[], unique_key bytea, unique_states text, ordering_key bytea, shard int4,
    lane_seq int8, state text) ON COMMIT DROP

-- name: copy_stage
COPY {stage} FROM STDIN (FORMAT BINARY)

-- name: copy_ready
-- Staged COPY rows (lane positions already reserved) become ready rows in one statement.
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, created_at, errors, metadata, tags, unique_key, unique_states,
    run_lease, ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), x.shard,
    x.lane_seq, x.job_id, x.kind, x.queue, x.args, x.priority, 0, x.max_attempts, x.run_at,
    x.created_at, '{}'::jsonb[], x.metadata, x.tags, x.unique_key, x.unique_states::bit(8),
    0, x.ordering_key
FROM {stage} x
WHERE x.state = 'available'
ORDER BY x.job_id

-- name: copy_deferred
INSERT INTO {s}.deferred_jobs (
    fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    created_at, errors, metadata, tags, unique_key, unique_states, run_lease, ordering_key
)
SELECT nextval('{s}.fact_seq'), x.state::awa.job_state, x.job_id, x.kind, x.queue, x.args,
    x.priority, 0, x.max_attempts, x.run_at, x.created_at, '{}'::jsonb[], x.metadata, x.tags,
    x.unique_key, x.unique_states::bit(8), 0, x.ordering_key
FROM {stage} x
WHERE x.state <> 'available'
ORDER BY x.job_id

-- name: insert_deferred
INSERT INTO {s}.deferred_jobs (
    fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata,
    tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress,
    ordering_key
)
SELECT nextval('{s}.fact_seq'), x.state::awa.job_state, {snapshot_values}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset})

-- name: insert_done
INSERT INTO {s}.done_entries (
    slot, fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata,
    tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress,
    ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'),
    x.state::awa.job_state, {snapshot_values}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset})

-- name: insert_deletion_markers
INSERT INTO {s}.done_entries (slot, fact_id, state, job_id)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), NULL, id
FROM unnest(%(ids)s::bigint[]) AS i(id)

-- name: insert_dlq
INSERT INTO {s}.dlq_entries (
    job_id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key,
    dlq_reason, dlq_at, original_run_lease
)
SELECT x.job_id, x.kind, x.queue, coalesce(x.args, 'null'::jsonb), x.state::awa.job_state,
    x.priority, x.attempt, x.max_attempts, x.run_at, x.heartbeat_at, x.deadline_at,
    x.attempted_at, x.finalized_at, x.created_at,
    ARRAY(SELECT jsonb_array_elements(x.errors)), x.metadata,
    ARRAY(SELECT jsonb_array_elements_text(x.tags)), decode(x.unique_key, 'hex'),
    x.unique_states::bit(8), x.callback_id, x.callback_timeout_at, x.run_lease,
    x.progress, decode(x.ordering_key, 'hex'), x.dlq_reason, x.dlq_at, x.run_lease
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset}, dlq_reason text, dlq_at timestamptz)

-- name: prune_gate_shared
-- The prune gate (its first key is PRUNE_GATE, its second the schema's hash), shared: a
-- change to a terminal job holds it while prune decides that job's slot.
SELECT pg_advisory_xact_lock_shared(%(gate)s, hashtext(%(schema)s))

-- name: tombstone
INSERT INTO {s}.tombstones (slot, ready_fact, fact_id)
SELECT slot, fact, nextval('{s}.fact_seq')
FROM unnest(%(slots)s::int[], %(facts)s::bigint[]) AS i(slot, fact)
ON CONFLICT DO NOTHING
RETURNING ready_fact

-- name: retire_lanes
-- Every writer that retires unclaimed ready rows (cancel, drain, delete, moves) locks
-- their lanes' claim heads first and marks them with its transaction id
-- (awa.queue_storage_retire_lanes, migration 0380): no claimer is inside those lanes
-- while the tombstones are written, and a claimer whose snapshot predates the commit
-- leaves the lane alone (see claim).
SELECT awa.queue_storage_retire_lanes(
    %(schema)s, %(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[]) AS marked

-- name: ready_lane_of
SELECT fact_id, slot, queue, priority, shard, lane_seq FROM {s}.ready_entries
WHERE slot = ANY(%(slots)s::int[]) AND fact_id = ANY(%(facts)s::bigint[])

-- name: unique_claim
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT k, id FROM unnest(%(keys)s::bytea[], %(ids)s::bigint[]) AS i(k, id)
ON CONFLICT (unique_key) DO NOTHING
RETURNING unique_key, job_id

-- name: unique_holder
SELECT job_id FROM awa.job_unique_claims WHERE unique_key = %(key)s

-- name: unique_release
DELETE FROM awa.job_unique_claims c
USING unnest(%(keys)s::bytea[], %(ids)s::bigint[]) AS i(k, id)
WHERE c.unique_key = i.k AND c.job_id = i.id

-- name: add_counts
-- Counters are the last locks any transaction takes, in key order. Each kind of writer
-- has its own bucket range, so none waits for another kind's counter row until commit:
-- enqueues 0-15 (a free one, counts_free_cte), the common claim 16-23, completion by
-- receipt 24-31, everything else (this statement) 32-39; within a range, by backend.
INSERT INTO {s}.queue_counts AS c (queue, state, bucket, n)
SELECT q, st::awa.job_state, (32 + pg_backend_pid() %% 8)::smallint, d
FROM unnest(%(queues)s::text[], %(states)s::text[], %(deltas)s::bigint[]) AS i(q, st, d)
ORDER BY q, st
ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: counts_free_cte
-- Counters of an enqueue, as CTEs after a CTE ``cnt_in(q, st, d)``: each (queue, state) is
-- added to a bucket row no other open transaction holds (SKIP LOCKED, the backend's own
-- bucket first), so producers of one queue do not queue behind each other's counter row
-- until commit. When all are held a new bucket is made (at most {count_buckets}; one that another
-- open transaction is making is passed over by its advisory lock); only when all exist and
-- are held does the enqueue wait for one. Counters stay the last locks of the transaction.
cnt_free AS (
    SELECT i.*, f.bucket
    FROM cnt_in i
    LEFT JOIN LATERAL (
        SELECT c.bucket FROM {s}.queue_counts c
        WHERE c.queue = i.q AND c.state = i.st AND c.bucket < {count_buckets}
        ORDER BY c.bucket = pg_backend_pid() %% {count_buckets} DESC, c.bucket
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ) f ON true
), cnt_added AS (
    UPDATE {s}.queue_counts c SET n = c.n + f.d
    FROM cnt_free f
    WHERE f.bucket IS NOT NULL AND c.queue = f.q AND c.state = f.st AND c.bucket = f.bucket
    RETURNING 1
), cnt_made AS (
    INSERT INTO {s}.queue_counts AS c (queue, state, bucket, n)
    SELECT f.q, f.st, coalesce(b.bucket, pg_backend_pid() %% {count_buckets}), f.d
    FROM cnt_free f
    LEFT JOIN LATERAL (
        SELECT b.bucket FROM (
            SELECT (pg_backend_pid() + g) %% {count_buckets} AS bucket
            FROM generate_series(0, {count_buckets} - 1) g
        ) b
        WHERE NOT EXISTS (
              SELECT 1 FROM {s}.queue_counts x
              WHERE x.queue = f.q AND x.state = f.st AND x.bucket = b.bucket)
          AND pg_try_advisory_xact_lock(
              hashtextextended('awa.counts:{s}:' || f.q || ':' || f.st || ':' || b.bucket, 0))
        LIMIT 1
    ) b ON true
    WHERE f.bucket IS NULL
    ORDER BY 1, 2
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n
    RETURNING 1
)

-- name: add_counts_free
-- Counters of an enqueue (counts_free_cte).
WITH cnt_in AS (
    SELECT q, st::awa.job_state AS st, d
    FROM unnest(%(queues)s::text[], %(states)s::text[], %(deltas)s::bigint[]) AS i(q, st, d)
), {counts_free_cte}
SELECT (SELECT count(*) FROM cnt_added) + (SELECT count(*) FROM cnt_made)

-- name: wake_quietly
-- Wake-ups sent after the enqueues committed, as one statement that is its own
-- transaction. That transaction needs no durable commit (a notification does not survive
-- a crash anyway), so it does not wait for the WAL flush while it holds the notify lock:
-- synchronous_commit is off for it alone (set_config(..., true) is local to it).
SELECT set_config('synchronous_commit', 'off', true) AS quiet,
    count(pg_notify(channel, '')) AS woken
FROM unnest(%(channels)s::text[]) AS i(channel)

-- name: notify
SELECT pg_notify(channel, payload)
FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS i(channel, payload)

-- name: claim
-- The common claim, one statement on its own (autocommit): windows are walked in lane
-- order only, so a third less of the ring is planned and locked, and it moves the cursors
-- and the counters itself. A window that needs sorting (it holds a row appended out of
-- (run_at, job id) order) is taken only whole: when all its unclaimed rows are due and
-- fit in the batch, the order among them does not matter and the cursor moves past them
-- as for an ordered window. Such windows come from promoted, retried or edited jobs
-- (new jobs are stamped under their lane's lock, lane_stamp), and from producers whose
-- clocks are far apart; they are usually a few rows long.
-- When a sorted window cannot be taken whole (or a unique key would have to move with
-- the claim) it claims nothing and reports `mixed`; the engine then runs the general
-- claim_sorted in a transaction, and keeps using it for the queue while that reports a
-- sorted window longer than its batch.
-- Unless the queue is paused, lock the lane heads nobody else is claiming from and take
-- the best unclaimed rows of their windows (lane_seq >= cursor), merged across lanes by
-- (aged priority, run_at, job id). Within one lane that key only grows along an ordered
-- window (a lane has one priority, the window is in (run_at, job id) order and aging only
-- favours older rows), so the merge is exact without reading `limit` rows of every lane
-- (ADR 0006, "The claim's merge"). A first walk reads an even share of the batch from
-- each ordered window (`limit` / lanes rounded up; a sorted window `limit` + 1 rows, to
-- tell whether it fits). Every row not read has a larger key than the last row read of
-- its lane, so when at least `limit` rows read have keys up to the smallest such last
-- key, the best `limit` of them are the answer. Otherwise the window with that smallest
-- last key goes on by as many rows as can still rank within the batch (a run of one
-- lane ahead of the others, the usual shape of a backlog from concurrent producers); and
-- if the test still fails, every window that may go on does, by at most `limit` less its
-- rows read and the other lanes' rows read below its last one. Aging uses integer
-- microseconds, exactly like the Python PriorityAging. On a walk (claim_walk), OFFSET 0 keeps each NOT EXISTS a per-row index probe (the planner would
-- otherwise build a join against a whole partition when its statistics are stale).
-- The same statement moves the cursor of every lane it took rows from: in an ordered
-- window the rows taken are a prefix of the lane's unclaimed rows in lane order, and a
-- sorted window was taken whole, so every row below the last one taken is claimed or
-- tombstoned.
{claim_body ready_entries=ring_ready_entries claims=ring_claims tombstones=ring_tombstones}

-- name: claim_body
-- The claim statement; its ring tables and its in-slot checks are filled in by claim and
-- claim_in_slot.
WITH heads AS (
    SELECT h.queue, h.priority, h.shard, h.claim_seq, l.next_seq,
        (l.disorder_seq >= h.claim_seq) AS disordered,
        -- Read from the head's newest version once it is locked: a writer that retired a
        -- row of this lane committed after this statement's snapshot was taken, so the
        -- walk cannot see its tombstone. The lane is left alone (see `contested`).
        CASE WHEN h.retired_xid IS NULL THEN false
            ELSE NOT pg_visible_in_snapshot(h.retired_xid, pg_current_snapshot())
        END AS contested
    FROM {s}.claim_heads h
    JOIN {s}.lanes l USING (queue, priority, shard)
    WHERE h.queue = %(queue)s
      -- A lane with nothing appended past its cursor is not locked: any ready row this
      -- statement can see was committed together with a lanes.next_seq above it.
      AND l.next_seq > h.claim_seq
      -- a paused queue hands out nothing
      AND NOT EXISTS (
          SELECT 1 FROM awa.queue_meta m WHERE m.queue = %(queue)s AND m.paused)
    ORDER BY h.priority, h.shard
    FOR UPDATE OF h SKIP LOCKED
), first_lanes AS (
    -- The first walk of each lane not left alone: from its cursor, an even share of the
    -- batch (all of it for a lone lane). A sorted window: its unclaimed rows, due or not,
    -- one more than fits (to tell).
    SELECT h.queue, h.priority, h.shard, h.next_seq, h.disordered, 1 AS pass,
        h.claim_seq AS walk_from,
        CASE WHEN h.disordered THEN %(limit)s + 1
            ELSE (%(limit)s + count(*) OVER () - 1) / count(*) OVER () END AS share
    FROM heads h
    WHERE NOT h.contested
), first_walk AS (
    {claim_walk lanes=claim_first_lanes}
), first_keyed AS (
    SELECT f.priority, f.shard, f.lane_seq, f.run_at, f.job_id, {claim_effective} AS effective
    FROM first_walk f
), first_ends AS (
    -- Per lane: the rows the first walk read and its last one (the largest key of an
    -- ordered window); `more` when the window filled its share and may go on.
    SELECT l.queue, l.priority, l.shard, l.next_seq, g.n, e.lane_seq AS last_seq,
        e.effective, e.run_at, e.job_id,
        NOT l.disordered AND g.n >= l.share AS more
    FROM first_lanes l
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM first_keyed k
        WHERE k.priority = l.priority AND k.shard = l.shard) g
    LEFT JOIN LATERAL (
        SELECT k.lane_seq, k.effective, k.run_at, k.job_id FROM first_keyed k
        WHERE k.priority = l.priority AND k.shard = l.shard
        ORDER BY k.lane_seq DESC LIMIT 1) e ON true
), second_lanes AS (
    -- Unless `limit` rows read rank up to the smallest last key of the windows that may
    -- go on (every row not read ranks after it), the window with that last key goes on by
    -- as many rows as can still rank within the batch.
    SELECT e.queue, e.priority, e.shard, e.next_seq, false AS disordered, 2 AS pass,
        e.last_seq + 1 AS walk_from, %(limit)s - b.below AS share
    FROM (SELECT * FROM first_ends WHERE more
          ORDER BY effective, run_at, job_id LIMIT 1) e
    CROSS JOIN LATERAL (
        SELECT count(*) AS below FROM first_keyed k
        WHERE (k.effective, k.run_at, k.job_id) <= (e.effective, e.run_at, e.job_id)) b
    WHERE b.below < %(limit)s
), second_walk AS (
    {claim_walk lanes=claim_second_lanes}
), read_keyed AS (
    SELECT * FROM first_keyed
    UNION ALL
    SELECT f.priority, f.shard, f.lane_seq, f.run_at, f.job_id, {claim_effective}
    FROM second_walk f
), read_ends AS (
    -- first_ends after the second walk.
    SELECT e.queue, e.priority, e.shard, e.next_seq, e.n + coalesce(g.n, 0) AS n,
        coalesce(g.lane_seq, e.last_seq) AS last_seq,
        coalesce(g.effective, e.effective) AS effective,
        coalesce(g.run_at, e.run_at) AS run_at, coalesce(g.job_id, e.job_id) AS job_id,
        CASE WHEN s.pass IS NULL THEN e.more ELSE coalesce(g.n, 0) >= s.share END AS more
    FROM first_ends e
    LEFT JOIN second_lanes s ON s.priority = e.priority AND s.shard = e.shard
    LEFT JOIN LATERAL (
        SELECT count(*) OVER () AS n, k.lane_seq, k.effective, k.run_at, k.job_id
        FROM read_keyed k
        WHERE s.pass IS NOT NULL AND k.priority = e.priority AND k.shard = e.shard
          AND k.lane_seq >= s.walk_from
        ORDER BY k.lane_seq DESC LIMIT 1) g ON true
), third_lanes AS (
    -- When the second walk ran and still fewer than `limit` rows read rank up to the
    -- smallest last key of the windows that may go on, each of those goes on by at most
    -- the rows of it that can still rank within the batch: `limit` less its rows read and
    -- the other lanes' rows read below its last one.
    SELECT e.queue, e.priority, e.shard, e.next_seq, false AS disordered, 3 AS pass,
        e.last_seq + 1 AS walk_from,
        %(limit)s - e.n - (
            SELECT count(*) FROM read_keyed k
            WHERE (k.priority, k.shard) <> (e.priority, e.shard)
              AND (k.effective, k.run_at, k.job_id) < (e.effective, e.run_at, e.job_id))
        AS share
    FROM read_ends e
    WHERE e.more AND EXISTS (SELECT 1 FROM second_lanes)
      AND (SELECT count(*) FROM read_keyed k
           WHERE (k.effective, k.run_at, k.job_id) <= (
               SELECT r.effective, r.run_at, r.job_id FROM read_ends r WHERE r.more
               ORDER BY r.effective, r.run_at, r.job_id LIMIT 1)) < %(limit)s
), third_walk AS (
    {claim_walk lanes=claim_third_lanes}
), picked AS (
    SELECT * FROM first_walk
    UNION ALL
    SELECT * FROM second_walk
    UNION ALL
    SELECT * FROM third_walk
), ranked AS (
    SELECT p.*, row_number() OVER (ORDER BY p.effective, p.run_at, p.job_id) AS rank
    FROM (SELECT f.*, {claim_effective} AS effective FROM picked f) p
), refused AS (
    -- A sorted window this statement cannot take whole: a row of it is not due yet, or
    -- they do not all fit in the batch (more than `limit`, or better rows elsewhere).
    SELECT EXISTS (
        SELECT 1 FROM ranked r WHERE r.disordered
        GROUP BY r.priority, r.shard
        HAVING count(*) > %(limit)s OR max(r.rank) > %(limit)s
            OR bool_or(r.run_at > %(now)s::timestamptz))
        OR EXISTS (SELECT 1 FROM picked u
                   WHERE u.unique_key IS NOT NULL AND u.unique_states IS NOT NULL
                     AND get_bit(u.unique_states, 1) <> get_bit(u.unique_states, 2))
        AS mixed{?refused_elsewhere}
), candidates AS (
    SELECT r.* FROM ranked r
    WHERE r.rank <= %(limit)s AND NOT (SELECT mixed {?or_elsewhere} FROM refused)
), inserted AS (
    INSERT INTO {?claims} (slot, claim_id, ready_fact, job_id, run_lease, queue, attempted_at,
        deadline_at)
    SELECT slot, nextval('{s}.fact_seq'), fact_id, job_id, run_lease + 1, %(queue)s, %(now)s,
        %(deadline_at)s
    FROM (SELECT * FROM candidates ORDER BY effective, run_at, job_id) ordered
    RETURNING slot, claim_id, ready_fact, job_id
), advanced AS (
    UPDATE {s}.claim_heads h SET claim_seq = a.next_seq
    FROM (SELECT c.priority, c.shard, max(c.lane_seq) + 1 AS next_seq
          FROM candidates c
          GROUP BY c.priority, c.shard) a
    WHERE h.queue = %(queue)s AND h.priority = a.priority AND h.shard = a.shard
      AND a.next_seq > h.claim_seq
), counted AS (
    -- The claimed jobs move from available to running (counters last, in key order).
    INSERT INTO {s}.queue_counts AS q (queue, state, bucket, n)
    SELECT %(queue)s, v.st::awa.job_state, (16 + pg_backend_pid() %% 8)::smallint, v.d
    FROM (SELECT count(*) AS n FROM inserted) k
    CROSS JOIN LATERAL (VALUES ('available', -k.n), ('running', k.n)) AS v(st, d)
    WHERE k.n > 0
    ORDER BY v.st
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = q.n + EXCLUDED.n
), mixed AS (
    -- Whether the general claim is needed: a locked lane holds a sorted window that
    -- cannot be taken whole, or a job's unique key is held in only one of available /
    -- running (its claim must move the key in the same transaction).
    SELECT (SELECT mixed FROM refused) AS mixed,
        -- A lane was left alone (see heads): the engine claims again at once.
        EXISTS (SELECT 1 FROM heads WHERE contested) AS contested,
        {quiet_commit} AS quiet{?slot_outputs}
), claimed AS (
    -- The claimed snapshots, exactly as the job_facts view resolves an open receipt
    -- without a lease, so the claimer needs no second read (the walk carried the bodies).
    SELECT i.slot, i.claim_id, i.ready_fact, i.job_id, c.priority, c.shard,
        c.job_id AS id, c.kind, c.queue, c.args, 'running' AS state,
        (c.attempt + 1)::smallint AS attempt, c.max_attempts, c.run_at,
        %(now)s::timestamptz AS heartbeat_at, %(deadline_at)s::timestamptz AS deadline_at,
        %(now)s::timestamptz AS attempted_at, c.finalized_at, c.created_at, c.errors,
        c.metadata, c.tags, c.unique_key, c.unique_states, c.callback_id,
        c.callback_timeout_at, c.run_lease + 1 AS run_lease, c.progress, c.disordered,
        c.effective
    FROM inserted i
    JOIN candidates c ON c.slot = i.slot AND c.fact_id = i.ready_fact
)
-- One row even when nothing was claimed (id NULL), so `mixed` and `contested` always
-- come back.
SELECT r.*, m.mixed, m.contested{?slot_columns}
FROM mixed m LEFT JOIN claimed r ON true
ORDER BY r.effective, r.run_at, r.job_id

-- name: claim_walk
-- A claim's walk of the lanes `{?lanes}` (queue, priority, shard, disordered, pass,
-- walk_from, share): each one's unclaimed rows in lane order from position walk_from, at
-- most share of them (none when share is not positive); an ordered window only its due
-- rows.
SELECT w.*, h.disordered, h.pass
FROM (SELECT * FROM {?lanes} WHERE share > 0) h
CROSS JOIN LATERAL (
    SELECT o.* FROM (
        SELECT {claim_walk_columns}{?walk_position}
        FROM {?ready_entries} r
        WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
          AND r.lane_seq >= h.walk_from AND (h.disordered OR r.run_at <= %(now)s)
        ORDER BY r.lane_seq
        OFFSET 0) o
    WHERE NOT EXISTS (
          SELECT 1 FROM {?claims} c WHERE c.slot = o.slot AND c.ready_fact = o.fact_id
          OFFSET 0)
      AND NOT EXISTS (
          SELECT 1 FROM {?tombstones} t
          WHERE t.slot = o.slot AND t.ready_fact = o.fact_id OFFSET 0)
    ORDER BY o.lane_seq
    LIMIT h.share
) w

-- name: claim_first_lanes
first_lanes

-- name: claim_second_lanes
second_lanes

-- name: claim_third_lanes
third_lanes

-- name: claim_walk_columns
-- The columns a claim's walk reads of a ready row (`r`): the claimed snapshot's body and
-- the row's place.
r.slot, r.fact_id, r.job_id, r.run_at, r.run_lease, r.priority, r.shard, r.kind, r.queue,
    r.args, r.attempt, r.max_attempts, r.finalized_at, r.created_at, r.errors, r.metadata,
    r.tags, r.unique_key, r.unique_states, r.callback_id, r.callback_timeout_at,
    r.progress, r.lane_seq

-- name: claim_effective
-- The aged priority of a walked row `f` at the claim's `now`: its priority less one per
-- `aging_us` microseconds it has been due, never below 1 (PriorityAging).
CASE WHEN %(aging_us)s::bigint > 0 AND %(now)s::timestamptz > f.run_at
    THEN greatest(1, f.priority - div(
        extract(epoch FROM %(now)s::timestamptz - f.run_at) * 1000000,
        %(aging_us)s::bigint))
    ELSE f.priority END

-- name: claim_in_slot
-- The claim as one ring slot's statement: it reads and writes that slot's partitions by
-- name, never the ring's partitioned parents, so prune's swap of another slot neither
-- makes it wait (prune locks the parents ONLY, and the partitions of its own slot) nor
-- makes it plan again (a swap invalidates the plans that read the parents or the swapped
-- partitions, not those reading a sibling). The engine runs it on the slot where the
-- queue's last claims found their rows, which is the current slot when workers keep up
-- and the backlog's slot when they drain one.
-- It claims only when the slot holds, for every lane it locked, each position from the
-- lane's cursor up to its last row taken: `elsewhere` reports a lane whose window
-- reaches into another slot (a producer that wrote to the previous slot just after a
-- rotation, carried-forward rows, a backlog older than the slot). It then claims and
-- moves nothing, and the engine runs the claim over the whole ring, so FIFO per lane and
-- order across lanes are those of `claim`. `current_slot` is the ring's current slot, to
-- try next; `next_slot` the one the ring rotates into next, whose statement the engine
-- plans ahead once the current slot changed (Claims._warm_next).
{claim_body ready_entries=slot_ready_entries claims=slot_claims tombstones=slot_tombstones walk_position=slot_walk_position refused_elsewhere=slot_refused_elsewhere or_elsewhere=slot_or_elsewhere slot_outputs=slot_outputs slot_columns=slot_columns}

-- name: ring_ready_entries
{s}.ready_entries

-- name: ring_claims
{s}.claims

-- name: ring_tombstones
{s}.tombstones

-- name: slot_ready_entries
{ready_entries_k}

-- name: slot_claims
{claims_k}

-- name: slot_tombstones
{tombstones_k}

-- name: slot_walk_position
, row_number() OVER (ORDER BY r.lane_seq) AS rn

-- name: slot_refused_elsewhere
-- Per walk of a lane (first_lanes, second_lanes, third_lanes): when the walk filled its share, every
-- position from where it began to its last row is in this slot when that row's position
-- equals the beginning plus the rows walked before it (positions are unique and increase
-- along the walk); otherwise the walk saw all the lane's rows here from where it began,
-- and the slot must hold every position from there to the lane's end (next_seq is
-- committed with the rows below it).
, EXISTS (
    SELECT 1 FROM (SELECT * FROM first_lanes UNION ALL SELECT * FROM second_lanes
                   UNION ALL SELECT * FROM third_lanes WHERE share > 0) h
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, max(p.rn) AS last_rn, max(p.lane_seq) AS last_seq
        FROM picked p
        WHERE p.priority = h.priority AND p.shard = h.shard AND p.pass = h.pass) g
    WHERE CASE
        WHEN g.n >= h.share THEN g.last_seq <> h.walk_from + g.last_rn - 1
        ELSE (SELECT count(*) FROM {ready_entries_k} r
              WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
                AND r.lane_seq >= h.walk_from AND r.lane_seq < h.next_seq)
            <> h.next_seq - h.walk_from
        END) AS elsewhere

-- name: slot_or_elsewhere
 OR elsewhere

-- name: slot_outputs
,
        (SELECT elsewhere FROM refused) AS elsewhere,
        (SELECT current_slot FROM {s}.ring_state) AS current_slot,
        (SELECT (current_slot + 1) %% slot_count FROM {s}.ring_state) AS next_slot

-- name: slot_columns
, m.elsewhere, m.current_slot, m.next_slot

-- name: explain_claim
-- Plans the claim on a new backend without claiming anything (warm_up).
EXPLAIN {claim}

-- name: claim_sorted
-- The general claim; `claim` is this statement for windows in lane order or taken whole,
-- used while no lane of the queue holds a longer sorted window.
-- Unless the queue is paused, lock the lane heads nobody else is claiming from and take
-- the best unclaimed rows of their windows (lane_seq >= cursor). A window appended in (run_at, job id) order is
-- walked along the lane index and stops after `limit` rows; only a window that still
-- holds an out-of-order row is sorted. Within one lane the aged priority only improves
-- with age, so each lane's first `limit` rows by (run_at, job id) contain the answer.
-- Aging uses integer microseconds, exactly like the Python PriorityAging. On the walk,
-- OFFSET 0 keeps each NOT EXISTS a per-row index probe (the planner would otherwise
-- build a join against a whole partition when its statistics are stale).
-- The same statement moves the cursor of every ordered lane it took rows from: there the
-- rows taken are a prefix of the lane's unclaimed rows in lane order (a lane has one
-- priority, its window is in (run_at, job id) order and aging only favours older rows),
-- so every row below the last one taken is claimed or tombstoned. Sorted (disordered)
-- windows are left to advance_cursors.
{claim_sorted_body}

-- name: claim_sorted_body
-- The statement of claim_sorted, and of claim_limited with its slots filled.
WITH heads AS (
    SELECT h.queue, h.priority, h.shard, h.claim_seq, l.next_seq,
        (l.disorder_seq >= h.claim_seq) AS disordered,
        -- Read from the head's newest version once it is locked: a writer that retired a
        -- row of this lane committed after this statement's snapshot was taken, so the
        -- walk cannot see its tombstone. The lane is left alone (see `contested`).
        CASE WHEN h.retired_xid IS NULL THEN false
            ELSE NOT pg_visible_in_snapshot(h.retired_xid, pg_current_snapshot())
        END AS contested
    FROM {s}.claim_heads h
    JOIN {s}.lanes l USING (queue, priority, shard)
    WHERE h.queue = %(queue)s
      -- A lane with nothing appended past its cursor is not locked: any ready row this
      -- statement can see was committed together with a lanes.next_seq above it.
      AND l.next_seq > h.claim_seq
      -- a paused queue hands out nothing
      AND NOT EXISTS (
          SELECT 1 FROM awa.queue_meta m WHERE m.queue = %(queue)s AND m.paused)
      {?keyed_heads}
    ORDER BY h.priority, h.shard
    FOR UPDATE OF h SKIP LOCKED
), picked AS (
    SELECT w.*, h.disordered
    FROM (SELECT * FROM heads WHERE NOT contested) h
    CROSS JOIN LATERAL (
        (SELECT o.* FROM (
             SELECT r.slot, r.fact_id, r.job_id, r.run_at, r.run_lease, r.priority, r.shard,
                 r.kind, r.queue, r.args, r.attempt, r.max_attempts, r.finalized_at,
                 r.created_at, r.errors, r.metadata, r.tags, r.unique_key,
                 r.unique_states, r.callback_id, r.callback_timeout_at, r.progress,
                 r.lane_seq
             FROM {s}.ready_entries r
             WHERE NOT h.disordered
               AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
               AND r.lane_seq >= h.claim_seq AND r.run_at <= %(now)s
             ORDER BY r.lane_seq
             OFFSET 0) o
         WHERE NOT EXISTS (
               SELECT 1 FROM {s}.claims c WHERE c.slot = o.slot AND c.ready_fact = o.fact_id
               OFFSET 0)
           AND NOT EXISTS (
               SELECT 1 FROM {s}.tombstones t
               WHERE t.slot = o.slot AND t.ready_fact = o.fact_id OFFSET 0)
         ORDER BY o.lane_seq
         LIMIT %(limit)s)
        UNION ALL
        (SELECT o.* FROM (
             SELECT r.slot, r.fact_id, r.job_id, r.run_at, r.run_lease, r.priority, r.shard,
                 r.kind, r.queue, r.args, r.attempt, r.max_attempts, r.finalized_at,
                 r.created_at, r.errors, r.metadata, r.tags, r.unique_key,
                 r.unique_states, r.callback_id, r.callback_timeout_at, r.progress,
                 r.lane_seq
             FROM {s}.ready_entries r
             WHERE h.disordered
               AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
               AND r.lane_seq >= h.claim_seq AND r.run_at <= %(now)s
             OFFSET 0) o
         WHERE NOT EXISTS (
               SELECT 1 FROM {s}.claims c WHERE c.slot = o.slot AND c.ready_fact = o.fact_id)
           AND NOT EXISTS (
               SELECT 1 FROM {s}.tombstones t
               WHERE t.slot = o.slot AND t.ready_fact = o.fact_id)
         ORDER BY o.run_at, o.job_id
         LIMIT %(limit)s)
    ) w
), candidates AS (
    SELECT p.* FROM (
        SELECT p.*{?key_rank}
        FROM (
            SELECT p.*,
                CASE WHEN %(aging_us)s::bigint > 0 AND %(now)s::timestamptz > p.run_at
                    THEN greatest(1, p.priority - div(
                        extract(epoch FROM %(now)s::timestamptz - p.run_at) * 1000000,
                        %(aging_us)s::bigint))
                    ELSE p.priority END AS effective
            FROM picked p) p) p
    {?room}
    ORDER BY {?by_key_rank}p.effective, p.run_at, p.job_id
    LIMIT %(limit)s
), inserted AS (
    INSERT INTO {s}.claims (slot, claim_id, ready_fact, job_id, run_lease, queue, attempted_at,
        deadline_at)
    SELECT slot, nextval('{s}.fact_seq'), fact_id, job_id, run_lease + 1, %(queue)s, %(now)s,
        %(deadline_at)s
    FROM (SELECT * FROM candidates ORDER BY effective, run_at, job_id) ordered
    RETURNING slot, claim_id, ready_fact, job_id
), advanced AS (
    UPDATE {s}.claim_heads h SET claim_seq = a.next_seq
    FROM (SELECT c.priority, c.shard, max(c.lane_seq) + 1 AS next_seq
          FROM candidates c
          WHERE NOT c.disordered
          GROUP BY c.priority, c.shard) a
    WHERE h.queue = %(queue)s AND h.priority = a.priority AND h.shard = a.shard
      AND a.next_seq > h.claim_seq
), mixed AS (
    -- Whether the next claim needs this statement again (see claim): a sorted window
    -- longer than this batch (claim takes only whole ones).
    SELECT EXISTS (SELECT 1 FROM heads
                   WHERE disordered AND next_seq - claim_seq > %(limit)s)
        OR EXISTS (SELECT 1 FROM picked p
                   WHERE p.unique_key IS NOT NULL AND p.unique_states IS NOT NULL
                     AND get_bit(p.unique_states, 1) <> get_bit(p.unique_states, 2))
        AS mixed,
        -- A lane was left alone (see heads): the engine claims again at once.
        EXISTS (SELECT 1 FROM heads WHERE contested) AS contested,
        {quiet_commit} AS quiet
), claimed AS (
    -- The claimed snapshots, exactly as the job_facts view resolves an open receipt
    -- without a lease, so the claimer needs no second read (the walk carried the bodies).
    SELECT i.slot, i.claim_id, i.ready_fact, i.job_id, c.priority, c.shard,
        c.job_id AS id, c.kind, c.queue, c.args, 'running' AS state,
        (c.attempt + 1)::smallint AS attempt, c.max_attempts, c.run_at,
        %(now)s::timestamptz AS heartbeat_at, %(deadline_at)s::timestamptz AS deadline_at,
        %(now)s::timestamptz AS attempted_at, c.finalized_at, c.created_at, c.errors,
        c.metadata, c.tags, c.unique_key, c.unique_states, c.callback_id,
        c.callback_timeout_at, c.run_lease + 1 AS run_lease, c.progress, c.disordered,
        c.effective
    FROM inserted i
    JOIN candidates c ON c.slot = i.slot AND c.fact_id = i.ready_fact
)
-- One row even when nothing was claimed (id NULL), so `mixed` and `contested` always
-- come back.
SELECT r.*, m.mixed, m.contested
FROM mixed m LEFT JOIN claimed r ON true
ORDER BY r.effective, r.run_at, r.job_id

-- name: claim_limited
-- claim_sorted under a per-key limit (ADR 0029), in the transaction that first locked the
-- keys of the lanes it may take from and counted their live attempts: a keyed lane (a
-- concurrency key's own, shard >= keyed_base) is visited only when it is in `room_shards`
-- (the rotation's window, with room), at most its room is taken from the key's lanes
-- (ranked in the claim's order, so each lane's take is a prefix), and the batch takes
-- every key's first job before any key's second.
{claim_sorted_body keyed_heads=limited_heads key_rank=limited_key_rank room=limited_room by_key_rank=limited_by_key_rank}

-- name: limited_heads

      AND (h.shard < %(keyed_base)s OR h.shard = ANY(%(room_shards)s::int[]))

-- name: limited_key_rank
, CASE WHEN p.shard >= %(keyed_base)s
            THEN row_number() OVER (
                PARTITION BY p.shard ORDER BY p.effective, p.run_at, p.job_id)
            ELSE 1 END AS key_rank

-- name: limited_room

    WHERE p.key_rank <= coalesce(
        (SELECT rm.free
         FROM unnest(%(room_shards)s::int[], %(room_free)s::int[]) AS rm(shard, free)
         WHERE rm.shard = p.shard),
        2147483647)

-- name: limited_by_key_rank
p.key_rank, 

-- name: keyed_lanes_with_work
-- The keyed lanes (a concurrency key's own, ADR 0029) with rows past their cursor, one row
-- per key: first those after `after` (the shard this process's last limited claim walked
-- to), then from the first again; at most `keys_wanted`.
SELECT shard FROM (
    SELECT DISTINCT h.shard
    FROM {s}.claim_heads h
    JOIN {s}.lanes l USING (queue, priority, shard)
    WHERE h.queue = %(queue)s AND h.shard >= %(keyed_base)s AND l.next_seq > h.claim_seq
) k
ORDER BY shard <= %(after)s, shard
LIMIT %(keys_wanted)s

-- name: lock_keyed_lanes
-- The keys' transaction-scoped locks (by their lane's shard, across priorities), in the
-- order given (sorted by the caller). A statement of its own: the count that follows
-- starts after they are held and sees every claim committed before.
SELECT count(pg_advisory_xact_lock(
    hashtextextended('awa.concurrency:{s}:' || %(queue)s || ':' || k, 0))) AS n
FROM unnest(%(shards)s::int[]) AS k

-- name: live_per_keyed_lane
-- Each keyed lane's live attempts: its ready rows (any priority) with an open claim, a
-- claim without a closure (running, or waiting_external when its lease waits), as the
-- job_facts view reads them.
SELECT r.shard, count(*) AS live
FROM {s}.ready_entries r
JOIN {s}.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
WHERE r.queue = %(queue)s AND r.priority = ANY('{1,2,3,4}'::smallint[])
  AND r.shard = ANY(%(shards)s::int[])
  AND NOT EXISTS (
      SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
  AND NOT EXISTS (
      SELECT 1 FROM {s}.tombstones t WHERE t.slot = r.slot AND t.ready_fact = r.fact_id)
GROUP BY r.shard

-- name: contested_claims
-- Rows claim_sorted just claimed from sorted windows that another claimer claimed, or a
-- cancel tombstoned, in between that statement's snapshot and its lock of the lane
-- head: a sorted window does not move its cursor past what was taken, so the walk,
-- reading under the older snapshot, could not see the other's rows. This statement
-- runs after the lane locks are held, so its snapshot sees every such commit.
SELECT i.claim_id
FROM unnest(%(slots)s::int[], %(facts)s::bigint[], %(claims)s::bigint[])
    AS i(slot, ready_fact, claim_id)
WHERE EXISTS (SELECT 1 FROM {s}.claims c
              WHERE c.slot = i.slot AND c.ready_fact = i.ready_fact
                AND c.claim_id <> i.claim_id)
   OR EXISTS (SELECT 1 FROM {s}.tombstones t
              WHERE t.slot = i.slot AND t.ready_fact = i.ready_fact)
LIMIT 1

-- name: advance_cursors
-- Move each touched lane's cursor over its now contiguous claimed / tombstoned prefix,
-- and mark the lane as a retiring writer does (ADR 0006, "Retiring unclaimed rows"):
-- rows claimed here may sit above the cursor, where a claimer whose snapshot predates
-- this commit cannot see them; the mark turns it away from the lane instead of letting
-- it take them again.
-- Rows of transactions still in flight sit above the committed next_seq, so the cursor
-- can never pass them. Both probes walk the (lane, lane_seq) index; OFFSET 0 keeps the
-- NOT EXISTS checks per-row index probes.
WITH touched AS (
    SELECT DISTINCT q AS queue, p AS priority, sh AS shard
    FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[])
        AS i(q, p, sh)
), target AS (
    SELECT h.queue, h.priority, h.shard, h.claim_seq, coalesce(
        (SELECT r.lane_seq FROM {s}.ready_entries r
         WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
           AND r.lane_seq >= h.claim_seq
           AND NOT EXISTS (SELECT 1 FROM {s}.claims c
                           WHERE c.slot = r.slot AND c.ready_fact = r.fact_id OFFSET 0)
           AND NOT EXISTS (SELECT 1 FROM {s}.tombstones t
                           WHERE t.slot = r.slot AND t.ready_fact = r.fact_id OFFSET 0)
         ORDER BY r.lane_seq LIMIT 1),
        (SELECT r.lane_seq + 1 FROM {s}.ready_entries r
         WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
           AND r.lane_seq >= h.claim_seq
         ORDER BY r.lane_seq DESC LIMIT 1),
        h.claim_seq) AS new_seq
    FROM {s}.claim_heads h JOIN touched USING (queue, priority, shard)
)
UPDATE {s}.claim_heads h SET claim_seq = greatest(h.claim_seq, t.new_seq),
    retired_xid = pg_current_xact_id()
FROM target t
WHERE h.queue = t.queue AND h.priority = t.priority AND h.shard = t.shard

-- name: snapshots
SELECT * FROM {s}.jobs_resolved WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id

-- name: complete_short
-- The live attempts among (job_id, run_lease) pairs, and when none of them has a lease or
-- a unique key (the common short attempt), their `completed` closures in the same
-- statement; otherwise nothing is closed here and the caller reads the snapshots first.
WITH open AS (
    SELECT c.slot, c.claim_id, c.job_id, c.run_lease, c.queue,
        (l.job_id IS NOT NULL) AS has_lease, coalesce(l.waiting, false) AS waiting,
        r.unique_key, r.unique_states
    FROM (SELECT DISTINCT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[])
          AS i(job_id, run_lease)) i
    -- A claim's attempt is its ready row's plus one: found through ready_entries (job_id)
    -- and the claim probe (claims has no index by job id).
    JOIN {s}.ready_entries r ON r.job_id = i.job_id AND r.run_lease = i.run_lease - 1
    JOIN {s}.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
    LEFT JOIN {s}.leases l
        ON l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id
    WHERE NOT EXISTS (
        SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
), closed AS (
    INSERT INTO {s}.closures (slot, claim_id, fact_id, queue, outcome, finalized_at)
    SELECT slot, claim_id, nextval('{s}.fact_seq'), queue, 'completed', %(now)s
    FROM open
    WHERE NOT EXISTS (SELECT 1 FROM open w WHERE w.has_lease OR w.unique_key IS NOT NULL)
    ORDER BY slot, claim_id
    ON CONFLICT DO NOTHING
    RETURNING claim_id
)
SELECT o.*, (o.claim_id IN (SELECT claim_id FROM closed)) AS closed,
    NOT EXISTS (SELECT 1 FROM open w WHERE w.has_lease OR w.unique_key IS NOT NULL)
        AS short
FROM open o

-- name: complete_receipts_counted
-- Completion of attempts whose receipt (slot, claim_id) this process took itself and
-- that carry no unique key: no lookup by job id. An attempt with a lease row is left to
-- the general path (reported in `leased`). The receipt must still exist (a slot pruned
-- after a rescue never takes a closure), and the closure key arbitrates racing
-- finalisers exactly as in close_claims. One statement on its own (autocommit), with the
-- counters and completion buckets of the attempts it closed (counters last, key order).
-- The engine runs it first without its ON CONFLICT clause: a speculative
-- insertion writes a second WAL record per row (its confirmation), and closures already
-- committed are filtered out by NOT EXISTS. A closure racing in from another finaliser
-- then fails the statement with a unique violation (nothing written), and the engine
-- runs it again with ON CONFLICT DO NOTHING, where the key arbitrates as before.
{complete_receipts_body claims=ring_claims closures=ring_closures}

-- name: complete_receipts_arbitrated
-- complete_receipts_counted again after a racing finaliser's closure failed it: the
-- closure key decides.
{complete_receipts_body claims=ring_claims closures=ring_closures on_conflict=on_conflict_do_nothing}

-- name: complete_in_slot_counted
-- complete_receipts_counted for receipts that all name one ring slot: it reads that
-- slot's claims and writes its closures by name, never through the partitioned parents,
-- so it neither plans nor locks the other slots' partitions, and prune's swap of another
-- slot does not make it plan again (as claim_in_slot). A receipt whose claim was swapped
-- out or carried forward closes nothing here and is looked up by job id, as with the
-- ring-wide form.
{complete_receipts_body claims=slot_claims closures=slot_closures}

-- name: complete_in_slot_arbitrated
-- complete_in_slot_counted after a racing finaliser's closure failed it.
{complete_receipts_body claims=slot_claims closures=slot_closures on_conflict=on_conflict_do_nothing}

-- name: ring_closures
{s}.closures

-- name: slot_closures
{closures_k}

-- name: complete_receipts_body
-- The receipt completion; its claims and closures tables are filled in by the ring-wide
-- and the in-slot forms.
WITH i AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(slots)s::int[],
        %(claims)s::bigint[], %(queues)s::text[]) AS i(job_id, run_lease, slot, claim_id, queue)
), leased AS (
    SELECT i.job_id FROM i
    WHERE EXISTS (SELECT 1 FROM {s}.leases l
                  WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease
                    AND l.claim_id = i.claim_id OFFSET 0)
), closed AS (
    INSERT INTO {?closures} (slot, claim_id, fact_id, queue, outcome, finalized_at)
    SELECT i.slot, i.claim_id, nextval('{s}.fact_seq'), i.queue, 'completed', %(now)s
    FROM i
    WHERE i.job_id NOT IN (SELECT job_id FROM leased)
      AND EXISTS (SELECT 1 FROM {?claims} c
                  WHERE c.slot = i.slot AND c.claim_id = i.claim_id
                    AND c.job_id = i.job_id AND c.run_lease = i.run_lease OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM {?closures} x
                      WHERE x.slot = i.slot AND x.claim_id = i.claim_id OFFSET 0)
    ORDER BY i.slot, i.claim_id
    {?on_conflict}
    RETURNING claim_id, queue
), per_queue AS (
    SELECT queue, count(*) AS n FROM closed GROUP BY queue
), counted AS (
    INSERT INTO {s}.queue_counts AS q (queue, state, bucket, n)
    SELECT p.queue, v.st::awa.job_state, (24 + pg_backend_pid() %% 8)::smallint, v.d
    FROM per_queue p
    CROSS JOIN LATERAL (VALUES ('completed', p.n), ('running', -p.n)) AS v(st, d)
    ORDER BY p.queue, v.st
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = q.n + EXCLUDED.n
), recent AS (
    INSERT INTO {s}.completions AS c (queue, minute, bucket, n)
    SELECT p.queue, %(minute)s, (8 + pg_backend_pid() %% 8)::smallint, p.n
    FROM per_queue p
    ORDER BY p.queue
    ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n
)
SELECT claim_id, NULL::bigint AS leased FROM closed
UNION ALL
SELECT NULL, job_id FROM leased

-- name: on_conflict_do_nothing
ON CONFLICT DO NOTHING

-- name: close_claims
-- The closure key (slot, claim_id) is the arbiter: of two racing finalisers exactly one
-- inserts, the other gets no row back and reports stale.
INSERT INTO {s}.closures (slot, claim_id, fact_id, queue, outcome, finalized_at)
SELECT slot, claim_id, nextval('{s}.fact_seq'), queue, outcome, %(now)s
FROM unnest(%(slots)s::int[], %(claims)s::bigint[], %(queues)s::text[], %(outcomes)s::text[])
    AS i(slot, claim_id, queue, outcome)
ORDER BY slot, claim_id
ON CONFLICT DO NOTHING
RETURNING claim_id

-- name: lock_leases
-- Lease writers of one attempt take its transaction lock first, in job id order (the
-- lease ring has no unique key on (job_id, run_lease) alone), so the next statement sees
-- every lease row committed before it. Returns the current lease slot, read after the
-- locks.
SELECT awa.queue_storage_lock_leases(%(schema)s, %(ids)s::bigint[]) AS lease_slot

-- name: heartbeat
-- Refresh the lease of running attempts in the current lease slot: in place when the row
-- is there, moved out of an older slot (delete + insert) otherwise, materialised from the
-- claim when the attempt has none. Waiting attempts, closed claims and unknown leases are
-- refused. Runs after lock_leases in the same transaction; %(slot)s is what it returned,
-- so the planner sees which partition is current.
WITH live AS (
    SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue, c.deadline_at, r.progress,
        r.metadata, r.callback_id, r.callback_timeout_at
    FROM (SELECT DISTINCT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[])
          AS i(job_id, run_lease)) i
    -- A claim's attempt is its ready row's plus one: found through ready_entries (job_id)
    -- and the claim probe (claims has no index by job id).
    JOIN {s}.ready_entries r ON r.job_id = i.job_id AND r.run_lease = i.run_lease - 1
    JOIN {s}.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
    WHERE NOT EXISTS (
        SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
), moved AS (
    -- A lease row is written from its claim, so its claim_id names the attempt: matching
    -- it against the open claims needs no join (a join against the CTE was planned as a
    -- nested loop scanning the slot once per attempt); job_id = ANY is the index range.
    DELETE FROM {s}.leases l
    WHERE l.job_id = ANY(%(ids)s::bigint[])
      AND l.claim_id = ANY(ARRAY(SELECT claim_id FROM live))
      AND l.lease_slot <> %(slot)s::int AND NOT l.waiting
    RETURNING l.*
), refreshed AS (
    UPDATE {s}.leases l SET heartbeat_at = %(now)s
    WHERE l.job_id = ANY(%(ids)s::bigint[])
      AND l.claim_id = ANY(ARRAY(SELECT claim_id FROM live))
      AND l.lease_slot = %(slot)s::int AND NOT l.waiting
    RETURNING l.job_id, l.run_lease
), placed AS (
    INSERT INTO {s}.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue,
        waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
        deadline_at)
    SELECT %(slot)s::int, n.*
    FROM (
        SELECT m.job_id, m.run_lease, m.claim_slot, m.claim_id, m.queue, false,
            %(now)s::timestamptz, m.progress, m.metadata, m.callback_id,
            m.callback_timeout_at, m.deadline_at
        FROM moved m
        UNION ALL
        SELECT v.job_id, v.run_lease, v.slot, v.claim_id, v.queue, false,
            %(now)s::timestamptz, v.progress, v.metadata, v.callback_id,
            v.callback_timeout_at, v.deadline_at
        FROM live v
        WHERE NOT EXISTS (
            SELECT 1 FROM {s}.leases l
            WHERE l.job_id = v.job_id AND l.run_lease = v.run_lease
              AND l.claim_id = v.claim_id)
    ) n
    RETURNING job_id, run_lease
)
SELECT job_id, run_lease FROM refreshed
UNION ALL
SELECT job_id, run_lease FROM placed

-- name: save_lease
-- The whole lease of one open attempt, written into the current lease slot %(slot)s (as
-- returned by lock_leases): in place, moved out of an older slot, or materialised. No row
-- when the claim is closed. awa.queue_storage_save_lease is the same for SQL callers.
WITH live AS (
    SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue FROM {s}.claims c
    WHERE c.slot = %(claim_slot)s AND c.claim_id = %(claim_id)s AND c.job_id = %(job_id)s
      AND NOT EXISTS (
          SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
), moved AS (
    DELETE FROM {s}.leases l USING live
    WHERE l.job_id = live.job_id AND l.run_lease = live.run_lease
      AND l.claim_id = live.claim_id AND l.lease_slot <> %(slot)s::int
    RETURNING l.job_id
), refreshed AS (
    UPDATE {s}.leases l SET waiting = %(waiting)s, heartbeat_at = %(heartbeat_at)s,
        progress = %(progress)s::jsonb, metadata = %(metadata)s::jsonb,
        callback_id = %(callback_id)s, callback_timeout_at = %(callback_timeout_at)s,
        deadline_at = %(deadline_at)s
    FROM live
    WHERE l.lease_slot = %(slot)s::int AND l.job_id = live.job_id
      AND l.run_lease = live.run_lease AND l.claim_id = live.claim_id
    RETURNING l.job_id
), placed AS (
    INSERT INTO {s}.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue,
        waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
        deadline_at)
    SELECT %(slot)s::int, live.job_id, live.run_lease, live.slot, live.claim_id, live.queue,
        %(waiting)s, %(heartbeat_at)s, %(progress)s::jsonb, %(metadata)s::jsonb,
        %(callback_id)s, %(callback_timeout_at)s, %(deadline_at)s
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM refreshed)
    RETURNING job_id
)
SELECT job_id, (SELECT count(*) FROM moved) AS moved FROM live

-- name: lease_by_callback
SELECT l.job_id, l.run_lease FROM {s}.leases l
WHERE l.callback_id = %(callback_id)s
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = l.claim_slot AND x.claim_id = l.claim_id)

-- name: save_callback_expressions
-- The row belongs to the attempt registering now: an id used before (by an attempt that
-- ended without a resolve, whose row cleanup has not reached yet) is taken over whole.
INSERT INTO awa.callback_expressions
    (callback_id, queue_schema, job_id, run_lease, filter, on_complete, on_fail, transform)
VALUES (%(callback_id)s, %(schema)s, %(job_id)s, %(run_lease)s, %(filter)s, %(on_complete)s,
        %(on_fail)s, %(transform)s)
ON CONFLICT (callback_id) DO UPDATE SET
    queue_schema = EXCLUDED.queue_schema, job_id = EXCLUDED.job_id,
    run_lease = EXCLUDED.run_lease, filter = EXCLUDED.filter,
    on_complete = EXCLUDED.on_complete, on_fail = EXCLUDED.on_fail,
    transform = EXCLUDED.transform, created_at = EXCLUDED.created_at

-- name: load_callback_expressions
SELECT filter, on_complete, on_fail, transform FROM awa.callback_expressions
WHERE callback_id = %(callback_id)s AND job_id = %(job_id)s AND run_lease = %(run_lease)s

-- name: drop_callback_expressions
DELETE FROM awa.callback_expressions WHERE callback_id = %(callback_id)s

-- name: drop_attempt_callback_expressions
-- The expressions an attempt registered under a callback id it has since replaced.
DELETE FROM awa.callback_expressions
WHERE callback_id = %(callback_id)s AND job_id = %(job_id)s AND run_lease = %(run_lease)s

-- name: cleanup_callback_expressions
-- Rows of callbacks that ended without a resolve (rescue, cancel, operator retry).
DELETE FROM awa.callback_expressions e
WHERE e.callback_id IN (
    SELECT c.callback_id FROM awa.callback_expressions c
    WHERE c.queue_schema = %(schema)s AND c.created_at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.callback_id = c.callback_id)
    ORDER BY c.created_at
    LIMIT %(limit)s
)

-- name: due_deferred
DELETE FROM {s}.deferred_jobs d
WHERE d.job_id IN (
    SELECT job_id FROM {s}.deferred_jobs
    WHERE run_at <= %(now)s
      -- a row from before migration 0395 may hold a run_at no read can decode: it stays
      -- here (reads skip and report it) rather than fail every promotion
      AND awa.run_at_in_range(run_at)
    ORDER BY run_at, job_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING d.*

-- name: take_deferred
DELETE FROM {s}.deferred_jobs WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING *

-- name: stale_heartbeats
-- A lease's heartbeat is never older than its claim, so the claim's attempted_at bounds
-- the index range.
SELECT c.job_id, c.run_lease FROM {s}.claims c
LEFT JOIN {s}.leases l
    ON l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id
WHERE c.attempted_at < %(cutoff)s
  AND coalesce(l.heartbeat_at, c.attempted_at) < %(cutoff)s
  AND NOT coalesce(l.waiting, false)
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
ORDER BY c.job_id

-- name: expired_deadlines
-- A materialised lease carries the attempt's deadline (an operator may have moved it);
-- otherwise the receipt does.
SELECT d.job_id, d.run_lease FROM (
    SELECT c.slot, c.claim_id, c.job_id, c.run_lease FROM {s}.claims c
    WHERE c.deadline_at IS NOT NULL AND c.deadline_at <= %(now)s
      AND NOT EXISTS (
        SELECT 1 FROM {s}.leases l
        WHERE l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id)
    UNION ALL
    SELECT c.slot, c.claim_id, c.job_id, c.run_lease FROM {s}.leases l
    JOIN {s}.claims c ON c.slot = l.claim_slot AND c.claim_id = l.claim_id
    WHERE l.deadline_at IS NOT NULL AND l.deadline_at <= %(now)s AND NOT l.waiting
) d
WHERE NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = d.slot AND x.claim_id = d.claim_id)
ORDER BY d.job_id

-- name: expired_callbacks
-- Lease rows of closed attempts wait for their slot's TRUNCATE; only open ones count.
SELECT l.job_id, l.run_lease FROM {s}.leases l
WHERE l.waiting AND l.callback_timeout_at IS NOT NULL AND l.callback_timeout_at <= %(now)s
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = l.claim_slot AND x.claim_id = l.claim_id)
ORDER BY l.job_id

-- name: add_completions
-- Completed jobs per (queue, UTC minute of finalized_at); signed, like queue_counts. Buckets
-- 0-7 by backend; completion by receipt writes 8-15, so neither waits for the other.
INSERT INTO {s}.completions AS c (queue, minute, bucket, n)
SELECT q, m, (pg_backend_pid() %% 8)::smallint, d
FROM unnest(%(queues)s::text[], %(minutes)s::timestamptz[], %(deltas)s::bigint[]) AS i(q, m, d)
ORDER BY q, m
ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: add_completions_in
-- add_completions into one given bucket: prune's, where it counts the completed jobs it
-- drops (snapshots.PRUNED_COMPLETIONS_BUCKET).
INSERT INTO {s}.completions AS c (queue, minute, bucket, n)
SELECT q, m, %(bucket)s::smallint, d
FROM unnest(%(queues)s::text[], %(minutes)s::timestamptz[], %(deltas)s::bigint[]) AS i(q, m, d)
ORDER BY q, m
ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: prune_completions
DELETE FROM {s}.completions WHERE minute < %(before)s

-- name: queue_overview
-- Everything queue_counts() needs in one round trip, from control rows only: folded
-- counters, queue settings, full completion buckets, the jobs completed inside the partial
-- boundary minute (resolved by the caller), and per queue with available jobs the oldest
-- one: the first unclaimed row of each ordered lane window, or the minimum of a window
-- that holds an out-of-order row.
WITH counts AS (
    SELECT queue, state, sum(n)::bigint AS n FROM {s}.queue_counts GROUP BY queue, state
), waiting AS (
    SELECT queue FROM counts WHERE state = 'available' AND n > 0
)
SELECT 'count' AS kind, queue, state::text AS state, n, NULL::bigint AS job_id,
    NULL::boolean AS paused, NULL::timestamptz AS oldest
FROM counts
UNION ALL
SELECT 'meta', queue, NULL, NULL, NULL, paused, NULL FROM awa.queue_meta
UNION ALL
SELECT 'recent', queue, NULL, sum(n)::bigint, NULL, NULL, NULL FROM {s}.completions
WHERE minute >= %(full_from)s GROUP BY queue
UNION ALL
SELECT 'edge', NULL, NULL, NULL, e.job_id, NULL, NULL FROM (
    SELECT c.job_id FROM {s}.closures x
    JOIN {s}.claims c ON c.slot = x.slot AND c.claim_id = x.claim_id
    WHERE x.outcome = 'completed' AND x.finalized_at > %(lo)s AND x.finalized_at < %(hi)s
    UNION
    SELECT w.job_id FROM {s}.done_entries w
    WHERE w.state = 'completed' AND w.finalized_at > %(lo)s AND w.finalized_at < %(hi)s
) e
UNION ALL
SELECT 'oldest', h.queue, NULL, NULL, NULL, NULL, min(w.run_at)
FROM {s}.claim_heads h
JOIN {s}.lanes l USING (queue, priority, shard)
CROSS JOIN LATERAL (
    (SELECT r.run_at FROM {s}.ready_entries r
     WHERE l.disorder_seq < h.claim_seq
       AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
       AND r.lane_seq >= h.claim_seq
       AND NOT EXISTS (
           SELECT 1 FROM {s}.claims c WHERE c.slot = r.slot AND c.ready_fact = r.fact_id
           OFFSET 0)
       AND NOT EXISTS (
           SELECT 1 FROM {s}.tombstones t WHERE t.slot = r.slot AND t.ready_fact = r.fact_id
           OFFSET 0)
     ORDER BY r.lane_seq
     LIMIT 1)
    UNION ALL
    (SELECT min(r.run_at) FROM {s}.ready_entries r
     WHERE l.disorder_seq >= h.claim_seq
       AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
       AND r.lane_seq >= h.claim_seq
       AND NOT EXISTS (
           SELECT 1 FROM {s}.claims c WHERE c.slot = r.slot AND c.ready_fact = r.fact_id)
       AND NOT EXISTS (
           SELECT 1 FROM {s}.tombstones t WHERE t.slot = r.slot AND t.ready_fact = r.fact_id))
) w
WHERE h.queue IN (SELECT queue FROM waiting)
GROUP BY h.queue

-- name: newest_job_ids
-- A keyset page of candidate job ids for list_jobs, newest first: each fact table is
-- walked backwards along its job_id index from below the cursor and stops after `limit`
-- distinct ids, so a page never reads or sorts the whole history. Every filter keeps the
-- ids of which some fact matches it (a job's head fact is one of its facts), so it drops
-- only ids that cannot match; on a ready row the state is judged as job_facts does, by
-- index probes of its claim, closure and tombstone. The caller resolves the ids and
-- applies the full filter. The top `limit` of the union is exact: an id among them is
-- within the first `limit` distinct ids of the table that holds it.
SELECT job_id FROM (
    (SELECT DISTINCT r.job_id FROM {s}.ready_entries r
     WHERE r.job_id < %(before)s
       AND (%(kind)s::text IS NULL OR r.kind = %(kind)s::text)
       AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
       AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(r.tags))
       AND (%(state)s::text IS NULL
            OR (%(state)s::text = 'available'
                AND NOT EXISTS (SELECT 1 FROM {s}.claims c
                                WHERE c.slot = r.slot AND c.ready_fact = r.fact_id)
                AND NOT EXISTS (SELECT 1 FROM {s}.tombstones t
                                WHERE t.slot = r.slot AND t.ready_fact = r.fact_id))
            OR (%(state)s::text IN ('running', 'waiting_external')
                AND EXISTS (SELECT 1 FROM {s}.claims c
                            WHERE c.slot = r.slot AND c.ready_fact = r.fact_id
                              AND NOT EXISTS (SELECT 1 FROM {s}.closures x
                                              WHERE x.slot = c.slot
                                                AND x.claim_id = c.claim_id)))
            OR (%(state)s::text = 'completed'
                AND EXISTS (SELECT 1 FROM {s}.claims c
                            JOIN {s}.closures x ON x.slot = c.slot AND x.claim_id = c.claim_id
                            WHERE c.slot = r.slot AND c.ready_fact = r.fact_id
                              AND x.outcome = 'completed')))
     ORDER BY r.job_id DESC LIMIT %(limit)s)
    UNION
    (SELECT DISTINCT d.job_id FROM {s}.deferred_jobs d
     WHERE d.job_id < %(before)s
       AND (%(kind)s::text IS NULL OR d.kind = %(kind)s::text)
       AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
       AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(d.tags))
       AND (%(state)s::text IS NULL OR d.state = %(state)s::text::awa.job_state)
     ORDER BY d.job_id DESC LIMIT %(limit)s)
    UNION
    (SELECT DISTINCT w.job_id FROM {s}.done_entries w
     WHERE w.job_id < %(before)s
       AND (%(kind)s::text IS NULL OR w.kind = %(kind)s::text)
       AND (%(queue)s::text IS NULL OR w.queue = %(queue)s::text)
       AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(w.tags))
       AND (%(state)s::text IS NULL OR w.state = %(state)s::text::awa.job_state)
     ORDER BY w.job_id DESC LIMIT %(limit)s)
) candidates
ORDER BY job_id DESC
LIMIT %(limit)s

-- name: queue_depths
-- The metrics' cheap depth (queue_depths): available jobs per queue as the sum of its
-- lanes' head-cursor differences (lanes.next_seq - claim_heads.claim_seq: a row retired
-- above a cursor counts until a claim passes it), with the run_at of the first row at
-- each lane's cursor (one index probe per lane) as the oldest; the other live states from
-- the folded counters. No job row is counted and no claim or tombstone is probed.
WITH heads AS (
    SELECT h.queue, h.priority, h.shard, h.claim_seq, l.next_seq
    FROM {s}.claim_heads h
    JOIN {s}.lanes l USING (queue, priority, shard)
)
SELECT h.queue, 'available' AS state,
    sum(greatest(h.next_seq - h.claim_seq, 0))::bigint AS n, min(w.run_at) AS oldest
FROM heads h
LEFT JOIN LATERAL (
    SELECT r.run_at FROM {s}.ready_entries r
    WHERE h.next_seq > h.claim_seq
      AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
      AND r.lane_seq >= h.claim_seq
    ORDER BY r.lane_seq
    LIMIT 1
) w ON true
GROUP BY h.queue
UNION ALL
SELECT queue, state::text, sum(n)::bigint, NULL
FROM {s}.queue_counts
WHERE state IN ('scheduled', 'retryable', 'running', 'waiting_external')
GROUP BY queue, state

-- name: kind_counts
-- Operator read (cached by its callers): a scan of the resolved job snapshots.
SELECT kind,
       count(*) AS job_count,
       count(DISTINCT queue) AS queue_count,
       count(*) FILTER (
           WHERE state = 'completed' AND finalized_at > %(hour_ago)s::timestamptz
       ) AS completed_last_hour
FROM {s}.jobs_resolved
GROUP BY kind

-- name: finalized_timeseries
-- Sessions run in UTC, so date_trunc cuts UTC minutes.
SELECT date_trunc('minute', finalized_at) AS bucket, state::text AS state, count(*) AS n
FROM {s}.jobs_resolved
WHERE finalized_at >= %(since)s::timestamptz
  AND state IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2

-- name: finalized_by_queue
-- Completed jobs from the per-minute completion buckets, kept two hours (COMPLETIONS_KEPT),
-- leaving out the bucket where prune subtracts what it drops, so a minute counts every job
-- completed in it long after prune took the rows; failed and cancelled jobs from the
-- snapshots still held. Sessions run in UTC, so date_trunc cuts UTC minutes.
SELECT minute AS bucket, queue, 'completed' AS state, sum(n)::bigint AS n
FROM {s}.completions
WHERE minute >= %(since)s::timestamptz AND bucket <> %(pruned_bucket)s::smallint
GROUP BY 1, 2
UNION ALL
SELECT date_trunc('minute', finalized_at), queue, state::text, count(*)
FROM {s}.jobs_resolved
WHERE finalized_at >= %(since)s::timestamptz
  AND state IN ('failed', 'cancelled')
GROUP BY 1, 2, 3

-- name: snapshot_recordset
-- The columns of a whole snapshot in the jsonb_to_recordset input the inserts read (the
-- objects that row_json builds).
job_id bigint, kind text, queue text, args jsonb, priority smallint, attempt smallint, max_attempts smallint, run_at timestamptz, heartbeat_at timestamptz, deadline_at timestamptz, attempted_at timestamptz, finalized_at timestamptz, created_at timestamptz, errors jsonb, metadata jsonb, tags jsonb, unique_key text, unique_states text, callback_id text, callback_timeout_at timestamptz, run_lease bigint, progress jsonb, ordering_key text, state text, shard int, lane_seq bigint

-- name: snapshot_values
-- A snapshot's columns from snapshot_recordset, from job_id on, as the fact tables store them.
x.job_id, x.kind, x.queue, coalesce(x.args, 'null'::jsonb), x.priority, x.attempt, x.max_attempts, x.run_at, x.heartbeat_at, x.deadline_at, x.attempted_at, x.finalized_at, x.created_at, ARRAY(SELECT jsonb_array_elements(x.errors)), coalesce(x.metadata, '{}'::jsonb), ARRAY(SELECT jsonb_array_elements_text(x.tags)), decode(x.unique_key, 'hex'), x.unique_states::bit(8), x.callback_id, x.callback_timeout_at, x.run_lease, x.progress, decode(x.ordering_key, 'hex')
