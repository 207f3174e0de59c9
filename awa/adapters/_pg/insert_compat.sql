-- The producer contract awa.insert_job_compat (SQL_SURFACE.md), called on a caller's own
-- connection by awa.bridge. The placeholders are named; insert_compat.py rewrites them
-- into each driver's style (%s, $n, :name), keeping their order.

-- name: insert_job_compat
SELECT id, kind, queue, args, state::text AS state, priority, attempt, max_attempts,
       run_at, created_at, metadata, tags
FROM awa.insert_job_compat(
    CAST(%(kind)s AS text), CAST(%(queue)s AS text), CAST(%(args)s AS jsonb),
    CAST(%(state)s AS awa.job_state), CAST(%(priority)s AS smallint),
    CAST(%(max_attempts)s AS smallint), CAST(%(run_at)s AS timestamptz),
    CAST(%(metadata)s AS jsonb), CAST(%(tags)s AS text[]), CAST(%(unique_key)s AS bytea),
    CAST(%(unique_states)s AS bit(8)),
    CAST(%(ordering_key)s AS bytea))
