-- Statements of the queue-storage engine. ``{s}`` is replaced by the quoted schema name
-- once per engine; every time value is a parameter taken from the engine's clock.

-- name: reserve_lanes
-- One upsert reserves sequence numbers for every lane of a batch; the row lock it takes
-- is held to commit, so lane positions become visible in order.
INSERT INTO {s}.lanes AS l (queue, priority, shard, next_seq)
SELECT q, p, sh, n
FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[], %(counts)s::bigint[])
    AS i(q, p, sh, n)
ORDER BY q, p, sh
ON CONFLICT (queue, priority, shard) DO UPDATE SET next_seq = l.next_seq + EXCLUDED.next_seq
RETURNING queue, priority, shard, next_seq

-- name: ensure_claim_heads
INSERT INTO {s}.claim_heads (queue, priority, shard, claim_seq)
SELECT q, p, sh, 0
FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[]) AS i(q, p, sh)
ORDER BY q, p, sh
ON CONFLICT DO NOTHING

-- name: next_job_ids
SELECT nextval('awa.jobs_id_seq') AS id FROM generate_series(1, %(n)s) ORDER BY 1

-- name: insert_ready
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
    errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
    run_lease, progress, ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), x.shard,
    x.lane_seq, {body}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({recordset})

-- name: insert_deferred
INSERT INTO {s}.deferred_jobs (
    fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata,
    tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress,
    ordering_key
)
SELECT nextval('{s}.fact_seq'), x.state::awa.job_state, {body}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({recordset})

-- name: insert_done
INSERT INTO {s}.done_entries (
    slot, fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata,
    tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress,
    ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'),
    x.state::awa.job_state, {body}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({recordset})

-- name: insert_deletion_markers
INSERT INTO {s}.done_entries (slot, fact_id, state, job_id)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), NULL, id
FROM unnest(%(ids)s::bigint[]) AS i(id)

-- name: insert_dlq
INSERT INTO {s}.dlq_entries (
    job_id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, callback_id, callback_timeout_at, run_lease, progress, ordering_key,
    dlq_reason, dlq_at, original_run_lease
)
SELECT x.job_id, x.kind, x.queue, coalesce(x.args, 'null'::jsonb), x.state::awa.job_state,
    x.priority, x.attempt, x.max_attempts, x.run_at, x.heartbeat_at, x.deadline_at,
    x.attempted_at, x.finalized_at, x.created_at,
    ARRAY(SELECT jsonb_array_elements(x.errors)), x.metadata,
    ARRAY(SELECT jsonb_array_elements_text(x.tags)), decode(x.unique_key, 'hex'),
    x.unique_states::bit(8), x.callback_id::uuid, x.callback_timeout_at, x.run_lease,
    x.progress, decode(x.ordering_key, 'hex'), x.dlq_reason, x.dlq_at, x.run_lease
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({recordset}, dlq_reason text, dlq_at timestamptz)

-- name: tombstone
INSERT INTO {s}.tombstones (slot, ready_fact, fact_id)
SELECT slot, fact, nextval('{s}.fact_seq')
FROM unnest(%(slots)s::int[], %(facts)s::bigint[]) AS i(slot, fact)
ON CONFLICT DO NOTHING
RETURNING ready_fact

-- name: lock_lane_heads
-- Cancels and moves of unclaimed rows lock the lane's claim head first, so no claimer is
-- inside the lane while the tombstone is written.
SELECT queue, priority, shard, claim_seq FROM {s}.claim_heads
WHERE (queue, priority, shard) IN (
    SELECT * FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[])
)
ORDER BY queue, priority, shard
FOR UPDATE

-- name: ready_lane_of
SELECT fact_id, slot, queue, priority, shard, lane_seq FROM {s}.ready_entries
WHERE slot = ANY(%(slots)s::int[]) AND fact_id = ANY(%(facts)s::bigint[])

-- name: unique_claim
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT k, id FROM unnest(%(keys)s::bytea[], %(ids)s::bigint[]) AS i(k, id)
ON CONFLICT (unique_key) DO NOTHING
RETURNING unique_key

-- name: unique_holder
SELECT job_id FROM awa.job_unique_claims WHERE unique_key = %(key)s

-- name: unique_release
DELETE FROM awa.job_unique_claims c
USING unnest(%(keys)s::bytea[], %(ids)s::bigint[]) AS i(k, id)
WHERE c.unique_key = i.k AND c.job_id = i.id

-- name: add_counts
-- Counters are the last locks any transaction takes, in key order.
INSERT INTO {s}.queue_counts AS c (queue, state, bucket, n)
SELECT q, st::awa.job_state, (pg_backend_pid() %% 8)::smallint, d
FROM unnest(%(queues)s::text[], %(states)s::text[], %(deltas)s::bigint[]) AS i(q, st, d)
ORDER BY q, st
ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: notify
SELECT pg_notify(channel, payload)
FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS i(channel, payload)

