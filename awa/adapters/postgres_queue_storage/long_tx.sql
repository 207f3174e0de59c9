-- Long transactions against queue storage (ADR 0006, "Long transactions").

-- name: ring_lock_holders
-- Other sessions holding a lock on one of the relations %(relations)s (the slot prune
-- could not lock), oldest transaction first.
SELECT DISTINCT a.pid, a.xact_start, a.state, a.application_name,
    left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 120) AS query
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.locktype = 'relation' AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.relation = ANY(ARRAY(SELECT to_regclass(r)::oid FROM unnest(%(relations)s::text[]) AS r))
  AND a.xact_start IS NOT NULL
ORDER BY a.xact_start, a.pid
LIMIT 5

-- name: horizon_holder
-- The oldest other transaction of this database that holds an xid or a snapshot
-- (VACUUM keeps every row version it might still see), if it began before %(before)s.
SELECT a.pid, a.xact_start, a.state, a.application_name, a.backend_xid::text AS xid,
    a.backend_xmin::text AS xmin,
    left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 120) AS query
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
  AND a.xact_start < %(before)s
ORDER BY a.xact_start
LIMIT 1

-- name: control_sizes
-- The control tables of the schema and their size on disk.
SELECT c.relname, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c
WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind = 'r'
  AND c.relname = ANY(%(tables)s::text[])
ORDER BY c.relname

-- name: record_outcome
-- Written only when the outcome (or its blocker) changed; `since` is when it did.
INSERT INTO awa.ring_maintenance AS m (schema_name, concern, outcome, since, blocker_pid,
    blocker_xact_start, detail)
VALUES (%(schema)s, %(concern)s, %(outcome)s, now(), %(pid)s, %(xact_start)s, %(detail)s)
ON CONFLICT (schema_name, concern) DO UPDATE SET outcome = EXCLUDED.outcome,
    since = EXCLUDED.since, blocker_pid = EXCLUDED.blocker_pid,
    blocker_xact_start = EXCLUDED.blocker_xact_start, detail = EXCLUDED.detail
WHERE (m.outcome, m.blocker_pid) IS DISTINCT FROM (EXCLUDED.outcome, EXCLUDED.blocker_pid)

-- name: compact_lock_timeout
-- Every lock the compaction asks for waits at most this long (a claim waits behind it).
SET lock_timeout = '50ms'

-- name: reset_lock_timeout
RESET lock_timeout

-- name: vacuum_control_table
VACUUM {table}

-- name: vacuum_full_control_table
VACUUM (FULL) {table}

-- name: vacuum_control_table_skip_locked
-- Through a transaction-mode pooler (no session lock_timeout): skip a busy table.
VACUUM (SKIP_LOCKED) {table}

-- name: vacuum_full_control_table_skip_locked
VACUUM (FULL, SKIP_LOCKED) {table}
