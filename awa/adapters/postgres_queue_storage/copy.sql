-- COPY enqueue of the queue-storage engine (copy.py): a staged batch moved into the ready
-- and deferred facts.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: copy_begin
-- The direct COPY path (every job available, no unique key): job ids in input order, lane
-- positions for each lane's input range (reserve_lanes_cte; ``first``/``last`` are the
-- 1-based input positions of a lane's first and last job), the current slot and one fact
-- id per job, so the rows can be copied straight into ready_entries.
WITH ids AS MATERIALIZED (
    SELECT array_agg(id ORDER BY id) AS a
    FROM (SELECT nextval('awa.jobs_id_seq') AS id FROM generate_series(1, %(n)s)) s
), want AS (
    SELECT q, p, sh, hint, n, %(now)s::timestamptz AS first_run,
        (SELECT a[fo] FROM ids) AS first_id, %(now)s::timestamptz AS last_run,
        (SELECT a[lo] FROM ids) AS last_id, true AS sorted, true AS fresh
    FROM unnest(
        %(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[], %(hints)s::int[],
        %(counts)s::bigint[], %(firsts)s::int[], %(lasts)s::int[]
    ) AS i(q, p, sh, hint, n, fo, lo)
), {reserve_lanes_cte}
SELECT (SELECT a FROM ids) AS ids,
    (SELECT current_slot FROM {s}.ring_state) AS slot,
    ARRAY(SELECT nextval('{s}.fact_seq') FROM generate_series(1, %(n)s)) AS facts,
    (SELECT jsonb_agg(jsonb_build_array(q, p, asked, shard, next_seq, stamp)) FROM lanes_out)
        AS lanes

-- name: copy_direct
COPY {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, created_at, errors, metadata, tags, unique_states, run_lease,
    ordering_key
) FROM STDIN

-- name: create_copy_stage
-- The staging table of one COPY with unique keys or run_at (dropped at commit; a fresh
-- name per call lets one transaction copy twice).
CREATE TEMP TABLE {stage} (job_id int8, kind text, queue text, args jsonb, priority int2,
    max_attempts int2, run_at timestamptz, created_at timestamptz, metadata jsonb,
    tags text[], unique_key bytea, unique_states text, ordering_key bytea, shard int4,
    lane_seq int8, state text) ON COMMIT DROP

-- name: copy_stage
COPY {stage} FROM STDIN (FORMAT BINARY)

-- name: copy_ready
-- Staged COPY rows (lane positions already reserved) become ready rows in one statement.
INSERT INTO {s}.ready_entries (
    slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt,
    max_attempts, run_at, created_at, errors, metadata, tags, unique_key, unique_states,
    run_lease, ordering_key
)
SELECT (SELECT current_slot FROM {s}.ring_state), nextval('{s}.fact_seq'), x.shard,
    x.lane_seq, x.job_id, x.kind, x.queue, x.args, x.priority, 0, x.max_attempts, x.run_at,
    x.created_at, '{}'::jsonb[], x.metadata, x.tags, x.unique_key, x.unique_states::bit(8),
    0, x.ordering_key
FROM {stage} x
WHERE x.state = 'available'
ORDER BY x.job_id

-- name: copy_deferred
INSERT INTO {s}.deferred_jobs (
    fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at,
    created_at, errors, metadata, tags, unique_key, unique_states, run_lease, ordering_key
)
SELECT nextval('{s}.fact_seq'), x.state::awa.job_state, x.job_id, x.kind, x.queue, x.args,
    x.priority, 0, x.max_attempts, x.run_at, x.created_at, '{}'::jsonb[], x.metadata, x.tags,
    x.unique_key, x.unique_states::bit(8), 0, x.ordering_key
FROM {stage} x
WHERE x.state <> 'available'
ORDER BY x.job_id
