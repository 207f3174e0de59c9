-- Batch operations on Postgres: the target filter (compiled once for both engines, over
-- the relation each engine reads its jobs from) and the shared control tables.

-- name: target_where
-- The one compiled form of awa.domain.batch_ops.BatchFilter (plus eligibility).
state = ANY(%(eligible)s::awa.job_state[])
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY(tags))
  AND (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(created_gte)s::timestamptz IS NULL OR created_at >= %(created_gte)s::timestamptz)
  AND (%(created_lt)s::timestamptz IS NULL OR created_at < %(created_lt)s::timestamptz)

-- name: count_targets
SELECT count(*) AS n FROM {relation} WHERE {where}

-- name: list_targets
SELECT * FROM {relation} WHERE {where} AND id > %(after_id)s ORDER BY id LIMIT %(limit)s

-- name: insert_op
INSERT INTO awa.batch_operations
    (id, op_kind, filter, spec, state, submitted_by, submitted_at, updated_at)
VALUES
    (%(id)s, %(op_kind)s, %(filter)s, %(spec)s, %(state)s, %(submitted_by)s, %(now)s, %(now)s)
RETURNING *

-- name: get_op
SELECT * FROM awa.batch_operations WHERE id = %(id)s

-- name: list_ops
SELECT * FROM awa.batch_operations
WHERE %(state)s::text IS NULL OR state = %(state)s::text
ORDER BY submitted_at DESC, id DESC
LIMIT %(limit)s

-- name: cancel_op
UPDATE awa.batch_operations
SET state = %(target)s, updated_at = %(now)s
WHERE id = %(id)s AND state = ANY(%(from_states)s::text[])
RETURNING *

-- name: purge_ops
DELETE FROM awa.batch_operations
WHERE id IN (
    SELECT id FROM awa.batch_operations
    WHERE state = ANY(%(final)s::text[]) AND finalized_at < %(before)s
    ORDER BY finalized_at, id
    LIMIT %(limit)s
)

-- name: next_op
SELECT * FROM awa.batch_operations
WHERE state = ANY(%(active)s::text[])
ORDER BY submitted_at, id
LIMIT 1
FOR UPDATE SKIP LOCKED

-- name: begin_scan
UPDATE awa.batch_operations
SET state = %(state)s, started_at = %(now)s, runner_instance = %(runner)s, updated_at = %(now)s
WHERE id = %(id)s
RETURNING *

-- name: add_items
-- Only into an operation the step may still write (%(states)s, batch_ops.step_states),
-- whose row it holds shared until it commits: a finish either goes first and the items are
-- refused, or waits for them and sweeps them too. Nothing for an operation that does not
-- exist or is finished (the caller then reads it as it is).
WITH op AS (
    SELECT id FROM awa.batch_operations
    WHERE id = %(id)s AND state = ANY(%(states)s::text[])
    FOR SHARE
)
INSERT INTO awa.batch_operation_items (operation_id, job_id)
SELECT op.id, job_id
FROM op, unnest(%(job_ids)s::bigint[]) AS job_id
ON CONFLICT DO NOTHING

-- name: start_running
UPDATE awa.batch_operations
SET state = CASE WHEN state = %(cancelling)s THEN state ELSE %(running)s END,
    total_matched = (SELECT count(*) FROM awa.batch_operation_items WHERE operation_id = %(id)s),
    cursor = %(cursor)s,
    updated_at = %(now)s
WHERE id = %(id)s AND state = ANY(%(states)s::text[])
RETURNING *

-- name: pending_items
SELECT job_id FROM awa.batch_operation_items
WHERE operation_id = %(id)s AND state = 'pending'
ORDER BY job_id
LIMIT %(limit)s

-- name: lock_op_for_record
-- The first of a record's two statements (one transaction): the operation's row, only in
-- a state the step may still write (%(states)s), locked before any item (the order every
-- step takes: a finish and a record wait for each other, never deadlock). Records of one
-- operation so run one after another, and the second statement, taken after the lock,
-- reads every item as the record before it left it.
SELECT id FROM awa.batch_operations
WHERE id = %(id)s AND state = ANY(%(states)s::text[])
FOR NO KEY UPDATE

-- name: record_items
-- The second: one result per item (awa.domain.batch_ops.first_results), recorded over an
-- item still pending, or over one recorded %(superseded)s when the result is processed
-- (batch_ops.replaces: another runner found the job already moved by this one); the
-- counts move with it. A chunk recorded twice counts once. The last error is the last one
-- given.
WITH input AS (
    SELECT * FROM unnest(%(job_ids)s::bigint[], %(outcomes)s::text[], %(errors)s::text[])
        WITH ORDINALITY AS t(job_id, outcome, error, ord)
),
marked AS (
    UPDATE awa.batch_operation_items AS i
    SET state = input.outcome, error = input.error, processed_at = %(now)s
    FROM input, awa.batch_operation_items AS was
    WHERE i.operation_id = %(id)s AND i.job_id = input.job_id
      AND was.operation_id = i.operation_id AND was.job_id = i.job_id
      AND (
          i.state = 'pending'
          OR (input.outcome = 'processed' AND i.state = ANY(%(superseded)s::text[]))
      )
    RETURNING i.state, i.error, input.ord, was.state AS was
)
UPDATE awa.batch_operations AS o
SET processed = o.processed + (SELECT count(*) FROM marked WHERE state = 'processed')
        - (SELECT count(*) FROM marked WHERE was = 'processed'),
    skipped = o.skipped + (SELECT count(*) FROM marked WHERE state = 'skipped')
        - (SELECT count(*) FROM marked WHERE was = 'skipped'),
    errored = o.errored + (SELECT count(*) FROM marked WHERE state = 'errored')
        - (SELECT count(*) FROM marked WHERE was = 'errored'),
    last_error = coalesce(
        (SELECT error FROM marked WHERE error IS NOT NULL ORDER BY ord DESC LIMIT 1),
        o.last_error
    ),
    cursor = %(cursor)s,
    updated_at = %(now)s
WHERE o.id = %(id)s
RETURNING o.*

-- name: finish_op
-- The first of a finish's two statements (one transaction): the final state, only from a
-- state that may move to it (%(states)s), so a finished operation keeps its first finish.
-- The row stays locked until the sweep has run.
UPDATE awa.batch_operations
SET state = %(state)s,
    last_error = coalesce(%(last_error)s, last_error),
    finalized_at = %(now)s,
    retention_until = %(retention_until)s,
    updated_at = %(now)s
WHERE id = %(id)s AND state = ANY(%(states)s::text[])
RETURNING id

-- name: sweep_items
-- The second: items still pending (a cancelled operation) are marked and counted skipped.
-- A statement of its own, so it sees the items of an add that committed while the first
-- waited for the row.
WITH left_over AS (
    UPDATE awa.batch_operation_items
    SET state = 'skipped', processed_at = %(now)s
    WHERE operation_id = %(id)s AND state = 'pending'
    RETURNING job_id
)
UPDATE awa.batch_operations
SET skipped = skipped + (SELECT count(*) FROM left_over)
WHERE id = %(id)s
RETURNING *