-- name: claim
-- Lock the lane heads nobody else is claiming from, take the best unclaimed rows of their
-- windows (lane_seq >= cursor) and append one receipt per row.
WITH heads AS (
    SELECT queue, priority, shard, claim_seq FROM {s}.claim_heads
    WHERE queue = %(queue)s
    ORDER BY priority, shard
    FOR UPDATE SKIP LOCKED
), candidates AS (
    SELECT r.slot, r.fact_id, r.job_id, r.run_at, r.run_lease,
        CASE WHEN %(aging)s::float8 > 0 AND %(now)s::timestamptz > r.run_at THEN greatest(1,
            r.priority - floor(extract(epoch FROM %(now)s::timestamptz - r.run_at) / %(aging)s))
        ELSE r.priority END AS effective
    FROM heads h
    JOIN {s}.ready_entries r
        ON r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
        AND r.lane_seq >= h.claim_seq
    WHERE r.run_at <= %(now)s
        AND NOT EXISTS (
            SELECT 1 FROM {s}.claims c WHERE c.slot = r.slot AND c.ready_fact = r.fact_id)
        AND NOT EXISTS (
            SELECT 1 FROM {s}.tombstones t WHERE t.slot = r.slot AND t.ready_fact = r.fact_id)
    ORDER BY effective, r.run_at, r.job_id
    LIMIT %(limit)s
), inserted AS (
    INSERT INTO {s}.claims (slot, claim_id, ready_fact, job_id, run_lease, queue, attempted_at,
        deadline_at)
    SELECT slot, nextval('{s}.fact_seq'), fact_id, job_id, run_lease + 1, %(queue)s, %(now)s,
        %(deadline_at)s
    FROM candidates
    RETURNING slot, ready_fact, job_id
)
SELECT i.slot, i.ready_fact, i.job_id
FROM inserted i JOIN candidates c ON c.fact_id = i.ready_fact
ORDER BY c.effective, c.run_at, c.job_id

-- name: advance_cursors
-- Move each touched lane's cursor over its now contiguous claimed / tombstoned prefix.
-- Rows of transactions still in flight sit above the committed next_seq, so the cursor
-- can never pass them.
WITH lanes AS (
    SELECT DISTINCT r.queue, r.priority, r.shard
    FROM {s}.ready_entries r
    WHERE r.slot = ANY(%(slots)s::int[]) AND r.fact_id = ANY(%(facts)s::bigint[])
), target AS (
    SELECT h.queue, h.priority, h.shard, h.claim_seq, coalesce(
        (SELECT min(r.lane_seq) FROM {s}.ready_entries r
         WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
           AND r.lane_seq >= h.claim_seq
           AND NOT EXISTS (SELECT 1 FROM {s}.claims c
                           WHERE c.slot = r.slot AND c.ready_fact = r.fact_id)
           AND NOT EXISTS (SELECT 1 FROM {s}.tombstones t
                           WHERE t.slot = r.slot AND t.ready_fact = r.fact_id)),
        (SELECT max(r.lane_seq) + 1 FROM {s}.ready_entries r
         WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
           AND r.lane_seq >= h.claim_seq),
        h.claim_seq) AS new_seq
    FROM {s}.claim_heads h JOIN lanes USING (queue, priority, shard)
)
UPDATE {s}.claim_heads h SET claim_seq = t.new_seq
FROM target t
WHERE h.queue = t.queue AND h.priority = t.priority AND h.shard = t.shard
  AND t.new_seq > h.claim_seq

-- name: snapshots
SELECT * FROM {s}.jobs_resolved WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id

-- name: open_attempts
-- The live attempts among (job_id, run_lease) pairs: open receipts only.
SELECT c.slot, c.claim_id, c.job_id, c.run_lease, c.queue,
    (l.job_id IS NOT NULL) AS has_lease, coalesce(l.waiting, false) AS waiting,
    r.unique_key, r.unique_states
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS i(job_id, run_lease)
JOIN {s}.claims c ON c.job_id = i.job_id AND c.run_lease = i.run_lease
JOIN {s}.ready_entries r ON r.slot = c.slot AND r.fact_id = c.ready_fact
LEFT JOIN {s}.leases l ON l.job_id = c.job_id AND l.run_lease = c.run_lease
WHERE NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)

