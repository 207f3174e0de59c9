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

-- name: claim_keyed_candidates
-- A claim under a per-key limit (ADR 0029), its keyed candidates: the first `per_key`
-- due jobs of each of the next `keys_wanted` keys with available work after `after_key`
-- (the key this process's last claim walked to), in key order, by a walk of
-- canonical_jobs_key_ready_idx. A walked key with nothing due yet comes back with a NULL
-- id, so the walk's position still moves.
WITH RECURSIVE walk AS (
    (SELECT metadata ->> 'awa:concurrency_key' AS k, 1 AS n
     FROM awa.canonical_jobs
     WHERE state = 'available' AND queue = %(queue)s AND metadata ? 'awa:concurrency_key'
       AND metadata ->> 'awa:concurrency_key' > %(after_key)s
     ORDER BY metadata ->> 'awa:concurrency_key'
     LIMIT 1)
    UNION ALL
    SELECT (SELECT c.metadata ->> 'awa:concurrency_key'
            FROM awa.canonical_jobs AS c
            WHERE c.state = 'available' AND c.queue = %(queue)s
              AND c.metadata ? 'awa:concurrency_key'
              AND c.metadata ->> 'awa:concurrency_key' > w.k
            ORDER BY c.metadata ->> 'awa:concurrency_key'
            LIMIT 1),
        w.n + 1
    FROM walk AS w
    WHERE w.k IS NOT NULL AND w.n < %(keys_wanted)s
)
SELECT w.k AS walked, x.id, x.priority, x.run_at
FROM walk AS w
LEFT JOIN LATERAL (
    SELECT c.id, c.priority, c.run_at
    FROM awa.canonical_jobs AS c
    WHERE c.state = 'available' AND c.queue = %(queue)s
      AND c.metadata ? 'awa:concurrency_key'
      AND c.metadata ->> 'awa:concurrency_key' = w.k
      AND c.run_at <= %(now)s::timestamptz
      AND awa.run_at_in_range(c.run_at)
    ORDER BY c.priority, c.run_at, c.id
    LIMIT %(per_key)s
) AS x ON true
WHERE w.k IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = %(queue)s AND m.paused)
ORDER BY w.n

-- name: claim_keyless_candidates
-- A claim under a per-key limit, its candidates without a key, in the claim's order
-- (aged when aging_us > 0), from canonical_jobs_keyless_ready_idx.
SELECT id, priority, run_at
FROM awa.canonical_jobs
WHERE state = 'available' AND queue = %(queue)s AND NOT metadata ? 'awa:concurrency_key'
  AND run_at <= %(now)s::timestamptz
  AND awa.run_at_in_range(run_at)
  AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = %(queue)s AND m.paused)
ORDER BY
    CASE
        WHEN %(aging_us)s::bigint > 0 AND run_at < %(now)s::timestamptz THEN greatest(
            1,
            priority - (
                (extract(epoch FROM (%(now)s::timestamptz - run_at)) * 1000000)::bigint
                / greatest(%(aging_us)s::bigint, 1)
            )
        )
        ELSE priority
    END,
    run_at,
    id
LIMIT %(limit)s

-- name: lock_concurrency_keys
-- The keys' transaction-scoped locks, in the order given (sorted by the caller, so two
-- claimers never wait for each other in a circle). A statement of its own: the count
-- that follows starts after they are held and sees every claim committed before.
SELECT count(pg_advisory_xact_lock(hashtextextended(%(queue)s || chr(31) || k, 0))) AS n
FROM unnest(%(keys)s::text[]) AS k

-- name: try_lock_concurrency_keys
-- The keys' locks for a later walk of the same claim (KeyWindow): tried, never waited
-- for, since the claim already holds its first walk's locks; a key another claimer holds
-- is left to it. Returns the keys locked.
SELECT k
FROM unnest(%(keys)s::text[]) AS k
WHERE pg_try_advisory_xact_lock(hashtextextended(%(queue)s || chr(31) || k, 0))

