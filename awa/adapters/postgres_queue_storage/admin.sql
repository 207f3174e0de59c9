-- Operator reads and writes of the queue-storage engine: job lists, queue control, the
-- DLQ and reset. Placeholders are listed in statements.py.

-- name: no_filter
-- The filter clauses below are joined with AND into a statement's WHERE (one statement
-- per combination of clauses, so each is planned for the filter it has); no clause: this.
true

-- name: job_kind_is
kind = %(kind)s

-- name: job_queue_is
queue = %(queue)s

-- name: job_state_is
state = %(state)s::awa.job_state

-- name: job_tagged
%(tag)s = ANY(tags)

-- name: job_before
id < %(before_id)s

-- name: jobs_among
-- Those of %(ids)s that match, newest first (list_jobs resolves its candidates).
SELECT * FROM {s}.jobs_resolved WHERE {where} AND id = ANY(%(ids)s::bigint[]) ORDER BY id DESC

-- name: matching_jobs
-- Every matching job, in id order (the order admin writes change them in).
SELECT * FROM {s}.jobs_resolved WHERE {where} ORDER BY id

-- name: retention_due
-- A page of the terminal facts that can be past their retention, oldest first, after
-- (after_at, after_id): those finalized before their state's cutoff, read through the
-- finalized_at indexes of completed closures and completed done rows, and the done rows
-- of cancelled and failed jobs (few: a ring slot's done rows go with its prune). Each
-- branch stops after `limit` rows, so a page reads about `limit` facts whatever the
-- history holds; the caller resolves their jobs (a later fact, an operator's retry say,
-- may have replaced one) and keeps those still terminal and due.
SELECT id, finalized_at FROM (
    (SELECT c.job_id AS id, x.finalized_at
     FROM {s}.closures x
     JOIN {s}.claims c ON c.slot = x.slot AND c.claim_id = x.claim_id
     WHERE x.outcome = 'completed' AND x.finalized_at <= %(completed_before)s
       AND x.finalized_at >= %(after_at)s
       AND (x.finalized_at, c.job_id) > (%(after_at)s, %(after_id)s)
     ORDER BY x.finalized_at, c.job_id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT w.job_id, w.finalized_at FROM {s}.done_entries w
     WHERE w.state = 'completed' AND w.finalized_at <= %(completed_before)s
       AND w.finalized_at >= %(after_at)s
       AND (w.finalized_at, w.job_id) > (%(after_at)s, %(after_id)s)
     ORDER BY w.finalized_at, w.job_id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT w.job_id, w.finalized_at FROM {s}.done_entries w
     WHERE ((w.state = 'cancelled' AND w.finalized_at <= %(cancelled_before)s)
         OR (w.state = 'failed' AND w.finalized_at <= %(failed_before)s))
       AND (w.finalized_at, w.job_id) > (%(after_at)s, %(after_id)s)
     ORDER BY w.finalized_at, w.job_id
     LIMIT %(limit)s)
) d
ORDER BY finalized_at, id
LIMIT %(limit)s

-- name: pause_queue
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by)
VALUES (%(queue)s, true, %(now)s, %(paused_by)s)
ON CONFLICT (queue) DO UPDATE SET paused = true, paused_at = EXCLUDED.paused_at,
    paused_by = EXCLUDED.paused_by
WHERE NOT awa.queue_meta.paused

-- name: resume_queue
UPDATE awa.queue_meta SET paused = false, paused_at = NULL, paused_by = NULL
WHERE queue = %(queue)s AND paused

-- name: set_queue_dlq
INSERT INTO awa.queue_meta (queue, dlq_enabled) VALUES (%(queue)s, %(enabled)s)
ON CONFLICT (queue) DO UPDATE SET dlq_enabled = EXCLUDED.dlq_enabled

-- name: dlq_before
(dlq_at, job_id) < (%(before_at)s, %(before_id)s)

-- name: dlq_before_at
dlq_at < %(before_at)s

