-- Callbacks of the queue-storage engine (callbacks.py, admin_changes.py): a lease by its
-- callback id and the callbacks' stored expressions.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: lease_by_callback
SELECT l.job_id, l.run_lease FROM {s}.leases l
WHERE l.callback_id = %(callback_id)s
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = l.claim_slot AND x.claim_id = l.claim_id)

-- name: save_callback_expressions
-- The row belongs to the attempt registering now: an id used before (by an attempt that
-- ended without a resolve, whose row cleanup has not reached yet) is taken over whole.
INSERT INTO awa.callback_expressions
    (callback_id, queue_schema, job_id, run_lease, filter, on_complete, on_fail, transform)
VALUES (%(callback_id)s, %(schema)s, %(job_id)s, %(run_lease)s, %(filter)s, %(on_complete)s,
        %(on_fail)s, %(transform)s)
ON CONFLICT (callback_id) DO UPDATE SET
    queue_schema = EXCLUDED.queue_schema, job_id = EXCLUDED.job_id,
    run_lease = EXCLUDED.run_lease, filter = EXCLUDED.filter,
    on_complete = EXCLUDED.on_complete, on_fail = EXCLUDED.on_fail,
    transform = EXCLUDED.transform, created_at = EXCLUDED.created_at

-- name: load_callback_expressions
SELECT filter, on_complete, on_fail, transform FROM awa.callback_expressions
WHERE callback_id = %(callback_id)s AND job_id = %(job_id)s AND run_lease = %(run_lease)s

-- name: drop_callback_expressions
DELETE FROM awa.callback_expressions WHERE callback_id = %(callback_id)s

-- name: drop_attempt_callback_expressions
-- The expressions an attempt registered under a callback id it has since replaced.
DELETE FROM awa.callback_expressions
WHERE callback_id = %(callback_id)s AND job_id = %(job_id)s AND run_lease = %(run_lease)s

-- name: cleanup_callback_expressions
-- Rows of callbacks that ended without a resolve (rescue, cancel, operator retry).
DELETE FROM awa.callback_expressions e
WHERE e.callback_id IN (
    SELECT c.callback_id FROM awa.callback_expressions c
    WHERE c.queue_schema = %(schema)s AND c.created_at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.callback_id = c.callback_id)
    ORDER BY c.created_at
    LIMIT %(limit)s
)
