-- Producer and worker statements of the canonical engine. Every timestamp is a parameter
-- (the engine's clock); guarded statements match (id, run_lease, state) and report zero
-- rows when the attempt is stale.

-- name: enqueue
-- ORDER BY before the volatile nextval() makes ids increase in input order.
INSERT INTO awa.canonical_jobs (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    errors, metadata, tags, unique_key, unique_states, ordering_key, run_lease
)
SELECT
    nextval('awa.jobs_id_seq'),
    u.kind,
    u.queue,
    u.args,
    CASE WHEN u.run_at IS NULL THEN 'available' ELSE 'scheduled' END::awa.job_state,
    u.priority,
    0,
    u.max_attempts,
    coalesce(u.run_at, %(now)s::timestamptz),
    %(now)s::timestamptz,
    '{}'::jsonb[],
    u.metadata,
    ARRAY(SELECT jsonb_array_elements_text(u.tags)),
    u.unique_key,
    u.unique_states::bit(8),
    u.ordering_key,
    0
FROM unnest(
    %(kinds)s::text[],
    %(queues)s::text[],
    %(args)s::jsonb[],
    %(priorities)s::smallint[],
    %(max_attempts)s::smallint[],
    %(run_ats)s::timestamptz[],
    %(metadata)s::jsonb[],
    %(tags)s::jsonb[],
    %(unique_keys)s::bytea[],
    %(unique_states)s::text[],
    %(ordering_keys)s::bytea[]
) WITH ORDINALITY AS u(
    kind, queue, args, priority, max_attempts, run_at, metadata, tags, unique_key,
    unique_states, ordering_key, ord
)
ORDER BY u.ord
RETURNING *

-- name: unique_holders
SELECT unique_key, job_id FROM awa.job_unique_claims WHERE unique_key = ANY(%(keys)s::bytea[])

-- name: claim
WITH candidates AS (
    SELECT id
    FROM awa.canonical_jobs
    WHERE state = 'available'
      AND queue = %(queue)s
      AND run_at <= %(now)s::timestamptz
      -- a row from before migration 0395 may hold a run_at no read can decode
      AND awa.run_at_in_range(run_at)
      AND NOT EXISTS (
          SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = %(queue)s AND m.paused
      )
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.canonical_jobs AS j SET
    state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = %(now)s::timestamptz,
    heartbeat_at = %(now)s::timestamptz,
    deadline_at = %(deadline_at)s::timestamptz
FROM candidates AS c
WHERE j.id = c.id AND j.state = 'available'
RETURNING j.*

-- name: claim_aged
-- Priority aging: one level better per whole aging interval waited since run_at, never
-- below 1. Waiting time is compared in integer microseconds so it matches Python exactly.
WITH candidates AS (
    SELECT id
    FROM awa.canonical_jobs
    WHERE state = 'available'
      AND queue = %(queue)s
      AND run_at <= %(now)s::timestamptz
      -- a row from before migration 0395 may hold a run_at no read can decode
      AND awa.run_at_in_range(run_at)
      AND NOT EXISTS (
          SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = %(queue)s AND m.paused
      )
    ORDER BY
        CASE
            WHEN run_at < %(now)s::timestamptz THEN greatest(
                1,
                priority - (
                    (extract(epoch FROM (%(now)s::timestamptz - run_at)) * 1000000)::bigint
                    / %(aging_us)s::bigint
                )
            )
            ELSE priority
        END,
        run_at,
        id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.canonical_jobs AS j SET
    state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = %(now)s::timestamptz,
    heartbeat_at = %(now)s::timestamptz,
    deadline_at = %(deadline_at)s::timestamptz
FROM candidates AS c
WHERE j.id = c.id AND j.state = 'available'
RETURNING j.*

-- name: complete
UPDATE awa.canonical_jobs AS j SET
    state = 'completed',
    finalized_at = %(now)s::timestamptz,
    progress = NULL
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS l(id, lease)
WHERE j.id = l.id
  AND j.run_lease = l.lease
  AND j.state IN ('running', 'waiting_external')
RETURNING j.id, j.run_lease

-- name: heartbeat
UPDATE awa.canonical_jobs AS j SET heartbeat_at = %(now)s::timestamptz
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS l(id, lease)
WHERE j.id = l.id AND j.run_lease = l.lease AND j.state = 'running'
RETURNING j.id, j.run_lease

-- name: lock_live_attempt
SELECT j.*, coalesce(m.dlq_enabled, false) AS dlq_enabled
FROM awa.canonical_jobs AS j
LEFT JOIN awa.queue_meta AS m ON m.queue = j.queue
WHERE j.id = %(id)s
  AND j.run_lease = %(lease)s
  AND j.state IN ('running', 'waiting_external')
FOR UPDATE OF j

-- name: close_as_retryable
UPDATE awa.canonical_jobs SET
    state = 'retryable',
    run_at = %(run_at)s::timestamptz,
    errors = array_append(errors, %(error)s::jsonb),
    callback_id = CASE WHEN %(clear_callback)s THEN NULL ELSE callback_id END,
    callback_timeout_at = CASE WHEN %(clear_callback)s THEN NULL ELSE callback_timeout_at END
WHERE id = %(id)s
RETURNING *

-- name: close_as_failed
UPDATE awa.canonical_jobs SET
    state = 'failed',
    finalized_at = %(now)s::timestamptz,
    errors = array_append(errors, %(error)s::jsonb),
    callback_id = CASE WHEN %(clear_callback)s THEN NULL ELSE callback_id END,
    callback_timeout_at = CASE WHEN %(clear_callback)s THEN NULL ELSE callback_timeout_at END
WHERE id = %(id)s
RETURNING *

-- name: fail
UPDATE awa.canonical_jobs AS j SET
    state = 'failed',
    finalized_at = %(now)s::timestamptz,
    errors = array_append(
        j.errors,
        jsonb_build_object(
            'error', %(error)s::text, 'attempt', j.attempt, 'at', %(at)s::text, 'terminal', true
        )
    )
WHERE j.id = %(id)s
  AND j.run_lease = %(lease)s
  AND j.state IN ('running', 'waiting_external')
RETURNING
    j.*,
    coalesce((SELECT m.dlq_enabled FROM awa.queue_meta AS m WHERE m.queue = j.queue), false)
        AS dlq_enabled

-- name: snooze
-- A parked attempt has no handler left to snooze it; only resume revives it.
UPDATE awa.canonical_jobs SET
    state = 'scheduled',
    run_at = %(run_at)s::timestamptz,
    attempt = attempt - 1
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id

-- name: cancel_attempt
UPDATE awa.canonical_jobs SET
    state = 'cancelled',
    finalized_at = %(now)s::timestamptz
WHERE id = %(id)s AND run_lease = %(lease)s AND state IN ('running', 'waiting_external')
RETURNING id

-- name: release
-- The error names the attempt that was running, before it is given back.
UPDATE awa.canonical_jobs SET
    state = 'retryable',
    run_at = %(now)s::timestamptz,
    attempt = attempt - 1,
    errors = array_append(
        errors,
        jsonb_build_object('error', %(error)s::text, 'attempt', attempt, 'at', %(at)s::text)
    )
WHERE id = %(id)s AND run_lease = %(lease)s AND state IN ('running', 'waiting_external')
RETURNING id

-- name: update_progress
UPDATE awa.canonical_jobs SET
    progress = coalesce(%(progress)s::jsonb, progress),
    metadata = metadata || %(metadata)s::jsonb,
    heartbeat_at = %(now)s::timestamptz
WHERE id = %(id)s AND run_lease = %(lease)s AND state IN ('running', 'waiting_external')
RETURNING id

-- name: register_callback
UPDATE awa.canonical_jobs SET
    callback_id = %(callback_id)s,
    callback_timeout_at = %(timeout_at)s::timestamptz,
    callback_filter = %(filter)s,
    callback_on_complete = %(on_complete)s,
    callback_on_fail = %(on_fail)s,
    callback_transform = %(transform)s
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id

-- name: wait_for_callback
UPDATE awa.canonical_jobs SET state = 'waiting_external'
WHERE id = %(id)s
  AND run_lease = %(lease)s
  AND state = 'running'
  AND callback_id IS NOT NULL
RETURNING id

-- name: lock_by_callback
SELECT j.*, coalesce(m.dlq_enabled, false) AS dlq_enabled
FROM awa.canonical_jobs AS j
LEFT JOIN awa.queue_meta AS m ON m.queue = j.queue
WHERE j.callback_id = %(callback_id)s
  AND j.state IN ('running', 'waiting_external')
ORDER BY j.id
LIMIT 1
FOR UPDATE OF j

-- name: callback_expressions
SELECT callback_filter, callback_on_complete, callback_on_fail, callback_transform
FROM awa.canonical_jobs
WHERE callback_id = %(callback_id)s AND state IN ('running', 'waiting_external')
ORDER BY id
LIMIT 1

-- name: callback_complete
UPDATE awa.canonical_jobs SET
    state = 'completed',
    finalized_at = %(now)s::timestamptz,
    progress = NULL,
    callback_id = NULL,
    callback_timeout_at = NULL
WHERE id = %(id)s
RETURNING *

-- name: callback_retry
-- The values come from awa.domain.callbacks.retry_changes (a fresh start, no error).
UPDATE awa.canonical_jobs SET
    state = %(state)s::awa.job_state,
    run_at = %(run_at)s::timestamptz,
    attempt = %(attempt)s,
    callback_id = NULL,
    callback_timeout_at = NULL
WHERE id = %(id)s
RETURNING *

-- name: callback_resume
-- The values come from awa.domain.callbacks.resume_changes; the callback ends.
UPDATE awa.canonical_jobs SET
    state = %(state)s::awa.job_state,
    heartbeat_at = %(heartbeat_at)s::timestamptz,
    metadata = %(metadata)s::jsonb,
    callback_id = NULL,
    callback_timeout_at = NULL
WHERE id = %(id)s
RETURNING *

-- name: callback_heartbeat
UPDATE awa.canonical_jobs SET callback_timeout_at = %(timeout_at)s::timestamptz
WHERE id = %(id)s
RETURNING *

-- name: move_to_dlq
-- Hold a failed job in the DLQ: it stops being a job (its delete releases the unique key).
WITH moved AS (
    DELETE FROM awa.canonical_jobs
    WHERE id = %(id)s AND state = 'failed'
    RETURNING *
)
INSERT INTO awa.dlq_entries (
    job_id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key,
    dlq_reason, dlq_at, original_run_lease
)
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key,
    %(reason)s, %(now)s::timestamptz, run_lease
FROM moved
RETURNING *
