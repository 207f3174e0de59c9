-- Batch operations of the canonical engine (the per-job change; targets and control rows
-- are shared: awa/adapters/_pg/batch_ops.sql).

-- name: batch_lock_job
-- Waits for a claim holding the row; the claim's commit makes the job running, so the
-- change then skips it.
SELECT * FROM awa.canonical_jobs WHERE id = %(id)s FOR UPDATE

-- name: batch_update_job
-- The queue change fires canonical_jobs_notify_ready_update for available jobs.
UPDATE awa.canonical_jobs
SET priority = %(priority)s, queue = %(queue)s, metadata = %(metadata)s
WHERE id = %(id)s
RETURNING id
