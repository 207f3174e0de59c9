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
-- parent; a failure records its outcome on the run edges it resolves. Once the edges
-- were pruned (ADR 0032, retention), the counts stored on the batch's row then.
-- batch: whether awa.batches names the job.
WITH e AS (
    SELECT count(*) AS size,
           count(*) FILTER (WHERE satisfied_at IS NOT NULL AND parent_outcome IS NULL) AS completed,
           count(*) FILTER (WHERE parent_outcome = 'failed') AS failed,
           count(*) FILTER (WHERE parent_outcome = 'cancelled') AS cancelled
    FROM awa.job_dependencies
    WHERE child_id = %(job_id)s
)
SELECT CASE WHEN e.size = 0 AND b.counted_at IS NOT NULL THEN b.size ELSE e.size END AS size,
       CASE WHEN e.size = 0 AND b.counted_at IS NOT NULL THEN b.completed ELSE e.completed END
           AS completed,
       CASE WHEN e.size = 0 AND b.counted_at IS NOT NULL THEN b.failed ELSE e.failed END AS failed,
       CASE WHEN e.size = 0 AND b.counted_at IS NOT NULL THEN b.cancelled ELSE e.cancelled END
           AS cancelled,
       b.id IS NOT NULL AS batch
FROM e LEFT JOIN awa.batches AS b ON b.id = %(job_id)s

-- name: due_edge_children
-- The retention duty's page (ADR 0032): the next edges resolved before the cutoff after
-- the cursor, in (resolved, child) order, read from job_dependencies_resolved_idx (an
-- edge not resolved, or resolved since the cutoff, is not read), and for each child they
-- name whether every one of its edges was resolved before the cutoff (a candidate: whether
-- the child itself finished is read through its engine). Every row carries the page's
-- last edge (the next cursor) and how many edges the page read; no row: nothing more.
-- Each child's check is a subquery of its own (read by the primary key, child by child),
-- so no plan joins the page to the whole table.
WITH page AS (
    SELECT coalesce(satisfied_at, failed_at) AS resolved_at, child_id
    FROM awa.job_dependencies
    WHERE coalesce(satisfied_at, failed_at) < %(before)s
      AND (coalesce(satisfied_at, failed_at), child_id) > (%(after_at)s, %(after_id)s)
    ORDER BY 1, 2
    LIMIT %(limit)s
), last AS (
    SELECT resolved_at, child_id, count(*) OVER () AS seen
    FROM page
    ORDER BY resolved_at DESC, child_id DESC
    LIMIT 1
), children AS (
    SELECT DISTINCT child_id FROM page
)
SELECT last.resolved_at AS last_at, last.child_id AS last_id, last.seen, c.child_id,
       (SELECT bool_and(coalesce(coalesce(o.satisfied_at, o.failed_at) < %(before)s, false))
        FROM awa.job_dependencies AS o
        WHERE o.child_id = c.child_id) AS due
FROM last CROSS JOIN children AS c
ORDER BY c.child_id

-- name: prune_edges
-- Delete the edges of the children named whose every edge is still resolved before the
-- cutoff; for those that are batches (in awa.batches, or named by the caller from the
-- callback's row: a batch inserted before awa.batches existed), store the counts first.
WITH prunable AS (
    SELECT child_id
    FROM awa.job_dependencies
    WHERE child_id = ANY (%(children)s::bigint[])
    GROUP BY child_id
    HAVING bool_and(coalesce(coalesce(satisfied_at, failed_at) < %(before)s, false))
), counted AS (
    INSERT INTO awa.batches AS b (id, size, completed, failed, cancelled, counted_at)
    SELECT d.child_id, count(*),
           count(*) FILTER (WHERE d.satisfied_at IS NOT NULL AND d.parent_outcome IS NULL),
           count(*) FILTER (WHERE d.parent_outcome = 'failed'),
           count(*) FILTER (WHERE d.parent_outcome = 'cancelled'),
           %(now)s
    FROM awa.job_dependencies AS d
    JOIN prunable AS p ON p.child_id = d.child_id
    WHERE d.child_id = ANY (%(batches)s::bigint[])
       OR EXISTS (SELECT 1 FROM awa.batches AS x WHERE x.id = d.child_id)
    GROUP BY d.child_id
    ON CONFLICT (id) DO UPDATE
        SET completed = excluded.completed, failed = excluded.failed,
            cancelled = excluded.cancelled, counted_at = excluded.counted_at
        WHERE b.counted_at IS NULL
), gone AS (
    DELETE FROM awa.job_dependencies AS d
    USING prunable AS p
    WHERE d.child_id = p.child_id
    RETURNING 1
)
SELECT count(*) AS pruned FROM gone

-- name: prune_batches
DELETE FROM awa.batches WHERE counted_at < %(before)s

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
