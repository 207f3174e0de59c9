-- Job dependencies (ADR 0032), shared by every Postgres engine: the tables are in schema
-- awa whatever engine holds the jobs.

-- name: dependency_parents
SELECT id, state::text AS state FROM awa.dependency_parents(%(ids)s::bigint[])

-- name: record_dependencies
WITH edges AS (
    INSERT INTO awa.job_dependencies (child_id, parent_id, satisfied_at, on_failure)
    SELECT * FROM unnest(
        %(children)s::bigint[], %(parents)s::bigint[], %(satisfied)s::timestamptz[],
        %(policies)s::text[]
    )
)
INSERT INTO awa.job_dependency_waits (child_id, pending)
SELECT * FROM unnest(%(waiting)s::bigint[], %(pending)s::integer[])

-- name: resolve_dependencies
SELECT child_id, outcome
FROM awa.resolve_dependencies(
    %(completed)s::bigint[], %(failed)s::bigint[], %(now)s::timestamptz, %(cancelled)s::bigint[]
)

-- name: dependency_retried
SELECT child_id FROM awa.dependency_retried(%(ids)s::bigint[], %(restored)s::bigint[])
