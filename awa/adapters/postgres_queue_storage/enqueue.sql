-- Enqueue of the queue-storage engine (enqueue.py): the one-statement enqueue (plain and
-- routed), the job ids of a general insert, and the generic-plan setting around them.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: generic_plans
-- enqueue_ready is a long statement whose planning costs more than its execution, and
-- the server's automatic choice keeps re-planning it: this transaction uses the prepared
-- generic plan. The setting in force before is kept in awa.plan_cache_mode_was, so a
-- caller's unit of work gets it back (restore_plans).
SELECT set_config('awa.plan_cache_mode_was', current_setting('plan_cache_mode'), true),
    set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: restore_plans
SELECT set_config('plan_cache_mode', current_setting('awa.plan_cache_mode_was'), true)

-- name: enqueue_ready
{enqueue_ready_body route=nothing}

-- name: enqueue_ready_body
-- A whole enqueue without unique keys in one statement: job ids in input order, lane
-- positions (reserve_lanes_cte; an ordering key's lane is its shard of the queue's
-- enqueue_shards, a concurrency key's lane its own, any other job takes a free lane),
-- ready rows in the current slot,
-- deferred rows for specs with run_at, then the counters (counts_free_cte) and the
-- wake-ups of ``channels``. Returns the ids in input order. The route slot below is
-- empty in enqueue_ready; in enqueue_ready_routed it is a one-time filter on the input
-- that runs awa.queue_storage_route_check before anything else is read or locked (see
-- enqueue_ready_routed). No estimate depends on a parameter's value (the ids come from the
-- input rows, not from a count), so a custom plan costs what the generic plan costs and the
-- server settles on the generic plan by itself after its first few executions.
WITH x AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS x(
        ord bigint, kind text, queue text, args jsonb, priority smallint,
        max_attempts smallint, run_at timestamptz, metadata jsonb, tags jsonb,
        ordering_key text, unique_states text, hint int)
    {route}
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
), {reserve_lanes_cte}, lane_map AS MATERIALIZED (
    -- Each lane's reservation by ``p/asked/q`` (asked empty for a keyless lane), made
    -- once: a row finds its lane by key (a binary search) rather than by a join the
    -- planner would run as a nested loop over every lane for every row (the CTEs' row
    -- estimates are one), which made a batch over K keys cost rows x K x K.
    SELECT jsonb_object_agg(p || '/' || coalesce(asked::text, '') || '/' || q,
        jsonb_build_array(shard, next_seq, stamp)) AS m
    FROM lanes_out
), ready AS (
    {new_ready_rows placed=enqueue_ready_placed order=in_job_id_order}
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
    {insert_wake_ups} AS woken
FROM ids LEFT JOIN ready r ON r.job_id = ids.id
ORDER BY ids.id

-- name: enqueue_ready_routed
-- enqueue_ready as one statement on its own (autocommit), for a producer that remembers
-- that new jobs go to this schema: the route check (awa.queue_storage_route_check, which
-- takes the producer lock and raises when producers write elsewhere now) is a one-time
-- filter on the input rows, so it runs before any id is drawn or any lane is locked, and
-- its lock is held until the statement commits.
{enqueue_ready_body route=route_check}

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
    FROM (SELECT queue AS q FROM x) w, LATERAL ({free_bucket}) c
), lane AS (
    SELECT w.q AS queue, w.p AS priority, l.shard
    FROM (SELECT queue AS q, priority AS p, hint FROM x) w, LATERAL ({free_lane}) l
    WHERE EXISTS (SELECT 1 FROM bucket)
), job AS (
    SELECT nextval('awa.jobs_id_seq') AS id FROM lane
), moved AS (
    UPDATE {s}.lanes l SET
        next_seq = l.next_seq + 1,
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail batch=nothing}
    FROM (SELECT lane.*, 1 AS n, %(now)s::timestamptz AS first_run, job.id AS first_id,
              %(now)s::timestamptz AS last_run, job.id AS last_id, true AS sorted,
              true AS fresh
          FROM lane, job) w
    WHERE l.queue = w.queue AND l.priority = w.priority AND l.shard = w.shard
    RETURNING l.shard, l.next_seq, w.first_id AS id,
        CASE WHEN l.tail_job_id = w.last_id THEN l.tail_run_at ELSE w.first_run END AS stamp
), ready AS (
    {new_ready_rows placed=enqueue_one_placed order=nothing}
), counted AS (
    UPDATE {s}.queue_counts c SET n = c.n + 1
    FROM bucket b
    WHERE c.queue = b.queue AND c.state = b.state AND c.bucket = b.bucket
      AND EXISTS (SELECT 1 FROM ready)
    RETURNING 1
)
SELECT r.job_id AS id, r.run_at,
    (SELECT count(*) FROM counted) AS counted,
    {insert_wake_ups} AS woken
