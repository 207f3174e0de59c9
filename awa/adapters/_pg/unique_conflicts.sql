-- Unique conflict modes (ADR 0034), shared by both Postgres engines.

-- name: merge_into_holder
SELECT * FROM awa.unique_conflict_merge(
    %(unique_key)s, %(args)s, %(run_at)s::timestamptz, %(priority)s::smallint,
    %(tags)s::text[], %(metadata)s, %(now)s::timestamptz)
