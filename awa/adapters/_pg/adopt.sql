-- Adopting a database that awa-pg 0.6.9 migrated (awa/adapters/_pg/adopt.py, ADR 0019).
-- Every statement here reads awa-pg's schema, which this package never writes, or the
-- session's temporary tables that carry its rows across the DROP of that schema. States
-- and bit strings are copied as text: awa-pg's types go with its schema.
-- Statements with {schema} are templates (psycopg.sql), so a literal brace is doubled.

-- name: awa_pg_marker
-- awa-pg records its first migration under this description; this package's version 1
-- is 'core schema'.
SELECT description = 'Canonical schema with UI indexes' AS awa_pg,
       (SELECT max(version) FROM awa.schema_version) AS version
FROM awa.schema_version
WHERE version = 1

-- name: awa_pg_storage
SELECT state, current_engine, awa.active_queue_storage_schema() AS schema
FROM awa.storage_transition_state
WHERE singleton

-- name: awa_pg_live_runtimes
-- awa-pg's own rule for a runtime that still heartbeats (its transition gates use it): a
-- snapshot younger than max(3 x its snapshot interval, 30 s). A runtime that announced
-- its shutdown still counts: it may be finishing attempts.
SELECT instance_id::text AS id, hostname, pid, version, last_seen_at
FROM awa.runtime_instances
WHERE last_seen_at + make_interval(
        secs => greatest(((greatest(snapshot_interval_ms, 1000) / 1000) * 3)::int, 30)
      ) >= now()
ORDER BY last_seen_at DESC, instance_id

-- name: awa_pg_open_batch_operations
SELECT id::text AS id, op_kind, state
FROM awa.batch_operations
WHERE finalized_at IS NULL
ORDER BY submitted_at, id

-- name: awa_pg_schemas
-- Schema awa and every schema holding an awa-pg queue-storage substrate (its ring
-- control table is queue_ring_state; this package's rings use ring_state).
SELECT n.nspname AS schema
FROM pg_catalog.pg_namespace n
WHERE n.nspname = 'awa'
   OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c
              WHERE c.relnamespace = n.oid AND c.relname = 'queue_ring_state'
                AND c.relkind IN ('r', 'p'))
ORDER BY n.nspname <> 'awa', n.nspname

-- name: awa_pg_tables
-- The top-level tables of those schemas, locked before anything is read so that no
-- producer commits a job between the copy and the drop.
SELECT n.nspname AS schema, c.relname AS name
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY n.nspname, c.relname

-- name: outside_dependents
-- Objects outside those schemas that the drop would take with it: views over their
-- relations, foreign keys into their tables, columns of their types.
SELECT DISTINCT kind, name FROM (
    SELECT 'view' AS kind, format('%%I.%%I', vn.nspname, v.relname) AS name
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_rewrite r ON d.classid = 'pg_catalog.pg_rewrite'::regclass
                                AND d.objid = r.oid
    JOIN pg_catalog.pg_class v ON v.oid = r.ev_class
    JOIN pg_catalog.pg_namespace vn ON vn.oid = v.relnamespace
    JOIN pg_catalog.pg_class t ON d.refclassid = 'pg_catalog.pg_class'::regclass
                              AND d.refobjid = t.oid
    JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace
    WHERE tn.nspname = ANY(%(schemas)s) AND vn.nspname <> ALL(%(schemas)s)
    UNION ALL
    SELECT 'foreign key', format('%%I.%%I.%%I', cn.nspname, c.relname, k.conname)
    FROM pg_catalog.pg_constraint k
    JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
    JOIN pg_catalog.pg_namespace cn ON cn.oid = c.relnamespace
    JOIN pg_catalog.pg_class f ON f.oid = k.confrelid
    JOIN pg_catalog.pg_namespace fn ON fn.oid = f.relnamespace
    WHERE k.contype = 'f' AND fn.nspname = ANY(%(schemas)s)
      AND cn.nspname <> ALL(%(schemas)s)
    UNION ALL
    SELECT 'column', format('%%I.%%I.%%I', cn.nspname, c.relname, a.attname)
    FROM pg_catalog.pg_attribute a
    JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
    JOIN pg_catalog.pg_namespace cn ON cn.oid = c.relnamespace
    JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid OR ty.typarray = a.atttypid
    JOIN pg_catalog.pg_namespace tyn ON tyn.oid = ty.typnamespace
    WHERE a.attnum > 0 AND NOT a.attisdropped AND tyn.nspname = ANY(%(schemas)s)
      AND cn.nspname <> ALL(%(schemas)s) AND c.relkind IN ('r', 'p', 'm', 'f')
) found
ORDER BY kind, name