-- name: dlq_before_id
job_id < %(before_id)s

-- name: list_dlq
SELECT * FROM {s}.dlq_entries WHERE {where} ORDER BY dlq_at DESC, job_id DESC LIMIT %(limit)s

-- name: list_dead_lettered
-- The jobs list_jobs leaves out, in its order.
SELECT * FROM {s}.dlq_entries WHERE {where} ORDER BY job_id DESC LIMIT %(limit)s

-- name: lock_matching_dlq
-- Every matching DLQ entry, locked, in job id order (bulk retry).
SELECT * FROM {s}.dlq_entries WHERE {where} ORDER BY job_id FOR UPDATE

-- name: lock_dlq
SELECT * FROM {s}.dlq_entries WHERE job_id = %(job_id)s FOR UPDATE

-- name: get_dlq
SELECT * FROM {s}.dlq_entries WHERE job_id = %(job_id)s

-- name: dlq_depth
SELECT count(*) AS n FROM {s}.dlq_entries WHERE %(queue)s::text IS NULL OR queue = %(queue)s

-- name: dlq_by_minute
-- DLQ entries per minute their job failed and queue (sessions run in UTC).
SELECT date_trunc('minute', finalized_at) AS bucket, queue, 'failed' AS state, count(*) AS n
FROM {s}.dlq_entries
WHERE finalized_at >= %(since)s::timestamptz
GROUP BY 1, 2

-- name: dlq_depth_by_queue
SELECT queue, count(*) AS n FROM {s}.dlq_entries GROUP BY queue ORDER BY queue

-- name: dlq_depth_by_kind
SELECT kind, queue, count(*) AS n FROM {s}.dlq_entries GROUP BY kind, queue ORDER BY kind, queue

-- name: delete_dlq
DELETE FROM {s}.dlq_entries WHERE job_id = %(job_id)s

-- name: purge_dlq
DELETE FROM {s}.dlq_entries WHERE {where}

-- name: cleanup_dlq
-- The oldest DLQ entries past their retention, at most %(limit)s.
DELETE FROM {s}.dlq_entries WHERE job_id IN (
    SELECT job_id FROM {s}.dlq_entries WHERE dlq_at <= %(before)s
    ORDER BY dlq_at, job_id LIMIT %(limit)s)

-- name: reset
-- Every job, DLQ entry, unique claim, queue setting, rate limiter and dependency edge. DELETE
-- rather than TRUNCATE:
-- truncating the ring's many partitions costs a new file per table, far more than deleting
-- the few rows tests leave behind.
WITH d0 AS (DELETE FROM {s}.ready_entries), d1 AS (DELETE FROM {s}.claims),
    d2 AS (DELETE FROM {s}.closures), d3 AS (DELETE FROM {s}.tombstones),
    d4 AS (DELETE FROM {s}.done_entries), d5 AS (DELETE FROM {s}.leases),
    d6 AS (DELETE FROM {s}.deferred_jobs), d7 AS (DELETE FROM {s}.dlq_entries),
    d8 AS (DELETE FROM {s}.lanes), d9 AS (DELETE FROM {s}.claim_heads),
    d10 AS (DELETE FROM {s}.queue_counts), d11 AS (DELETE FROM {s}.completions),
    d12 AS (DELETE FROM {s}.queue_prune_stats), d13 AS (DELETE FROM awa.job_unique_claims),
    d14 AS (DELETE FROM awa.queue_meta), d15 AS (DELETE FROM awa.rate_limiters),
    d16 AS (DELETE FROM awa.job_dependencies), d17 AS (DELETE FROM awa.job_dependency_waits),
    d18 AS (DELETE FROM awa.batches), d19 AS (DELETE FROM awa.dependency_vanished_parents)
SELECT 1

-- name: install
-- Install (or, with reset, rebuild) the engine's tables in a schema.
SELECT awa.install_queue_storage(%(schema)s, %(queue_slots)s, %(lease_slots)s, %(reset)s)

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
