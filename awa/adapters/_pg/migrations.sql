-- The migration runner's own statements (awa/adapters/_pg/migrations.py), apart from the
-- stream and the schema files it applies.

-- name: queue_storage_schemas
-- Every schema holding a queue-storage ring (the ring_state table the stream's upgrade
-- loops look for), read from the catalog (which needs no privilege on the schema, unlike
-- to_regclass), with whether this role may use it and whether it has every table of the
-- first install (migration 0100), which tells a queue-storage schema from one that only
-- happens to hold a table of that name.
SELECT n.nspname AS schema,
       has_schema_privilege(n.oid, 'USAGE') AS usable,
       (SELECT count(DISTINCT c.relname) FROM pg_catalog.pg_class c
        WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p')
          AND c.relname IN ('ring_state', 'lanes', 'claim_heads', 'queue_counts',
                            'ready_entries', 'done_entries', 'deferred_jobs', 'leases',
                            'claims', 'closures', 'tombstones', 'queue_prune_stats'))
           = 12 AS complete
FROM pg_catalog.pg_namespace n
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c
              WHERE c.relnamespace = n.oid AND c.relname = 'ring_state'
                AND c.relkind IN ('r', 'p'))
ORDER BY n.nspname

-- name: may_create_temp
SELECT has_database_privilege(current_database(), 'TEMP') AS allowed

-- name: unusable_schema_count
SELECT count(*) AS unusable
FROM pg_catalog.pg_namespace n
WHERE NOT has_schema_privilege(n.oid, 'USAGE')

-- name: scope_namespace_scans
-- The released migrations' loops over every installed queue-storage schema read
-- `FROM pg_namespace n WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') ...`,
-- and to_regclass raises "permission denied for schema" on a schema the role may not use
-- (pg_toast, other sessions' temporary schemas) instead of answering NULL. For the
-- migrating transaction, the unqualified name pg_namespace resolves to this view (the
-- session's temporary schema is searched first for relations): the schemas the role may
-- use. security_barrier keeps the loops' to_regclass from being evaluated before the
-- filter. A superuser may use every schema, so what the loops see is unchanged for it.
CREATE TEMPORARY VIEW pg_namespace WITH (security_barrier) AS
SELECT * FROM pg_catalog.pg_namespace n WHERE has_schema_privilege(n.oid, 'USAGE')

-- name: end_namespace_scope
DROP VIEW pg_temp.pg_namespace

-- name: drop_orphaned_schema
DROP SCHEMA {schema} CASCADE