-- name: stash_jobs
-- Every job awa-pg can show: awa.jobs_compat() answers for the active engine (queue
-- storage when active, else canonical); the canonical tables keep what an earlier
-- canonical era left (finished history, or drain-only work). A job in both is taken
-- from the active engine. Dead-lettered jobs, which awa-pg also shows as failed, stay
-- out: they are adopted into the DLQ.
CREATE TEMPORARY TABLE awa_pg_jobs ON COMMIT DROP AS
SELECT DISTINCT ON (id)
       id, kind, queue, args, state::text AS state, priority, attempt, max_attempts,
       run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
       errors, metadata, tags, unique_key, unique_states::text AS unique_states,
       callback_id::text AS callback_id, callback_timeout_at, callback_filter,
       callback_on_complete, callback_on_fail, callback_transform, run_lease, progress
FROM (
    SELECT 0 AS source, j.* FROM awa.jobs_compat() j
    UNION ALL
    SELECT 1, h.* FROM awa.jobs_hot h
    UNION ALL
    SELECT 1, s.* FROM awa.scheduled_jobs s
) every_job
ORDER BY id, source

-- name: stash_dlq
CREATE TEMPORARY TABLE awa_pg_dlq ON COMMIT DROP AS
SELECT job_id, kind, queue, args, state::text AS state, priority, attempt, run_lease,
       max_attempts, run_at, attempted_at, finalized_at, created_at, unique_key,
       unique_states,
       awa.queue_storage_payload_errors(payload) AS errors,
       coalesce(nullif(payload -> 'metadata', 'null'::jsonb), '{}'::jsonb) AS metadata,
       awa.queue_storage_payload_tags(payload) AS tags,
       nullif(payload -> 'progress', 'null'::jsonb) AS progress,
       dlq_reason, dlq_at, original_run_lease
FROM awa.dlq_entries

-- name: stash_substrate_dlq
-- A substrate in a schema of its own keeps its own DLQ table.
INSERT INTO pg_temp.awa_pg_dlq
SELECT job_id, kind, queue, args, state::text, priority, attempt, run_lease,
       max_attempts, run_at, attempted_at, finalized_at, created_at, unique_key,
       unique_states,
       awa.queue_storage_payload_errors(payload),
       coalesce(nullif(payload -> 'metadata', 'null'::jsonb), '{{}}'::jsonb),
       awa.queue_storage_payload_tags(payload),
       nullif(payload -> 'progress', 'null'::jsonb),
       dlq_reason, dlq_at, original_run_lease
FROM {schema}.dlq_entries d
WHERE NOT EXISTS (SELECT 1 FROM pg_temp.awa_pg_dlq seen WHERE seen.job_id = d.job_id)

-- name: unstash_dead_lettered
DELETE FROM pg_temp.awa_pg_jobs j
WHERE EXISTS (SELECT 1 FROM pg_temp.awa_pg_dlq d WHERE d.job_id = j.id)

-- name: stash_open_receipts
-- Attempts awa-pg's queue storage claimed by receipt and has not closed: its jobs view
-- shows only attempts with a materialized lease, so these appear nowhere else. A claim
-- (single or in a claim batch) whose job is represented by any other row is not one of
-- them: that row (a completion, a retry, a lease, the DLQ) is newer than the claim.
INSERT INTO pg_temp.awa_pg_jobs
SELECT DISTINCT ON (c.job_id)
       c.job_id, r.kind, r.queue, r.args, 'running', r.priority, c.attempt,
       c.max_attempts, r.run_at, coalesce(a.heartbeat_at, c.claimed_at), c.deadline_at,
       c.claimed_at, NULL, r.created_at,
       awa.queue_storage_payload_errors(r.payload),
       coalesce(nullif(r.payload -> 'metadata', 'null'::jsonb), '{{}}'::jsonb),
       awa.queue_storage_payload_tags(r.payload),
       r.unique_key, r.unique_states, NULL, NULL,
       a.callback_filter, a.callback_on_complete, a.callback_on_fail,
       a.callback_transform, c.run_lease,
       coalesce(nullif(a.progress, 'null'::jsonb), nullif(r.payload -> 'progress', 'null'::jsonb))
