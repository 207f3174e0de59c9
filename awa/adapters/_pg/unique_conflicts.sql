-- Unique conflict modes (ADR 0034), shared by both Postgres engines.

-- name: merge_into_holder
-- schema: a queue-storage engine's own schema (NULL for canonical), where a holder that
-- awa.jobs does not cover is looked for.
SELECT * FROM awa.unique_conflict_merge(
    %(unique_key)s, %(args)s, %(run_at)s::timestamptz, %(priority)s::smallint,
    %(tags)s::text[], %(metadata)s, %(now)s::timestamptz, %(schema)s::text)
