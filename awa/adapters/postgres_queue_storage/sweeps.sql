-- Maintenance sweeps of the queue-storage engine (sweeps.py): due deferred jobs, stale
-- heartbeats, expired deadlines and callbacks.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: due_deferred
DELETE FROM {s}.deferred_jobs d
WHERE d.job_id IN (
    SELECT job_id FROM {s}.deferred_jobs
    WHERE run_at <= %(now)s
      -- a row from before migration 0395 may hold a run_at no read can decode: it stays
      -- here (reads skip and report it) rather than fail every promotion
      AND awa.run_at_in_range(run_at)
    ORDER BY run_at, job_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING d.*

-- name: stale_heartbeats
-- The first %(limit)s attempts whose heartbeat is older than %(cutoff)s (a rescue batch,
-- sweeps.py). A lease's heartbeat is never older than its claim, so the claim's attempted_at bounds
-- the index range.
SELECT c.job_id, c.run_lease FROM {s}.claims c
LEFT JOIN {s}.leases l
    ON l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id
WHERE c.attempted_at < %(cutoff)s
  AND coalesce(l.heartbeat_at, c.attempted_at) < %(cutoff)s
  AND NOT coalesce(l.waiting, false)
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
ORDER BY c.job_id
LIMIT %(limit)s

-- name: expired_deadlines
-- A materialised lease carries the attempt's deadline (an operator may have moved it);
-- otherwise the receipt does.
SELECT d.job_id, d.run_lease FROM (
    SELECT c.slot, c.claim_id, c.job_id, c.run_lease FROM {s}.claims c
    WHERE c.deadline_at IS NOT NULL AND c.deadline_at <= %(now)s
      AND NOT EXISTS (
        SELECT 1 FROM {s}.leases l
        WHERE l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id)
    UNION ALL
    SELECT c.slot, c.claim_id, c.job_id, c.run_lease FROM {s}.leases l
    JOIN {s}.claims c ON c.slot = l.claim_slot AND c.claim_id = l.claim_id
    WHERE l.deadline_at IS NOT NULL AND l.deadline_at <= %(now)s AND NOT l.waiting
) d
WHERE NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = d.slot AND x.claim_id = d.claim_id)
ORDER BY d.job_id
LIMIT %(limit)s

-- name: expired_callbacks
-- Lease rows of closed attempts wait for their slot's TRUNCATE; only open ones count.
SELECT l.job_id, l.run_lease FROM {s}.leases l
WHERE l.waiting AND l.callback_timeout_at IS NOT NULL AND l.callback_timeout_at <= %(now)s
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = l.claim_slot AND x.claim_id = l.claim_id)
ORDER BY l.job_id
LIMIT %(limit)s
