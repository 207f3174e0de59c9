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

-- name: dependency_waited_on
SELECT id FROM awa.dependency_waited_on(%(ids)s::bigint[]) AS w(id)

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

-- name: lock_transitions_shared
-- Held by the pass that answers vanished parents, as a producer holds it: no storage
-- transition step (which takes it exclusively while it moves jobs between engines) runs
-- meanwhile, so a job mid-way through a move is not read gone.
SELECT pg_advisory_xact_lock_shared(awa.storage_transition_lock_key())

-- name: unresolved_parents
-- A page of the parents of unresolved edges (a child still waits on them), in id order
-- after %(after)s: one descent of the parent index per parent, each to the first
-- unresolved edge after the previous parent, so a parent with many waiting children
-- costs one edge read, not one per child.
WITH RECURSIVE page(parent_id, n) AS (
    SELECT (
        SELECT d.parent_id FROM awa.job_dependencies AS d
        WHERE d.parent_id > %(after)s AND d.satisfied_at IS NULL AND d.failed_at IS NULL
        ORDER BY d.parent_id LIMIT 1
    ), 1
    WHERE %(limit)s > 0
    UNION ALL
    SELECT (
        SELECT d.parent_id FROM awa.job_dependencies AS d
        WHERE d.parent_id > page.parent_id AND d.satisfied_at IS NULL AND d.failed_at IS NULL
        ORDER BY d.parent_id LIMIT 1
    ), page.n + 1
    FROM page WHERE page.parent_id IS NOT NULL AND page.n < %(limit)s
)
SELECT parent_id FROM page WHERE parent_id IS NOT NULL ORDER BY parent_id

-- name: vanished_seen
-- The page's parents no engine holds are recorded as seen now (a parent seen before keeps
-- its first sighting); a sighting of a parent found again (it was moving) is forgotten.
WITH back AS (
    DELETE FROM awa.dependency_vanished_parents
    WHERE parent_id = ANY (%(present)s::bigint[]) AND NOT deleted
)
INSERT INTO awa.dependency_vanished_parents (parent_id, seen_at)
SELECT p.id, %(now)s FROM unnest(%(absent)s::bigint[]) AS p(id)
ON CONFLICT (parent_id) DO NOTHING

-- name: vanished_due
-- The recorded parents due an answer, at most %(limit)s, taken out of the table: those a
-- SQL delete recorded, and those first seen gone at or before %(seen_before)s. The caller
-- checks again that each is gone before it answers it.
DELETE FROM awa.dependency_vanished_parents
WHERE parent_id IN (
    SELECT v.parent_id FROM awa.dependency_vanished_parents AS v
    WHERE v.deleted OR v.seen_at <= %(seen_before)s
    ORDER BY v.parent_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING parent_id
