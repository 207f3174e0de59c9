-- What each table of schema awa holds, as catalog comments: `\d+` in psql, the generated
-- docs/internals/schema.sql and any schema browser show them. Comments only; no data moves.

COMMENT ON TABLE awa.schema_version IS
    'One row per applied migration (version, description, checksum of its file).';
COMMENT ON TABLE awa.schema_objects IS
    'The functions and views migrate applied from their schema files, with each file''s SHA-256 (ADR 0012).';
COMMENT ON TABLE awa.storage_transition_state IS
    'The singleton that says which engine holds new jobs: canonical, a transition in progress, or queue storage (ADR 0007).';
COMMENT ON TABLE awa.canonical_jobs IS
    'Canonical storage: one mutable row per job, updated in place on every transition.';
COMMENT ON TABLE awa.job_unique_claims IS
    'One row per live unique key, shared by both engines; its primary key is what refuses a duplicate insert.';
COMMENT ON TABLE awa.dlq_entries IS
    'The dead-letter queue: failed jobs set aside with their whole body for an operator to retry or purge.';
COMMENT ON TABLE awa.cron_jobs IS
    'Periodic schedules: cron expression, time zone, the job to insert, the last fire enqueued, paused or not.';
COMMENT ON TABLE awa.queue_meta IS
    'Per queue: paused, enqueue shards, DLQ on or off, and the live overrides set by operators.';
COMMENT ON TABLE awa.queue_descriptors IS
    'Per queue: the display name, description, owner and links that workers declare (queue_descriptor()).';
COMMENT ON TABLE awa.job_kind_descriptors IS
    'Per job kind: the display name, description, owner and links that workers declare (job_kind_descriptor()).';
COMMENT ON TABLE awa.runtime_instances IS
    'One row per worker process: its queues, configuration and last heartbeat, for awa health and the admin UI.';
COMMENT ON TABLE awa.leader_leases IS
    'The maintenance leader''s lease: holder, term and expiry, renewed by its holder (ADR 0014).';
COMMENT ON TABLE awa.batch_operations IS
    'Admin batch operations (set priority, move queue) over a filter, run in chunks by the maintenance leader.';
COMMENT ON TABLE awa.batch_operation_items IS
    'The jobs one batch operation matched, each pending, processed, skipped or errored.';
COMMENT ON TABLE awa.callback_expressions IS
    'The CEL filter and transform expressions of a job waiting for an external callback, by callback id.';
-- Queue storage's tables in schema awa are made by awa.install_queue_storage, not by a
-- migration: comment those present.
DO $$
DECLARE
    item text[];
BEGIN
    FOREACH item SLICE 1 IN ARRAY ARRAY[
        ['ready_entries', 'Queue storage: the runnable body of a job in a lane, appended at enqueue, promotion or retry; never updated. Partitioned by ring slot.'],
        ['claims', 'Queue storage: the receipt a claim writes for one attempt of a ready row. Partitioned by ring slot.'],
        ['closures', 'Queue storage: closes one claim, completed or moved on to a newer fact. Partitioned by ring slot.'],
        ['tombstones', 'Queue storage: marks a ready row that must not be claimed (cancelled, moved or deleted before its claim). Partitioned by ring slot.'],
        ['done_entries', 'Queue storage: a terminal job with its whole body (cancelled while deferred, failed and carried forward) or a deletion marker. Partitioned by ring slot.'],
        ['leases', 'Queue storage: the mutable row of an attempt that heartbeats, reports progress or waits for a callback. Partitioned by lease slot.'],
        ['deferred_jobs', 'Queue storage: scheduled and retryable jobs with their whole body, until promotion appends them to a lane.'],
        ['lanes', 'Queue storage: the append end of each lane (queue, priority, shard): next position and the order key of its last row.'],
        ['claim_heads', 'Queue storage: the claim end of each lane: every row before claim_seq is claimed or tombstoned.'],
        ['ring_state', 'Queue storage: the current queue and lease slots, the slot counts and their generations.'],
        ['ring_maintenance', 'Queue storage: the last outcome of each ring duty (rotate, prune, compaction) and what blocked it, for awa storage status.'],
        ['queue_counts', 'Queue storage: signed counters of jobs per queue and state, spread over buckets so writers do not contend.'],
        ['queue_prune_stats', 'Queue storage: per queue, how many completed and failed jobs reclaiming a slot removed.'],
        ['completions', 'Queue storage: signed count of completed jobs per queue and UTC minute, for throughput charts.']
    ] LOOP
        IF to_regclass('awa.' || item[1]) IS NOT NULL THEN
            EXECUTE format('COMMENT ON TABLE awa.%I IS %L', item[1], item[2]);
        END IF;
    END LOOP;
END
$$;
