-- Schema administration (awa.ports.admin.SchemaAdmin): questions about the schema itself,
-- asked by operator commands. Each statement works on any migrated schema that has the
-- objects it names; the adapter checks for them first.

-- name: relation_exists
SELECT to_regclass(%(name)s) IS NOT NULL AS present

-- name: function_exists
SELECT to_regprocedure(%(signature)s) IS NOT NULL AS present

-- name: ping
SELECT 1 AS ok

-- name: transition_state
SELECT * FROM awa.storage_transition_state

-- name: storage_status
SELECT * FROM awa.storage_status()

-- name: transition_backlog
SELECT awa.active_queue_storage_schema() AS active_queue_storage_schema,
       awa.canonical_live_backlog() AS canonical_live_backlog

-- name: rebuild_counters
SELECT schema_name, awa.queue_storage_rebuild_counters(schema_name) AS written
FROM (SELECT awa.active_queue_storage_schema() AS schema_name) AS active
WHERE schema_name IS NOT NULL

-- name: ring_maintenance
SELECT schema_name, concern, outcome, since, blocker_pid, blocker_xact_start, detail
FROM awa.ring_maintenance
ORDER BY schema_name, concern

-- name: runtime_counts
SELECT count(*) FILTER (WHERE live) AS live,
       count(*) FILTER (WHERE live AND NOT healthy) AS unhealthy,
       count(*) FILTER (WHERE live AND storage_capability = 'queue_storage')
           AS live_queue_storage_capable,
       count(*) FILTER (WHERE live AND storage_capability <> 'queue_storage')
           AS live_canonical_only
FROM (
    -- A runtime announcing its shutdown still counts here (it is still running).
    SELECT healthy, storage_capability,
           awa.runtime_is_live(last_seen_at, snapshot_interval_ms, false) AS live
    FROM awa.runtime_instances
) AS r

-- name: runtime_capabilities
SELECT storage_capability,
       awa.runtime_is_live(last_seen_at, snapshot_interval_ms, shutting_down) AS live
FROM awa.runtime_instances

-- name: served_queues
SELECT DISTINCT split_part(q ->> 'name', '#', 1) AS queue
FROM awa.runtime_instances AS r, jsonb_array_elements(r.queues) AS q
WHERE awa.runtime_is_live(r.last_seen_at, r.snapshot_interval_ms, r.shutting_down)
