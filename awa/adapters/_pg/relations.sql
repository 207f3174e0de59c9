-- Reads for the operator surfaces across both Postgres engines (awa.ports.relations).

-- name: job_parents
SELECT parent_id AS job_id, satisfied_at, failed_at IS NOT NULL AS failed, on_failure, count(*) OVER () AS total
FROM awa.job_dependencies
WHERE child_id = %(job_id)s
ORDER BY parent_id
LIMIT %(limit)s

-- name: job_children
SELECT child_id AS job_id, satisfied_at, failed_at IS NOT NULL AS failed, on_failure, count(*) OVER () AS total
FROM awa.job_dependencies
WHERE parent_id = %(job_id)s
ORDER BY child_id
LIMIT %(limit)s

-- name: parent_counts
-- A batch's progress (ADR 0035): a satisfied edge with no parent_outcome is a completed
-- parent; a failure records its outcome on the run edges it resolves.
SELECT count(*) AS size,
       count(*) FILTER (WHERE satisfied_at IS NOT NULL AND parent_outcome IS NULL) AS completed,
       count(*) FILTER (WHERE parent_outcome = 'failed') AS failed,
       count(*) FILTER (WHERE parent_outcome = 'cancelled') AS cancelled
FROM awa.job_dependencies
WHERE child_id = %(job_id)s

-- name: key_loads
SELECT metadata ->> 'awa:concurrency_key' AS key,
       count(*) FILTER (WHERE state::text = ANY (%(running)s::text[])) AS running,
       count(*) FILTER (WHERE state::text = ANY (%(waiting)s::text[])) AS waiting
FROM awa.jobs
WHERE queue = %(queue)s
  AND metadata ? 'awa:concurrency_key'
  AND state::text = ANY (%(running)s::text[] || %(waiting)s::text[])
GROUP BY 1
ORDER BY count(*) DESC, 1
LIMIT %(limit)s

-- name: running_of_keys
SELECT metadata ->> 'awa:concurrency_key' AS key, count(*) AS running
FROM awa.jobs
WHERE queue = %(queue)s
  AND state::text = ANY (%(running)s::text[])
  AND metadata ->> 'awa:concurrency_key' = ANY (%(keys)s::text[])
GROUP BY 1
