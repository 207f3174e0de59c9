-- Operator reads and writes of the canonical engine.

-- name: get_job
SELECT * FROM awa.canonical_jobs WHERE id = %(id)s

-- name: list_jobs
-- Keyset page, newest first: the cursor is always an index condition (no cursor: below
-- every bigint), so the primary key is walked backwards from it and the walk stops at
-- the page size, whatever the plan does with the optional filters.
SELECT *
FROM awa.canonical_jobs
WHERE id < coalesce(%(before_id)s::bigint, 9223372036854775807)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
ORDER BY id DESC
LIMIT %(limit)s

-- name: kind_counts
SELECT kind,
       count(*) AS job_count,
       count(DISTINCT queue) AS queue_count,
       count(*) FILTER (
           WHERE state = 'completed' AND finalized_at > %(hour_ago)s::timestamptz
       ) AS completed_last_hour
FROM awa.canonical_jobs
GROUP BY kind

-- name: finalized_timeseries
-- Sessions run in UTC, so date_trunc cuts UTC minutes.
SELECT date_trunc('minute', finalized_at) AS bucket, state::text AS state, count(*) AS n
FROM awa.canonical_jobs
WHERE finalized_at >= %(since)s::timestamptz
  AND state IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2

-- name: finalized_by_queue
-- Sessions run in UTC, so date_trunc cuts UTC minutes.
SELECT date_trunc('minute', finalized_at) AS bucket, queue, state::text AS state, count(*) AS n
FROM awa.canonical_jobs
WHERE finalized_at >= %(since)s::timestamptz
  AND state IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2, 3

-- name: queue_depths
-- The metrics' depth: live rows only, read along canonical_jobs_queue_state_idx, and the
-- oldest due available job; finished rows are never read.
SELECT queue, state::text AS state, count(*) AS n,
    min(run_at) FILTER (WHERE state = 'available' AND awa.run_at_in_range(run_at)) AS oldest
FROM awa.canonical_jobs
WHERE state IN ('available', 'scheduled', 'retryable', 'running', 'waiting_external')
GROUP BY queue, state

-- name: queue_counts
-- Exact counts by GROUP BY: the canonical engine keeps no folded counters.
WITH per_state AS (
    SELECT queue, state, count(*) AS n
    FROM awa.canonical_jobs
    GROUP BY queue, state
),
queues AS (
    SELECT queue FROM per_state
    UNION
    SELECT queue FROM awa.queue_meta
)
SELECT
    q.queue,
    coalesce(m.paused, false) AS paused,
    coalesce(
        (SELECT jsonb_object_agg(p.state::text, p.n) FROM per_state AS p WHERE p.queue = q.queue),
        '{}'::jsonb
    ) AS counts,
    (
        SELECT count(*)
        FROM awa.canonical_jobs AS c
        WHERE c.queue = q.queue
          AND c.state = 'completed'
          AND c.finalized_at > %(hour_ago)s::timestamptz
    ) AS completed_last_hour,
    (
        SELECT min(c.run_at)
        FROM awa.canonical_jobs AS c
        WHERE c.queue = q.queue AND c.state = 'available' AND awa.run_at_in_range(c.run_at)
    ) AS oldest_available_at
FROM queues AS q
LEFT JOIN awa.queue_meta AS m ON m.queue = q.queue

-- name: pause_queue
INSERT INTO awa.queue_meta AS m (queue, paused, paused_at, paused_by, updated_at)
VALUES (%(queue)s, true, %(now)s::timestamptz, %(paused_by)s, %(now)s::timestamptz)
ON CONFLICT (queue) DO UPDATE SET
    paused = true,
    paused_at = CASE WHEN m.paused THEN m.paused_at ELSE EXCLUDED.paused_at END,
    paused_by = CASE WHEN m.paused THEN m.paused_by ELSE EXCLUDED.paused_by END,
    updated_at = EXCLUDED.updated_at

-- name: resume_queue
-- Like the in-memory model: a queue without settings does not gain a row by resuming.
UPDATE awa.queue_meta SET
    paused = false,
    paused_at = NULL,
    paused_by = NULL,
    updated_at = %(now)s::timestamptz
WHERE queue = %(queue)s

-- name: set_queue_dlq
INSERT INTO awa.queue_meta AS m (queue, dlq_enabled, updated_at)
VALUES (%(queue)s, %(enabled)s, %(now)s::timestamptz)
ON CONFLICT (queue) DO UPDATE SET
    dlq_enabled = EXCLUDED.dlq_enabled,
    updated_at = EXCLUDED.updated_at

-- name: drain_candidates
SELECT id, run_lease, state
FROM awa.canonical_jobs
WHERE queue = %(queue)s AND state = ANY(%(states)s::text[]::awa.job_state[])
ORDER BY id
FOR UPDATE

-- name: lock_job
SELECT * FROM awa.canonical_jobs WHERE id = %(id)s FOR UPDATE

-- name: notify_cancel
-- Channel and payload come from awa.domain.channels.cancel_notification.
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: unique_holder
SELECT job_id FROM awa.job_unique_claims WHERE unique_key = %(key)s

-- name: failed_ids
SELECT id
FROM awa.canonical_jobs
WHERE state = 'failed'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
ORDER BY id
FOR UPDATE

-- name: discard_failed
DELETE FROM awa.canonical_jobs WHERE state = 'failed' AND kind = %(kind)s RETURNING id

-- name: delete_jobs
DELETE FROM awa.canonical_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND state NOT IN ('running', 'waiting_external')
RETURNING id, state::text AS state

-- name: reset
-- Every job, DLQ entry, unique claim, queue setting, rate limiter and dependency edge (and
-- vanished parent), in
-- one statement. DELETE rather than TRUNCATE: a TRUNCATE gives every table and index a new
-- file and takes ACCESS EXCLUSIVE locks (a third of a second for these eight under load),
-- where deleting the few rows a test or a `clean` leaves behind costs a few milliseconds.
WITH d0 AS (DELETE FROM awa.canonical_jobs), d1 AS (DELETE FROM awa.dlq_entries),
    d2 AS (DELETE FROM awa.job_unique_claims), d3 AS (DELETE FROM awa.queue_meta),
    d4 AS (DELETE FROM awa.rate_limiters), d5 AS (DELETE FROM awa.job_dependencies),
    d6 AS (DELETE FROM awa.job_dependency_waits), d7 AS (DELETE FROM awa.batches),
    d8 AS (DELETE FROM awa.dependency_vanished_parents)
SELECT 1