FROM (
    SELECT job_id, run_lease, attempt, max_attempts, ready_slot, ready_generation, queue,
           priority, enqueue_shard, lane_seq, claimed_at, deadline_at
    FROM {schema}.lease_claims
    WHERE closed_at IS NULL
    UNION ALL
    SELECT b.job_ids[i], b.run_leases[i], b.attempts[i], b.max_attempts[i], b.ready_slot,
           b.ready_generation, b.queue, b.priority, b.enqueue_shard, b.lane_seqs[i],
           b.claimed_at, b.deadline_at
    FROM {schema}.lease_claim_batches b, generate_subscripts(b.job_ids, 1) AS i
) c
JOIN {schema}.ready_entries r
  ON r.ready_slot = c.ready_slot AND r.ready_generation = c.ready_generation
 AND r.queue = c.queue AND r.priority = c.priority
 AND r.enqueue_shard = c.enqueue_shard AND r.lane_seq = c.lane_seq
LEFT JOIN {schema}.attempt_state a ON a.job_id = c.job_id AND a.run_lease = c.run_lease
WHERE NOT EXISTS (SELECT 1 FROM pg_temp.awa_pg_jobs j WHERE j.id = c.job_id)
  AND NOT EXISTS (SELECT 1 FROM pg_temp.awa_pg_dlq d WHERE d.job_id = c.job_id)
  AND NOT EXISTS (SELECT 1 FROM {schema}.lease_claim_closures x
                  WHERE x.job_id = c.job_id AND x.run_lease = c.run_lease)
ORDER BY c.job_id, c.run_lease DESC

-- name: stash_rest
-- Unique claims, cron schedules, queue metadata and descriptors, and the highest job id
-- awa-pg handed out (its two id sequences, or a larger stored id).
CREATE TEMPORARY TABLE awa_pg_unique_claims ON COMMIT DROP AS
    SELECT unique_key, job_id FROM awa.job_unique_claims;
CREATE TEMPORARY TABLE awa_pg_cron ON COMMIT DROP AS
    SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
           metadata, missed_fire_policy, last_enqueued_at, created_at, updated_at,
           paused_at, paused_by
    FROM awa.cron_jobs;
CREATE TEMPORARY TABLE awa_pg_queue_meta ON COMMIT DROP AS
    SELECT queue, paused, paused_at, paused_by, enqueue_shards FROM awa.queue_meta;
CREATE TEMPORARY TABLE awa_pg_queue_descriptors ON COMMIT DROP AS
    SELECT * FROM awa.queue_descriptors;
CREATE TEMPORARY TABLE awa_pg_kind_descriptors ON COMMIT DROP AS
    SELECT * FROM awa.job_kind_descriptors;
CREATE TEMPORARY TABLE awa_pg_origin ON COMMIT DROP AS
    SELECT greatest(
        (SELECT last_value FROM awa.jobs_id_seq),
        (SELECT last_value FROM awa.job_id_seq),
        (SELECT max(id) FROM pg_temp.awa_pg_jobs),
        (SELECT max(job_id) FROM pg_temp.awa_pg_dlq),
        0
    ) AS last_job_id

-- name: drop_schema
DROP SCHEMA {schema} CASCADE

