-- Fact writes of the queue-storage engine (facts.py): the snapshot inserts every operation
-- shares, tombstones, unique keys, counters and notifications.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: insert_ready
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
    errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
    run_lease, progress, ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), x.shard,
    x.lane_seq, {snapshot_values}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset})

-- name: insert_deferred
INSERT INTO {s}.deferred_jobs (
    fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata,
    tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress,
    ordering_key
)
SELECT nextval('{s}.fact_seq'), x.state::awa.job_state, {snapshot_values}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset})

-- name: insert_done
INSERT INTO {s}.done_entries (
    slot, fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata,
    tags, unique_key, unique_states, callback_id, callback_timeout_at, run_lease, progress,
    ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'),
    x.state::awa.job_state, {snapshot_values}
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset})

-- name: insert_deletion_markers
-- A deletion marker for each job of `ids` (a done entry without a state, above every fact
-- of the job), or with `history_only` for those of them with a done entry: a job whose
-- head is its deferred row may keep a terminal fact below it (a child its parent's
-- failure cancelled and the parent's retry brought back), which would be its head again
-- once the deferred row is taken.
INSERT INTO {s}.done_entries (slot, fact_id, state, job_id)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), NULL, id
FROM unnest(%(ids)s::bigint[]) AS i(id)
WHERE NOT %(history_only)s::boolean
   OR EXISTS (SELECT 1 FROM {s}.done_entries d WHERE d.job_id = i.id)

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
    x.unique_states::bit(8), x.callback_id, x.callback_timeout_at, x.run_lease,
    x.progress, decode(x.ordering_key, 'hex'), x.dlq_reason, x.dlq_at, x.run_lease
FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({snapshot_recordset}, dlq_reason text, dlq_at timestamptz)

