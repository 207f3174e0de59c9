-- Dead-letter queue statements of the canonical engine. A DLQ filter matches kind, queue
-- and tag, plus the (dlq_at, job_id) keyset cursor used for paging.

-- name: list_dlq
SELECT *
FROM awa.dlq_entries
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
  AND (
      CASE
          WHEN %(before_at)s::timestamptz IS NOT NULL AND %(before_id)s::bigint IS NOT NULL
              THEN (dlq_at, job_id) < (%(before_at)s::timestamptz, %(before_id)s::bigint)
          WHEN %(before_at)s::timestamptz IS NOT NULL
              THEN dlq_at < %(before_at)s::timestamptz
          WHEN %(before_id)s::bigint IS NOT NULL
              THEN job_id < %(before_id)s::bigint
          ELSE true
      END
  )
ORDER BY dlq_at DESC, job_id DESC
LIMIT %(limit)s

-- name: matching_dlq_ids
SELECT job_id
FROM awa.dlq_entries
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
  AND (
      CASE
          WHEN %(before_at)s::timestamptz IS NOT NULL AND %(before_id)s::bigint IS NOT NULL
              THEN (dlq_at, job_id) < (%(before_at)s::timestamptz, %(before_id)s::bigint)
          WHEN %(before_at)s::timestamptz IS NOT NULL
              THEN dlq_at < %(before_at)s::timestamptz
          WHEN %(before_id)s::bigint IS NOT NULL
              THEN job_id < %(before_id)s::bigint
          ELSE true
      END
  )
ORDER BY job_id
FOR UPDATE

-- name: list_dead_lettered
-- The jobs list_jobs leaves out, in its order (the primary key walked backwards).
SELECT *
FROM awa.dlq_entries
WHERE job_id < coalesce(%(before_id)s::bigint, 9223372036854775807)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
ORDER BY job_id DESC
LIMIT %(limit)s

-- name: get_dlq
SELECT * FROM awa.dlq_entries WHERE job_id = %(id)s

-- name: dlq_depth
SELECT count(*) AS n
FROM awa.dlq_entries
WHERE %(queue)s::text IS NULL OR queue = %(queue)s::text

-- name: dlq_by_minute
-- DLQ entries per minute their job failed and queue (sessions run in UTC).
SELECT date_trunc('minute', finalized_at) AS bucket, queue, 'failed' AS state, count(*) AS n
FROM awa.dlq_entries
WHERE finalized_at >= %(since)s::timestamptz
GROUP BY 1, 2

-- name: dlq_depth_by_queue
SELECT queue, count(*) AS n FROM awa.dlq_entries GROUP BY queue

-- name: dlq_depth_by_kind
SELECT kind, queue, count(*) AS n FROM awa.dlq_entries GROUP BY kind, queue

-- name: failed_ids_for_dlq
SELECT id
FROM awa.canonical_jobs
WHERE state = 'failed'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
ORDER BY id
FOR UPDATE

-- name: retry_from_dlq
-- Re-enqueue under the same id with a fresh attempt budget; the insert trigger re-claims
-- the unique key (a clash raises) and wakes the queue when the job is ready.
WITH entry AS (
    DELETE FROM awa.dlq_entries WHERE job_id = %(id)s RETURNING *
)
INSERT INTO awa.canonical_jobs (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key
)
SELECT
    job_id,
    kind,
    coalesce(%(queue)s::text, queue),
    args,
    CASE WHEN %(run_at)s::timestamptz IS NULL THEN 'available' ELSE 'scheduled' END::awa.job_state,
    coalesce(%(priority)s::smallint, priority),
    0,
    max_attempts,
    coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz),
    heartbeat_at,
    deadline_at,
    attempted_at,
    NULL,
    created_at,
    errors,
    metadata,
    tags,
    unique_key,
    unique_states,
    callback_id,
    callback_timeout_at,
    0,
    progress,
    ordering_key
FROM entry
RETURNING *

-- name: purge_dlq_ids
DELETE FROM awa.dlq_entries WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING job_id
