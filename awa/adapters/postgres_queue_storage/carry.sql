-- Carry-forward of live rows by prune (ADR 0006, "Carry-forward of live rows"). Every
-- statement copies rows unchanged but for the slot: the copy is the same fact (same
-- fact_id, claim_id, lane position, body), so nothing resolves differently.

-- name: carry_ready
-- The live ready rows of slot k into slot %(to)s: not tombstoned, and either never claimed
-- or claimed by an attempt that is still open (its claim has no closure). A ready row has
-- at most one claim. {ready_entries_k}, {claims_k}, {closures_k} and {tombstones_k} are the
-- slot's own partitions, joined as wholes: probing through the partitioned parents
-- planned every partition per row (a slot of 12,000 rows took 50 s under load).
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
    errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
    run_lease, progress, ordering_key
)
SELECT %(to)s::int, r.fact_id, r.shard, r.lane_seq, r.job_id, r.kind, r.queue, r.args,
    r.priority, r.attempt, r.max_attempts, r.run_at, r.heartbeat_at, r.deadline_at,
    r.attempted_at, r.finalized_at, r.created_at, r.errors, r.metadata, r.tags, r.unique_key,
    r.unique_states, r.callback_id, r.callback_timeout_at, r.run_lease, r.progress,
    r.ordering_key
FROM {ready_entries_k} r
LEFT JOIN {tombstones_k} t ON t.ready_fact = r.fact_id
LEFT JOIN {claims_k} c ON c.ready_fact = r.fact_id
LEFT JOIN {closures_k} x ON x.claim_id = c.claim_id
WHERE t.ready_fact IS NULL AND x.claim_id IS NULL
ORDER BY r.queue, r.priority, r.shard, r.lane_seq
RETURNING job_id

-- name: carry_claims
-- The open claims of slot k into slot %(to)s (their ready rows go with carry_ready).
-- Returns what the lease re-point under the lock needs.
INSERT INTO {s}.claims (
    slot, claim_id, ready_fact, job_id, run_lease, queue, attempted_at, deadline_at
)
SELECT %(to)s::int, c.claim_id, c.ready_fact, c.job_id, c.run_lease, c.queue,
    c.attempted_at, c.deadline_at
FROM {claims_k} c
LEFT JOIN {closures_k} x ON x.claim_id = c.claim_id
WHERE x.claim_id IS NULL
ORDER BY c.claim_id
RETURNING job_id, claim_id

-- name: repoint_leases
-- Run under prune's ACCESS EXCLUSIVE lock on slot %(from)s: the lease rows of the carried
-- attempts, wherever they are in the lease ring, now name the claim's new slot. A lease
-- write since the copy updated or moved its row and kept claim_slot = %(from)s, so this
-- takes its newest version. Rows of closed attempts are not touched (they never resolve).
UPDATE {s}.leases l SET claim_slot = %(to)s::int
WHERE l.job_id = ANY(%(ids)s::bigint[])
  AND l.claim_id = ANY(%(claims)s::bigint[])
  AND l.claim_slot = %(from)s::int

-- name: live_leases
-- The lease rows of open attempts in lease slot %(slot)s, in job id order (the order their
-- advisory locks are taken in).
SELECT l.job_id, l.run_lease, l.claim_id FROM {s}.leases l
JOIN {s}.claims c ON c.slot = l.claim_slot AND c.claim_id = l.claim_id
WHERE l.lease_slot = %(slot)s::int
  AND NOT EXISTS (SELECT 1 FROM {s}.closures x
                  WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
ORDER BY l.job_id, l.run_lease

-- name: try_lock_leases
-- The attempts' lease locks (the same keys as awa.queue_storage_lock_leases), without
-- waiting: true only when every one was granted. Prune never waits for a lease writer.
SELECT coalesce(bool_and(pg_try_advisory_xact_lock(
    hashtext('awa.lease:' || %(schema)s::text), (i.id %% 2147483647)::int)), true) AS ok
FROM (SELECT DISTINCT id FROM unnest(%(ids)s::bigint[]) AS u(id) ORDER BY id) i

-- name: carry_leases
-- Move the lease rows of open attempts out of lease slot %(from)s into the current lease
-- slot %(to)s, every column kept; the caller holds their advisory locks.
WITH moved AS (
    DELETE FROM {s}.leases l
    WHERE l.lease_slot = %(from)s::int
      AND l.job_id = ANY(%(ids)s::bigint[])
      AND l.claim_id = ANY(%(claims)s::bigint[])
    RETURNING l.*
)
INSERT INTO {s}.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue, waiting,
    heartbeat_at, progress, metadata, callback_id, callback_timeout_at, deadline_at)