FROM ready r

-- name: enqueue_plain_routed
-- enqueue_one_routed for a batch of such jobs (available now, no ordering, unique or
-- concurrency key; the inserts a group commit gathered, ADR 0008): enqueue_ready_routed's
-- result in a fraction of its plan (under two fifths of the planning, which a connection
-- through a transaction-mode pooler pays on every run, ADR 0015), when every queue of the
-- batch has a counter bucket and every (queue, priority) a lane that no other open
-- transaction holds (both SKIP LOCKED, so the statement never waits while it holds a
-- row). When one is missing or held it draws no id, writes nothing and returns no row;
-- the caller then runs enqueue_ready_routed. Route check first, as there. The jobs of a
-- (queue, priority) take consecutive places in its lane in id order, ids in input order;
-- each lane's batch is stamped under the lane's lock (lane_tail, as reserve_lanes_cte's
-- ``moved``). Returns the ids in input order.
WITH x AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS x(
        ord bigint, kind text, queue text, args jsonb, priority smallint,
        max_attempts smallint, metadata jsonb, tags jsonb, unique_states text, hint int)
    WHERE (SELECT awa.queue_storage_route_check(%(schema)s)) IS NOT NULL
), want AS (
    SELECT queue AS q, priority AS p, min(hint) AS hint, count(*) AS n
    FROM x GROUP BY queue, priority
), bucket AS (
    SELECT c.queue, c.state, c.bucket
    FROM (SELECT DISTINCT q FROM want) w, LATERAL ({free_bucket}) c
), lane AS (
    SELECT w.q, w.p, w.n, l.shard
    FROM want w, LATERAL ({free_lane}) l
    -- a one-time filter: lanes only once every queue has its bucket
    WHERE (SELECT count(*) FROM bucket) = (SELECT count(DISTINCT q) FROM want)
), ids AS (
    SELECT id, row_number() OVER (ORDER BY id) AS ord
    FROM (SELECT nextval('awa.jobs_id_seq') AS id FROM x
          -- a one-time filter: ids only once every (queue, priority) has its lane
          WHERE (SELECT count(*) FROM lane) = (SELECT count(*) FROM want)) s
), j AS (
    SELECT x.*, ids.id,
        row_number() OVER (PARTITION BY x.queue, x.priority ORDER BY ids.id) AS k
    FROM x JOIN ids USING (ord)
), moved AS (
    UPDATE {s}.lanes l SET
        next_seq = l.next_seq + w.n,
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail batch=nothing}
    FROM (SELECT lane.q, lane.p, lane.shard, lane.n, %(now)s::timestamptz AS first_run,
              min(j.id) AS first_id, %(now)s::timestamptz AS last_run, max(j.id) AS last_id,
              true AS sorted, true AS fresh
          FROM lane JOIN j ON j.queue = lane.q AND j.priority = lane.p
          GROUP BY lane.q, lane.p, lane.shard, lane.n) w
    WHERE l.queue = w.q AND l.priority = w.p AND l.shard = w.shard
    RETURNING l.queue, l.priority, l.shard, l.next_seq, w.n,
        CASE WHEN l.tail_job_id = w.last_id THEN l.tail_run_at ELSE w.first_run END AS stamp
), ready AS (
    {new_ready_rows placed=enqueue_plain_placed order=in_job_id_order}
), counted AS (
    UPDATE {s}.queue_counts c SET n = c.n + d.n
    FROM bucket b JOIN (SELECT queue, count(*) AS n FROM j GROUP BY queue) d
        ON d.queue = b.queue
    WHERE c.queue = b.queue AND c.state = b.state AND c.bucket = b.bucket
      AND EXISTS (SELECT 1 FROM ready)
    RETURNING 1
)
SELECT r.job_id AS id, r.run_at,
    (SELECT count(*) FROM counted) AS counted,
    {insert_wake_ups} AS woken
FROM ready r
ORDER BY r.job_id

-- name: insert_wake_ups
-- An insert statement's wake-ups: one notification on each of ``channels`` (empty when
-- the wake coalescer sends them after commit), sent once (an init plan) and only beside
-- a written row; how many were sent.
(SELECT count(pg_notify(c, '')) FROM unnest(%(channels)s::text[]) c)

