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
), batches AS (
    INSERT INTO awa.batches (id, size)
    SELECT * FROM unnest(%(batches)s::bigint[], %(batch_sizes)s::integer[])
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

-- name: dependency_parents_in
-- The parents awa.dependency_parents did not find, read in a queue-storage schema that
-- awa.jobs does not show (an engine's private schema), as that function reads them: the
-- job's state, or 'failed' for a job held in the DLQ. A statement of its own after the
-- function took the parents' locks, so it sees every finish committed before them.
SELECT j.id, j.state::text AS state FROM {s}.jobs_resolved AS j
WHERE j.id = ANY (%(ids)s::bigint[])
UNION ALL
SELECT d.job_id, 'failed' FROM {s}.dlq_entries AS d WHERE d.job_id = ANY (%(ids)s::bigint[])
