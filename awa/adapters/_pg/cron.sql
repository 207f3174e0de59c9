-- Cron schedules (awa.cron_jobs), shared by every Postgres engine. A fire enqueues through
-- awa.insert_job_compat, the public producer path, so its job lands in the engine the
-- storage transition sends producers to.

-- name: upsert_cron_job
INSERT INTO awa.cron_jobs (
    name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
    missed_fire_policy, created_at, updated_at
) VALUES (
    %(name)s, %(cron_expr)s, %(timezone)s, %(kind)s, %(queue)s, %(args)s, %(priority)s,
    %(max_attempts)s, %(tags)s::text[], %(metadata)s, %(missed_fire_policy)s,
    %(now)s::timestamptz, %(now)s::timestamptz
)
ON CONFLICT (name) DO UPDATE SET
    cron_expr = EXCLUDED.cron_expr,
    timezone = EXCLUDED.timezone,
    kind = EXCLUDED.kind,
    queue = EXCLUDED.queue,
    args = EXCLUDED.args,
    priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts,
    tags = EXCLUDED.tags,
    metadata = EXCLUDED.metadata,
    missed_fire_policy = EXCLUDED.missed_fire_policy,
    updated_at = EXCLUDED.updated_at
-- An unchanged declaration (every runtime re-declares its schedules each minute) writes
-- nothing, so it neither bloats the table nor moves updated_at.
WHERE (awa.cron_jobs.cron_expr, awa.cron_jobs.timezone, awa.cron_jobs.kind,
       awa.cron_jobs.queue, awa.cron_jobs.args, awa.cron_jobs.priority,
       awa.cron_jobs.max_attempts, awa.cron_jobs.tags, awa.cron_jobs.metadata,
       awa.cron_jobs.missed_fire_policy)
    IS DISTINCT FROM
      (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args,
       EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
       EXCLUDED.missed_fire_policy)

-- name: list_cron_jobs
SELECT * FROM awa.cron_jobs ORDER BY name

-- name: get_cron_job
SELECT * FROM awa.cron_jobs WHERE name = %(name)s

-- name: delete_cron_job
DELETE FROM awa.cron_jobs WHERE name = %(name)s RETURNING name

-- name: pause_cron_job
UPDATE awa.cron_jobs
SET paused_at = coalesce(paused_at, %(now)s::timestamptz),
    paused_by = CASE WHEN paused_at IS NULL THEN %(paused_by)s ELSE paused_by END,
    updated_at = %(now)s::timestamptz
WHERE name = %(name)s
RETURNING name

-- name: resume_cron_job
UPDATE awa.cron_jobs
SET paused_at = NULL, paused_by = NULL, updated_at = %(now)s::timestamptz
WHERE name = %(name)s
RETURNING name

-- name: fire_cron_job
-- One statement: the compare-and-set on last_enqueued_at and the insert commit together
-- or not at all, so two leaders racing for one slot enqueue it once.
WITH mark AS (
    UPDATE awa.cron_jobs
    SET last_enqueued_at = %(fire_at)s::timestamptz, updated_at = %(now)s::timestamptz
    WHERE name = %(name)s
      AND last_enqueued_at IS NOT DISTINCT FROM %(previous)s::timestamptz
      AND paused_at IS NULL
    RETURNING kind, queue, args, priority, max_attempts, tags, metadata
)
SELECT j.*
FROM mark
CROSS JOIN LATERAL awa.insert_job_compat(
    mark.kind, mark.queue, mark.args, 'available'::awa.job_state, mark.priority,
    mark.max_attempts, NULL, mark.metadata || %(stamp)s::jsonb, mark.tags
) AS j

-- name: trigger_cron_job
WITH c AS MATERIALIZED (SELECT * FROM awa.cron_jobs WHERE name = %(name)s)
SELECT j.*
FROM c
CROSS JOIN LATERAL awa.insert_job_compat(
    c.kind, c.queue, c.args, 'available'::awa.job_state, c.priority, c.max_attempts, NULL,
    c.metadata || %(stamp)s::jsonb, c.tags
) AS j
