-- Attempt outcomes of the queue-storage engine (outcomes.py): leases, heartbeats, and the
-- queues that keep a DLQ.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: dlq_queues
SELECT queue FROM awa.queue_meta WHERE dlq_enabled

-- name: lock_leases
-- Lease writers of one attempt take its transaction lock first, in job id order (the
-- lease ring has no unique key on (job_id, run_lease) alone), so the next statement sees
-- every lease row committed before it. Returns the current lease slot, read after the
-- locks.
SELECT awa.queue_storage_lock_leases(%(schema)s, %(ids)s::bigint[]) AS lease_slot

-- name: heartbeat
-- Refresh the lease of running attempts in the current lease slot: in place when the row
-- is there, moved out of an older slot (delete + insert) otherwise, materialised from the
-- claim when the attempt has none. Waiting attempts, closed claims and unknown leases are
-- refused. Runs after lock_leases in the same transaction; %(slot)s is what it returned,
-- so the planner sees which partition is current.
WITH live AS (
    SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue, c.deadline_at, r.progress,
        r.metadata, r.callback_id, r.callback_timeout_at
    FROM (SELECT DISTINCT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[])
          AS i(job_id, run_lease)) i
    -- A claim's attempt is its ready row's plus one: found through ready_entries (job_id)
    -- and the claim probe (claims has no index by job id).
    JOIN {s}.ready_entries r ON r.job_id = i.job_id AND r.run_lease = i.run_lease - 1
    JOIN {s}.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
    WHERE NOT EXISTS (
        SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
), moved AS (
    -- A lease row is written from its claim, so its claim_id names the attempt: matching
    -- it against the open claims needs no join (a join against the CTE was planned as a
    -- nested loop scanning the slot once per attempt); job_id = ANY is the index range.
    DELETE FROM {s}.leases l
    WHERE l.job_id = ANY(%(ids)s::bigint[])
      AND l.claim_id = ANY(ARRAY(SELECT claim_id FROM live))
      AND l.lease_slot <> %(slot)s::int AND NOT l.waiting
    RETURNING l.*
), refreshed AS (
    UPDATE {s}.leases l SET heartbeat_at = %(now)s
    WHERE l.job_id = ANY(%(ids)s::bigint[])
      AND l.claim_id = ANY(ARRAY(SELECT claim_id FROM live))
      AND l.lease_slot = %(slot)s::int AND NOT l.waiting
    RETURNING l.job_id, l.run_lease
), placed AS (
    INSERT INTO {s}.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue,
        waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
        deadline_at)
    SELECT %(slot)s::int, n.*
    FROM (
        SELECT m.job_id, m.run_lease, m.claim_slot, m.claim_id, m.queue, false,
            %(now)s::timestamptz, m.progress, m.metadata, m.callback_id,
            m.callback_timeout_at, m.deadline_at
        FROM moved m
        UNION ALL
        SELECT v.job_id, v.run_lease, v.slot, v.claim_id, v.queue, false,
            %(now)s::timestamptz, v.progress, v.metadata, v.callback_id,
            v.callback_timeout_at, v.deadline_at
        FROM live v
        WHERE NOT EXISTS (
            SELECT 1 FROM {s}.leases l
            WHERE l.job_id = v.job_id AND l.run_lease = v.run_lease
              AND l.claim_id = v.claim_id)
    ) n
    RETURNING job_id, run_lease
)
SELECT job_id, run_lease FROM refreshed
UNION ALL
SELECT job_id, run_lease FROM placed

-- name: save_lease
-- The whole lease of one open attempt, written into the current lease slot %(slot)s (as
-- returned by lock_leases): in place, moved out of an older slot, or materialised. No row
-- when the claim is closed. awa.queue_storage_save_lease is the same for SQL callers.
WITH live AS (
    SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue FROM {s}.claims c
    WHERE c.slot = %(claim_slot)s AND c.claim_id = %(claim_id)s AND c.job_id = %(job_id)s
      AND NOT EXISTS (
          SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
), moved AS (
    DELETE FROM {s}.leases l USING live
    WHERE l.job_id = live.job_id AND l.run_lease = live.run_lease
      AND l.claim_id = live.claim_id AND l.lease_slot <> %(slot)s::int
    RETURNING l.job_id
), refreshed AS (
    UPDATE {s}.leases l SET waiting = %(waiting)s, heartbeat_at = %(heartbeat_at)s,
        progress = %(progress)s::jsonb, metadata = %(metadata)s::jsonb,
        callback_id = %(callback_id)s, callback_timeout_at = %(callback_timeout_at)s,
        deadline_at = %(deadline_at)s
    FROM live
    WHERE l.lease_slot = %(slot)s::int AND l.job_id = live.job_id
      AND l.run_lease = live.run_lease AND l.claim_id = live.claim_id
    RETURNING l.job_id
), placed AS (
    INSERT INTO {s}.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue,
        waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
        deadline_at)
    SELECT %(slot)s::int, live.job_id, live.run_lease, live.slot, live.claim_id, live.queue,
        %(waiting)s, %(heartbeat_at)s, %(progress)s::jsonb, %(metadata)s::jsonb,
        %(callback_id)s, %(callback_timeout_at)s, %(deadline_at)s
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM refreshed)
    RETURNING job_id
)
SELECT job_id, (SELECT count(*) FROM moved) AS moved FROM live