-- name: prune_gate_shared
-- The prune gate (its first key is PRUNE_GATE, its second the schema's hash), shared: a
-- change to a terminal job holds it while prune decides that job's slot.
SELECT pg_advisory_xact_lock_shared(%(gate)s, hashtext(%(schema)s))

-- name: tombstone
INSERT INTO {s}.tombstones (slot, ready_fact, fact_id)
SELECT slot, fact, nextval('{s}.fact_seq')
FROM unnest(%(slots)s::int[], %(facts)s::bigint[]) AS i(slot, fact)
ON CONFLICT DO NOTHING
RETURNING ready_fact

-- name: retire_lanes
-- Every writer that retires unclaimed ready rows (cancel, drain, delete, moves) locks
-- their lanes' claim heads first and marks them with its transaction id
-- (awa.queue_storage_retire_lanes, migration 0380): no claimer is inside those lanes
-- while the tombstones are written, and a claimer whose snapshot predates the commit
-- leaves the lane alone (see claim).
SELECT awa.queue_storage_retire_lanes(
    %(schema)s, %(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[]) AS marked

-- name: ready_lane_of
SELECT fact_id, slot, queue, priority, shard, lane_seq FROM {s}.ready_entries
WHERE slot = ANY(%(slots)s::int[]) AND fact_id = ANY(%(facts)s::bigint[])

-- name: unique_claim
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT k, id FROM unnest(%(keys)s::bytea[], %(ids)s::bigint[]) AS i(k, id)
ON CONFLICT (unique_key) DO NOTHING
RETURNING unique_key, job_id

-- name: unique_holder
SELECT job_id FROM awa.job_unique_claims WHERE unique_key = %(key)s

-- name: unique_release
DELETE FROM awa.job_unique_claims c
USING unnest(%(keys)s::bytea[], %(ids)s::bigint[]) AS i(k, id)
WHERE c.unique_key = i.k AND c.job_id = i.id

-- name: add_counts
-- Counters are the last locks any transaction takes, in key order. Each kind of writer
-- has its own bucket range, so none waits for another kind's counter row until commit:
-- enqueues 0-15 (a free one, counts_free_cte), the common claim 16-23, completion by
-- receipt 24-31, everything else (this statement) 32-39; within a range, by backend.
INSERT INTO {s}.queue_counts AS c (queue, state, bucket, n)
SELECT q, st::awa.job_state, (32 + pg_backend_pid() %% 8)::smallint, d
FROM unnest(%(queues)s::text[], %(states)s::text[], %(deltas)s::bigint[]) AS i(q, st, d)
ORDER BY q, st
ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: counts_free_cte
-- Counters of an enqueue, as CTEs after a CTE ``cnt_in(q, st, d)``: each (queue, state) is
-- added to a bucket row no other open transaction holds (SKIP LOCKED, the backend's own
-- bucket first), so producers of one queue do not queue behind each other's counter row
-- until commit. When all are held a new bucket is made (at most {count_buckets}; one that another
-- open transaction is making is passed over by its advisory lock); only when all exist and
-- are held does the enqueue wait for one. Counters stay the last locks of the transaction.
cnt_free AS (
    SELECT i.*, f.bucket
    FROM cnt_in i
    LEFT JOIN LATERAL (
        SELECT c.bucket FROM {s}.queue_counts c
        WHERE c.queue = i.q AND c.state = i.st AND c.bucket < {count_buckets}
        ORDER BY c.bucket = pg_backend_pid() %% {count_buckets} DESC, c.bucket
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ) f ON true
), cnt_added AS (
    UPDATE {s}.queue_counts c SET n = c.n + f.d
    FROM cnt_free f
    WHERE f.bucket IS NOT NULL AND c.queue = f.q AND c.state = f.st AND c.bucket = f.bucket
    RETURNING 1
), cnt_made AS (
    INSERT INTO {s}.queue_counts AS c (queue, state, bucket, n)
    SELECT f.q, f.st, coalesce(b.bucket, pg_backend_pid() %% {count_buckets}), f.d
    FROM cnt_free f
    LEFT JOIN LATERAL (
        SELECT b.bucket FROM (
            SELECT (pg_backend_pid() + g) %% {count_buckets} AS bucket
            FROM generate_series(0, {count_buckets} - 1) g
        ) b
        WHERE NOT EXISTS (
              SELECT 1 FROM {s}.queue_counts x
              WHERE x.queue = f.q AND x.state = f.st AND x.bucket = b.bucket)
          AND pg_try_advisory_xact_lock(
              hashtextextended('awa.counts:{s}:' || f.q || ':' || f.st || ':' || b.bucket, 0))
        LIMIT 1
    ) b ON true
    WHERE f.bucket IS NULL
    ORDER BY 1, 2
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n
    RETURNING 1
)

-- name: add_counts_free
-- Counters of an enqueue (counts_free_cte).
WITH cnt_in AS (
    SELECT q, st::awa.job_state AS st, d
    FROM unnest(%(queues)s::text[], %(states)s::text[], %(deltas)s::bigint[]) AS i(q, st, d)
), {counts_free_cte}
SELECT (SELECT count(*) FROM cnt_added) + (SELECT count(*) FROM cnt_made)

-- name: notify
SELECT pg_notify(channel, payload)
FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS i(channel, payload)

-- name: snapshots
SELECT * FROM {s}.jobs_resolved WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id

-- name: take_deferred
DELETE FROM {s}.deferred_jobs WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING *

-- name: take_deferred_heads
-- The deferred heads of jobs named by (id, state) pairs, taken out of deferred_jobs in job
-- id order and answered as their snapshots (jobs_resolved's columns): the read and the
-- supersede of admin_changes.change_all's set-wise path (the waiting children a
-- completion releases, all at once). A deferred row is its job's head fact (every
-- transition takes it before appending the next one); a pair whose job is not deferred,
-- or is in another state, is left alone and answered by no row.
WITH wanted AS (
    SELECT d.job_id
    FROM {s}.deferred_jobs d
    JOIN unnest(%(ids)s::bigint[], %(states)s::text[]) AS i(job_id, state)
        ON d.job_id = i.job_id AND d.state = i.state::awa.job_state
    ORDER BY d.job_id
    FOR UPDATE OF d
)
DELETE FROM {s}.deferred_jobs d USING wanted w
WHERE d.job_id = w.job_id
RETURNING d.job_id AS id, d.kind, d.queue, d.args, d.state, d.priority, d.attempt,
    d.max_attempts, d.run_at, d.heartbeat_at, d.deadline_at, d.attempted_at, d.finalized_at,
    d.created_at, d.errors, d.metadata, d.tags, d.unique_key, d.unique_states,
    d.callback_id, d.callback_timeout_at, d.run_lease, d.progress, d.ordering_key,
    d.fact_id, NULL::int AS ready_slot, NULL::bigint AS ready_fact, NULL::bigint AS claim_id,
    false AS open_claim

-- name: add_completions
-- Completed jobs per (queue, UTC minute of finalized_at); signed, like queue_counts. Buckets
-- 0-7 by backend; completion by receipt writes 8-15, so neither waits for the other.
INSERT INTO {s}.completions AS c (queue, minute, bucket, n)
SELECT q, m, (pg_backend_pid() %% 8)::smallint, d
FROM unnest(%(queues)s::text[], %(minutes)s::timestamptz[], %(deltas)s::bigint[]) AS i(q, m, d)
ORDER BY q, m
ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: snapshot_recordset
-- The columns of a whole snapshot in the jsonb_to_recordset input the inserts read (the
-- objects that row_json builds).
job_id bigint, kind text, queue text, args jsonb, priority smallint, attempt smallint, max_attempts smallint, run_at timestamptz, heartbeat_at timestamptz, deadline_at timestamptz, attempted_at timestamptz, finalized_at timestamptz, created_at timestamptz, errors jsonb, metadata jsonb, tags jsonb, unique_key text, unique_states text, callback_id text, callback_timeout_at timestamptz, run_lease bigint, progress jsonb, ordering_key text, state text, shard int, lane_seq bigint

-- name: snapshot_values
-- A snapshot's columns from snapshot_recordset, from job_id on, as the fact tables store them.
x.job_id, x.kind, x.queue, coalesce(x.args, 'null'::jsonb), x.priority, x.attempt, x.max_attempts, x.run_at, x.heartbeat_at, x.deadline_at, x.attempted_at, x.finalized_at, x.created_at, ARRAY(SELECT jsonb_array_elements(x.errors)), coalesce(x.metadata, '{}'::jsonb), ARRAY(SELECT jsonb_array_elements_text(x.tags)), decode(x.unique_key, 'hex'), x.unique_states::bit(8), x.callback_id, x.callback_timeout_at, x.run_lease, x.progress, decode(x.ordering_key, 'hex')