-- name: restore
-- Into this package's schema, just migrated from nothing: every job as a canonical row
-- (its triggers take the unique claims a job's state holds; a callback ends with the
-- attempt that registered it, so only a live attempt keeps its id and timeout, where
-- awa-pg keeps them on finished jobs too), the DLQ, then awa-pg's
-- remaining unique claims of adopted jobs, the schedules (awa-pg's 'skip' policy was
-- 'coalesce' here, as migration 0430 did for this package's own), queue metadata,
-- descriptors (a missing hash or interval as 0432 fills them) and the id sequence.
INSERT INTO awa.canonical_jobs (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
    unique_key, unique_states, callback_id, callback_timeout_at, callback_filter,
    callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
SELECT id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts,
       run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at,
       coalesce(errors, '{}'::jsonb[]), coalesce(metadata, '{}'::jsonb),
       coalesce(tags, '{}'::text[]), unique_key, unique_states::bit(8),
       CASE WHEN state IN ('running', 'waiting_external') THEN callback_id END,
       CASE WHEN state IN ('running', 'waiting_external') THEN callback_timeout_at END,
       callback_filter, callback_on_complete, callback_on_fail,
       callback_transform, run_lease, progress
FROM pg_temp.awa_pg_jobs
ORDER BY id;
INSERT INTO awa.dlq_entries (
    job_id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
    attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, run_lease, progress, dlq_reason, dlq_at, original_run_lease)
SELECT job_id, kind, queue, args, state::awa.job_state, priority, attempt, max_attempts,
       run_at, attempted_at, finalized_at, created_at, coalesce(errors, '{}'::jsonb[]),
       metadata, coalesce(tags, '{}'::text[]), unique_key, unique_states::bit(8),
       run_lease, progress, dlq_reason, dlq_at, original_run_lease
FROM pg_temp.awa_pg_dlq;
INSERT INTO awa.job_unique_claims (unique_key, job_id)
SELECT c.unique_key, c.job_id
FROM pg_temp.awa_pg_unique_claims c
WHERE EXISTS (SELECT 1 FROM awa.canonical_jobs j WHERE j.id = c.job_id)
   OR EXISTS (SELECT 1 FROM awa.dlq_entries d WHERE d.job_id = c.job_id)
ON CONFLICT (unique_key) DO NOTHING;
INSERT INTO awa.cron_jobs (
    name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
    missed_fire_policy, last_enqueued_at, created_at, updated_at, paused_at, paused_by)
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, CASE WHEN missed_fire_policy = 'catch_up' THEN 'catch_up' ELSE 'coalesce' END,
       last_enqueued_at, created_at, updated_at, paused_at, paused_by
FROM pg_temp.awa_pg_cron;
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by, enqueue_shards)
SELECT queue, paused, paused_at, paused_by, enqueue_shards FROM pg_temp.awa_pg_queue_meta;
INSERT INTO awa.queue_descriptors (
    queue, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
    sync_interval_ms, created_at, updated_at, last_seen_at)
SELECT queue, display_name, description, owner, docs_url, coalesce(tags, '{}'::text[]),
       coalesce(extra, '{}'::jsonb), coalesce(descriptor_hash, 'unknown'),
       coalesce(sync_interval_ms, 10000), created_at, updated_at, last_seen_at
FROM pg_temp.awa_pg_queue_descriptors;
INSERT INTO awa.job_kind_descriptors (
    kind, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
    sync_interval_ms, created_at, updated_at, last_seen_at)
SELECT kind, display_name, description, owner, docs_url, coalesce(tags, '{}'::text[]),
       coalesce(extra, '{}'::jsonb), coalesce(descriptor_hash, 'unknown'),
       coalesce(sync_interval_ms, 10000), created_at, updated_at, last_seen_at
FROM pg_temp.awa_pg_kind_descriptors;
SELECT setval('awa.jobs_id_seq', last_job_id, true)
FROM pg_temp.awa_pg_origin WHERE last_job_id > 0

-- name: record_adoption
UPDATE awa.storage_transition_state
SET details = details || jsonb_build_object(
        'adopted_from', 'awa-pg 0.6.9',
        'adopted_at', now(),
        'awa_pg_engine', %(engine)s::text),
    updated_at = now()
WHERE singleton

-- name: adopted_counts
SELECT (SELECT coalesce(jsonb_object_agg(state, n), '{}'::jsonb)
        FROM (SELECT state::text AS state, count(*) AS n FROM awa.canonical_jobs
              GROUP BY state) s) AS jobs,
       (SELECT count(*) FROM awa.dlq_entries) AS dlq,
       (SELECT count(*) FROM awa.cron_jobs) AS cron,
       (SELECT count(*) FROM awa.queue_meta) AS queues,
       (SELECT count(*) FROM awa.queue_descriptors) AS queue_descriptors,
       (SELECT count(*) FROM awa.job_kind_descriptors) AS kind_descriptors,
       (SELECT count(*) FROM awa.job_unique_claims) AS unique_claims

-- name: drop_stash
DROP TABLE pg_temp.awa_pg_jobs, pg_temp.awa_pg_dlq, pg_temp.awa_pg_unique_claims,
    pg_temp.awa_pg_cron, pg_temp.awa_pg_queue_meta, pg_temp.awa_pg_queue_descriptors,
    pg_temp.awa_pg_kind_descriptors, pg_temp.awa_pg_origin