-- name: close_claims
-- The closure key (slot, claim_id) is the arbiter: of two racing finalisers exactly one
-- inserts, the other gets no row back and reports stale.
INSERT INTO {s}.closures (slot, claim_id, fact_id, queue, outcome, finalized_at)
SELECT slot, claim_id, nextval('{s}.fact_seq'), queue, outcome, %(now)s
FROM unnest(%(slots)s::int[], %(claims)s::bigint[], %(queues)s::text[], %(outcomes)s::text[])
    AS i(slot, claim_id, queue, outcome)
ORDER BY slot, claim_id
ON CONFLICT DO NOTHING
RETURNING claim_id

-- name: delete_leases
DELETE FROM {s}.leases l
USING unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS i(job_id, run_lease)
WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease

-- name: heartbeat
-- Materialise (or refresh) the lease of running attempts; waiting ones are refused.
INSERT INTO {s}.leases AS l (job_id, run_lease, claim_slot, claim_id, queue, heartbeat_at,
    progress, metadata, callback_id, callback_timeout_at)
SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue, %(now)s, r.progress, r.metadata,
    r.callback_id, r.callback_timeout_at
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS i(job_id, run_lease)
JOIN {s}.claims c ON c.job_id = i.job_id AND c.run_lease = i.run_lease
JOIN {s}.ready_entries r ON r.slot = c.slot AND r.fact_id = c.ready_fact
WHERE NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
ORDER BY c.job_id, c.run_lease
ON CONFLICT (job_id, run_lease) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at
    WHERE NOT l.waiting
RETURNING job_id, run_lease

-- name: upsert_lease
INSERT INTO {s}.leases AS l (job_id, run_lease, claim_slot, claim_id, queue, waiting,
    heartbeat_at, progress, metadata, callback_id, callback_timeout_at)
VALUES (%(job_id)s, %(run_lease)s, %(slot)s, %(claim_id)s, %(queue)s, %(waiting)s,
    %(heartbeat_at)s, %(progress)s, %(metadata)s, %(callback_id)s, %(callback_timeout_at)s)
ON CONFLICT (job_id, run_lease) DO UPDATE SET
    waiting = EXCLUDED.waiting, heartbeat_at = EXCLUDED.heartbeat_at,
    progress = EXCLUDED.progress, metadata = EXCLUDED.metadata,
    callback_id = EXCLUDED.callback_id, callback_timeout_at = EXCLUDED.callback_timeout_at

-- name: lease_by_callback
SELECT job_id, run_lease FROM {s}.leases WHERE callback_id = %(callback_id)s

-- name: due_deferred
DELETE FROM {s}.deferred_jobs d
WHERE d.job_id IN (
    SELECT job_id FROM {s}.deferred_jobs
    WHERE run_at <= %(now)s
    ORDER BY run_at, job_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING d.*

-- name: take_deferred
DELETE FROM {s}.deferred_jobs WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING *

-- name: stale_heartbeats
SELECT c.job_id, c.run_lease FROM {s}.claims c
LEFT JOIN {s}.leases l ON l.job_id = c.job_id AND l.run_lease = c.run_lease
WHERE coalesce(l.heartbeat_at, c.attempted_at) < %(cutoff)s
  AND NOT coalesce(l.waiting, false)
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
ORDER BY c.job_id

-- name: expired_deadlines
SELECT c.job_id, c.run_lease FROM {s}.claims c
LEFT JOIN {s}.leases l ON l.job_id = c.job_id AND l.run_lease = c.run_lease
WHERE c.deadline_at IS NOT NULL AND c.deadline_at <= %(now)s
  AND NOT coalesce(l.waiting, false)
  AND NOT EXISTS (
    SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
ORDER BY c.job_id

-- name: expired_callbacks
SELECT l.job_id, l.run_lease FROM {s}.leases l
WHERE l.waiting AND l.callback_timeout_at IS NOT NULL AND l.callback_timeout_at <= %(now)s
ORDER BY l.job_id

-- name: queue_counts
SELECT queue, state::text AS state, sum(n)::bigint AS n
FROM {s}.queue_counts GROUP BY queue, state

-- name: queue_flags
SELECT queue, paused, dlq_enabled, enqueue_shards FROM awa.queue_meta

-- name: completed_since
SELECT queue, count(*)::bigint AS n FROM {s}.closures
WHERE outcome = 'completed' AND finalized_at > %(since)s GROUP BY queue

-- name: oldest_available
SELECT h.queue, min(r.run_at) AS oldest
FROM {s}.claim_heads h
JOIN {s}.ready_entries r
    ON r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
    AND r.lane_seq >= h.claim_seq
WHERE NOT EXISTS (SELECT 1 FROM {s}.claims c WHERE c.slot = r.slot AND c.ready_fact = r.fact_id)
  AND NOT EXISTS (
    SELECT 1 FROM {s}.tombstones t WHERE t.slot = r.slot AND t.ready_fact = r.fact_id)
GROUP BY h.queue
