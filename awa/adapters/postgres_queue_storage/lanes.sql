-- Lanes of the queue-storage engine (lanes.py): the order key a producer's batch gets in its
-- lane, lane reservation and locking, and the queues' enqueue shards.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

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
       FROM (SELECT w.*, {lane_stamp} AS first_at {batch}) u) t)

-- name: lane_tail_named
-- The named lane's want row, found in named_map (a binary search, not a scan of named).
FROM jsonb_to_record((SELECT m FROM named_map)
    -> (EXCLUDED.priority || '/' || EXCLUDED.shard || '/' || EXCLUDED.queue))
    AS w(n bigint, first_run timestamptz, first_id bigint, last_run timestamptz,
         last_id bigint, sorted boolean, fresh boolean)

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
), named_map AS MATERIALIZED (
    -- The named lanes' want rows by ``p/sh/q`` (both numbers first, so the name is
    -- unambiguous), made once: a lane row updated on conflict, and lanes_out, find their
    -- batch's row by key in it instead of joining or scanning named once per lane, which
    -- the planner's row estimates for these CTEs (one row) would make a nested loop, and
    -- a batch over K keys cost K x K.
    SELECT jsonb_object_agg(p || '/' || sh || '/' || q, to_jsonb(named)) AS m FROM named
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
    LEFT JOIN LATERAL ({free_lane}) f ON true
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
        (tail_run_at, tail_job_id, disorder_seq) = {lane_tail batch=nothing}
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
        CASE WHEN h.tail_job_id = (n.w ->> 'last_id')::bigint THEN h.tail_run_at
            ELSE (n.w ->> 'first_run')::timestamptz END AS stamp
    FROM held h
    CROSS JOIN LATERAL (
        SELECT (SELECT m FROM named_map) -> (h.priority || '/' || h.shard || '/' || h.queue) AS w
    ) n
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

-- name: enqueue_shards
-- The queues' enqueue_shards (an ordering key's lane depends on it).
SELECT queue, enqueue_shards FROM awa.queue_meta WHERE queue = ANY(%(queues)s::text[])
