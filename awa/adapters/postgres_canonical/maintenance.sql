-- Maintenance statements of the canonical engine: promotion, rescue candidates and
-- bounded retention cleanup.

-- name: promote_due
-- The update trigger notifies awa:<queue> for every queue that gained ready work.
WITH due AS (
    SELECT id
    FROM awa.canonical_jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= %(now)s::timestamptz
      -- a row from before migration 0395 may hold a run_at no read can decode
      AND awa.run_at_in_range(run_at)
    ORDER BY run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.canonical_jobs AS j SET state = 'available'
FROM due
WHERE j.id = due.id AND j.state IN ('scheduled', 'retryable')
RETURNING j.id

-- name: stale_heartbeats
SELECT j.*, coalesce(m.dlq_enabled, false) AS dlq_enabled
FROM awa.canonical_jobs AS j
LEFT JOIN awa.queue_meta AS m ON m.queue = j.queue
WHERE j.state = 'running' AND j.heartbeat_at < %(cutoff)s::timestamptz
ORDER BY j.id
FOR UPDATE OF j SKIP LOCKED

-- name: expired_deadlines
SELECT j.*, coalesce(m.dlq_enabled, false) AS dlq_enabled
FROM awa.canonical_jobs AS j
LEFT JOIN awa.queue_meta AS m ON m.queue = j.queue
WHERE j.state = 'running'
  AND j.deadline_at IS NOT NULL
  AND j.deadline_at <= %(now)s::timestamptz
ORDER BY j.id
FOR UPDATE OF j SKIP LOCKED

-- name: expired_callbacks
SELECT j.*, coalesce(m.dlq_enabled, false) AS dlq_enabled
FROM awa.canonical_jobs AS j
LEFT JOIN awa.queue_meta AS m ON m.queue = j.queue
WHERE j.state = 'waiting_external'
  AND j.callback_timeout_at IS NOT NULL
  AND j.callback_timeout_at <= %(now)s::timestamptz
ORDER BY j.id
FOR UPDATE OF j SKIP LOCKED

-- name: cleanup_retention
-- The cutoffs come from awa.domain.policies.RetentionFloor, one per terminal state.
WITH expired AS (
    SELECT id
    FROM awa.canonical_jobs
    WHERE (state = 'completed' AND finalized_at <= %(completed_cutoff)s::timestamptz)
       OR (state = 'cancelled' AND finalized_at <= %(cancelled_cutoff)s::timestamptz)
       OR (state = 'failed' AND finalized_at <= %(failed_cutoff)s::timestamptz)
    ORDER BY finalized_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM awa.canonical_jobs AS j
USING expired
WHERE j.id = expired.id
RETURNING j.id

-- name: cleanup_dlq
WITH expired AS (
    SELECT job_id
    FROM awa.dlq_entries
    WHERE dlq_at <= %(cutoff)s::timestamptz
    ORDER BY dlq_at, job_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM awa.dlq_entries AS d
USING expired
WHERE d.job_id = expired.job_id
RETURNING d.job_id