-- name: free_bucket
-- The counter bucket of queue ``w.q``'s available jobs that no other open transaction
-- holds, locked (SKIP LOCKED: never waited for; the backend's own bucket first), or no
-- row: a LATERAL subquery of enqueue_one_routed and enqueue_plain_routed.
SELECT c.queue, c.state, c.bucket FROM {s}.queue_counts c
WHERE c.queue = w.q AND c.state = 'available' AND c.bucket < {count_buckets}
ORDER BY c.bucket = pg_backend_pid() %% {count_buckets} DESC, c.bucket
LIMIT 1
FOR UPDATE OF c SKIP LOCKED

-- name: free_lane
-- The keyless lane of ``(w.q, w.p)`` that no other open transaction holds, locked (SKIP
-- LOCKED; the ``w.hint`` lane first), or no row: a LATERAL subquery of
-- enqueue_one_routed, enqueue_plain_routed and reserve_lanes_cte.
SELECT l.shard FROM {s}.lanes l
WHERE l.queue = w.q AND l.priority = w.p AND l.shard < 0
ORDER BY l.shard = w.hint DESC, l.shard DESC
LIMIT 1
FOR UPDATE OF l SKIP LOCKED

-- name: new_ready_rows
-- The ready rows of new available jobs (enqueue_ready_body, enqueue_one_routed,
-- enqueue_plain_routed), one per row of the slot ``placed``: a SELECT of each job's place
-- in its lane (``shard``, ``lane_seq``) and its stamp, with the job's ``id``, ``kind``,
-- ``queue``, ``args``, ``priority``, ``max_attempts``, ``metadata``, ``tags``,
-- ``unique_states`` and ordering key ``okey``. Written in job id order (the slot
-- ``order``: in_job_id_order, nothing for one job), which their fact ids follow; returns
-- each row's job_id and run_at.
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, created_at, errors, metadata, tags, unique_states, run_lease,
    ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), p.shard,
    p.lane_seq, p.id, p.kind, p.queue, coalesce(p.args, 'null'::jsonb), p.priority, 0,
    p.max_attempts, p.stamp, %(now)s, '{}'::jsonb[], coalesce(p.metadata, '{}'::jsonb),
    ARRAY(SELECT jsonb_array_elements_text(p.tags)), p.unique_states::bit(8), 0, p.okey
FROM ({placed}) p
{order}
RETURNING job_id, run_at

-- name: in_job_id_order
-- new_ready_rows' order for a batch of several jobs.
ORDER BY p.id

-- name: enqueue_ready_placed
-- enqueue_ready_body's available jobs at their places (new_ready_rows): the k-th of n
-- jobs of a lane goes k - 1 places after the lane's next position before the batch.
SELECT o.shard, o.next_seq - j.n + j.k - 1 AS lane_seq, o.stamp, j.id, j.kind, j.queue,
    j.args, j.priority, j.max_attempts, j.metadata, j.tags, j.unique_states, j.okey
FROM (SELECT j.*, row_number() OVER (PARTITION BY queue, priority, sh ORDER BY id) AS k,
          count(*) OVER (PARTITION BY queue, priority, sh) AS n
      FROM j WHERE run_at IS NULL) j
CROSS JOIN LATERAL (
    SELECT (v ->> 0)::int AS shard, (v ->> 1)::bigint AS next_seq,
        (v ->> 2)::timestamptz AS stamp
    -- the map is read once (an init plan), never carried along with each row
    FROM (SELECT (SELECT m FROM lane_map)
              -> (j.priority || '/' || coalesce(j.sh::text, '') || '/' || j.queue) AS v) v
) o

-- name: enqueue_one_placed
-- enqueue_one_routed's job at its place (new_ready_rows).
SELECT m.shard, m.next_seq - 1 AS lane_seq, m.stamp, m.id, x.kind, x.queue, x.args,
    x.priority, x.max_attempts, x.metadata, x.tags, x.unique_states, NULL::bytea AS okey
FROM moved m, x

-- name: enqueue_plain_placed
-- enqueue_plain_routed's jobs at their places (new_ready_rows), as enqueue_ready_placed.
SELECT m.shard, m.next_seq - m.n + j.k - 1 AS lane_seq, m.stamp, j.id, j.kind, j.queue,
    j.args, j.priority, j.max_attempts, j.metadata, j.tags, j.unique_states,
    NULL::bytea AS okey
FROM moved m JOIN j ON j.queue = m.queue AND j.priority = m.priority

-- name: next_job_ids
SELECT nextval('awa.jobs_id_seq') AS id FROM generate_series(1, %(n)s) ORDER BY 1