-- name: live_per_key
-- Each key's live attempts (running or waiting for a callback) in the queue, from
-- canonical_jobs_key_live_idx.
SELECT metadata ->> 'awa:concurrency_key' AS concurrency_key, count(*) AS live
FROM awa.canonical_jobs
WHERE queue = %(queue)s AND state IN ('running', 'waiting_external')
  AND metadata ? 'awa:concurrency_key'
  AND metadata ->> 'awa:concurrency_key' = ANY(%(keys)s::text[])
GROUP BY 1

-- name: claim_ids
-- Claim the jobs a limited claim admitted; one another transaction holds (an operator's
-- change) or took meanwhile is skipped.
WITH picked AS (
    SELECT id FROM awa.canonical_jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND state = 'available'
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.canonical_jobs AS j SET
    state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = %(now)s::timestamptz,
    heartbeat_at = %(now)s::timestamptz,
    deadline_at = %(deadline_at)s::timestamptz
FROM picked AS c
WHERE j.id = c.id AND j.state = 'available'
RETURNING j.*

-- name: apply_transitions
-- Apply transitions decided by awa.domain.lifecycle, one per (id, run lease), in one
-- statement. Each is guarded by the attempt's run lease and by the states the batch's
-- transitions apply to; a NULL leaves the column as it is. The attempt change is the
-- label of awa.domain.lifecycle.AttemptChange.
UPDATE awa.canonical_jobs AS j SET
    state = coalesce(t.state, j.state),
    run_at = coalesce(t.run_at, j.run_at),
    attempt = CASE t.attempt
        WHEN 'give_back' THEN j.attempt - 1
        WHEN 'reset' THEN 0
        ELSE j.attempt
    END,
    finalized_at = CASE
        WHEN t.clear_finalized THEN NULL
        ELSE coalesce(t.finalized_at, j.finalized_at)
    END,
    errors = CASE WHEN t.error IS NULL THEN j.errors ELSE array_append(j.errors, t.error) END,
    heartbeat_at = coalesce(t.heartbeat_at, j.heartbeat_at),
    metadata = CASE WHEN t.metadata IS NULL THEN j.metadata ELSE j.metadata || t.metadata END,
    progress = CASE WHEN t.clear_progress THEN NULL ELSE j.progress END,
    callback_id = CASE WHEN t.clear_callback THEN NULL ELSE j.callback_id END,
    callback_timeout_at = CASE
        WHEN t.clear_callback THEN NULL
        ELSE coalesce(t.callback_timeout_at, j.callback_timeout_at)
    END
FROM unnest(
    %(ids)s::bigint[],
    %(leases)s::bigint[],
    %(states)s::text[]::awa.job_state[],
    %(run_ats)s::timestamptz[],
    %(attempts)s::text[],
    %(finalized_ats)s::timestamptz[],
    %(errors)s::jsonb[],
    %(heartbeat_ats)s::timestamptz[],
    %(metadata)s::jsonb[],
    %(clear_progress)s::boolean[],
    %(clear_callback)s::boolean[],
    %(callback_timeout_ats)s::timestamptz[],
    %(clear_finalized)s::boolean[]
) AS t(
    id, lease, state, run_at, attempt, finalized_at, error, heartbeat_at, metadata,
    clear_progress, clear_callback, callback_timeout_at, clear_finalized
)
WHERE j.id = t.id
  AND j.run_lease = t.lease
  AND j.state = ANY(%(applies_to)s::text[]::awa.job_state[])
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

-- name: move_to_dlq
-- Hold failed jobs in the DLQ, each with its reason: they stop being jobs (the delete
-- releases their unique keys).
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS w(id, reason)
),
moved AS (
    DELETE FROM awa.canonical_jobs AS j
    USING wanted AS w
    WHERE j.id = w.id AND j.state = 'failed'
    RETURNING j.*, w.reason AS wanted_reason
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
    wanted_reason, %(now)s::timestamptz, run_lease
FROM moved
ORDER BY id
RETURNING *
