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
-- Terminal jobs past their retention, oldest first.
SELECT * FROM {s}.jobs_resolved
WHERE (state = 'completed' AND finalized_at <= %(completed_before)s)
   OR (state = 'cancelled' AND finalized_at <= %(cancelled_before)s)
   OR (state = 'failed' AND finalized_at <= %(failed_before)s)
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
-- Every job, DLQ entry, unique claim and queue setting. DELETE rather than TRUNCATE:
-- truncating the ring's many partitions costs a new file per table, far more than deleting
-- the few rows tests leave behind.
WITH d0 AS (DELETE FROM {s}.ready_entries), d1 AS (DELETE FROM {s}.claims),
    d2 AS (DELETE FROM {s}.closures), d3 AS (DELETE FROM {s}.tombstones),
    d4 AS (DELETE FROM {s}.done_entries), d5 AS (DELETE FROM {s}.leases),
    d6 AS (DELETE FROM {s}.deferred_jobs), d7 AS (DELETE FROM {s}.dlq_entries),
    d8 AS (DELETE FROM {s}.lanes), d9 AS (DELETE FROM {s}.claim_heads),
    d10 AS (DELETE FROM {s}.queue_counts), d11 AS (DELETE FROM {s}.completions),
    d12 AS (DELETE FROM {s}.queue_prune_stats), d13 AS (DELETE FROM awa.job_unique_claims),
    d14 AS (DELETE FROM awa.queue_meta)
SELECT 1

-- name: install
-- Install (or, with reset, rebuild) the engine's tables in a schema.
SELECT awa.install_queue_storage(%(schema)s, %(queue_slots)s, %(lease_slots)s, %(reset)s)