SELECT %(to)s::int, m.job_id, m.run_lease, m.claim_slot, m.claim_id, m.queue, m.waiting,
    m.heartbeat_at, m.progress, m.metadata, m.callback_id, m.callback_timeout_at,
    m.deadline_at
FROM moved m
RETURNING job_id

-- name: carry_ahead_pick
-- Up to %(limit)s ready rows of slot k nobody ever claimed or tombstoned, lane by lane
-- in lane order (through the (queue, priority, shard, lane_seq) index, so the read stops
-- at the limit and a step locks the heads of few lanes). What prune moves ahead of its
-- swap, a bounded step at a time, when the slot holds more of them than one step carries
-- (ADR 0006, "Carry-forward of live rows", *A step at a time*).
SELECT r.fact_id, r.queue, r.priority, r.shard FROM {ready_entries_k} r
WHERE NOT EXISTS (
        SELECT 1 FROM {claims_k} c WHERE c.slot = r.slot AND c.ready_fact = r.fact_id OFFSET 0)
  AND NOT EXISTS (
        SELECT 1 FROM {tombstones_k} t
        WHERE t.slot = r.slot AND t.ready_fact = r.fact_id OFFSET 0)
ORDER BY r.queue, r.priority, r.shard, r.lane_seq
LIMIT %(limit)s

-- name: carry_ahead_settings
-- First in a step of carry-ahead: the longest it waits for its lanes' claim heads (a
-- claim statement holds one for its own length, an operator's drain for its
-- transaction's), and no JIT: the ring's partitions are never analyzed, so their
-- estimates are large and the server compiled the pick (30 ms) to read 2,000 rows (5 ms).
SELECT set_config('lock_timeout', '500ms', true), set_config('jit', 'off', true)

-- name: carry_ahead
-- Move the ready rows %(facts)s of slot k into slot %(to)s: deleted from k and inserted
-- into %(to)s in one statement, every column but the slot kept (same fact, lane position
-- and body). The caller holds their lanes' claim heads, marked retired
-- (awa.queue_storage_retire_lanes), and this statement's snapshot is taken after it got
-- them: a row claimed or tombstoned before is left where it is, no claimer is inside
-- those lanes until the commit, and a claimer whose snapshot predates it leaves the lanes
-- alone. A job is thus in exactly one slot before and after.
WITH moved AS (
    DELETE FROM {ready_entries_k} r
    WHERE r.slot = {k} AND r.fact_id = ANY(%(facts)s::bigint[])
      AND NOT EXISTS (
          SELECT 1 FROM {claims_k} c WHERE c.slot = r.slot AND c.ready_fact = r.fact_id)
      AND NOT EXISTS (
          SELECT 1 FROM {tombstones_k} t WHERE t.slot = r.slot AND t.ready_fact = r.fact_id)
    RETURNING r.*
)
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
    errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
    run_lease, progress, ordering_key
)
SELECT %(to)s::int, m.fact_id, m.shard, m.lane_seq, m.job_id, m.kind, m.queue, m.args,
    m.priority, m.attempt, m.max_attempts, m.run_at, m.heartbeat_at, m.deadline_at,
    m.attempted_at, m.finalized_at, m.created_at, m.errors, m.metadata, m.tags, m.unique_key,
    m.unique_states, m.callback_id, m.callback_timeout_at, m.run_lease, m.progress,
    m.ordering_key
FROM moved m
ORDER BY m.queue, m.priority, m.shard, m.lane_seq
RETURNING job_id
