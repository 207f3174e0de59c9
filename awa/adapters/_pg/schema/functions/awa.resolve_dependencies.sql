-- The dependents of jobs that finished in the calling transaction (ADR 0032).
-- p_completed: jobs that completed; their edges are satisfied, and a child whose last
-- unsatisfied edge that was is answered 'released' (its wait row goes).
-- p_failed: jobs that failed or were cancelled for good; every job still waiting on one,
-- and transitively every job waiting on those, is answered 'doomed' (their wait rows go).
-- The engine applies the lifecycle's transition to each answered child in the same
-- transaction. Locks: the finished jobs' dependency keys (exclusive, against an insert
-- naming them), then the affected wait rows, each in id order.
-- requires: awa.dependency_lock_key
CREATE OR REPLACE FUNCTION awa.resolve_dependencies(
    p_completed bigint[], p_failed bigint[], p_now timestamptz
)
RETURNS TABLE (child_id bigint, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    v_doomed bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(awa.dependency_lock_key(f.id))
    FROM (SELECT DISTINCT unnest(p_completed || p_failed) AS id) AS f
    ORDER BY f.id;

    IF cardinality(p_completed) > 0 THEN
        PERFORM 1 FROM awa.job_dependency_waits AS w
        WHERE w.child_id IN (
            SELECT d.child_id FROM awa.job_dependencies AS d
            WHERE d.parent_id = ANY (p_completed) AND d.satisfied_at IS NULL
        )
        ORDER BY w.child_id
        FOR UPDATE;
        RETURN QUERY
        WITH satisfied AS (
            UPDATE awa.job_dependencies AS d SET satisfied_at = p_now
            WHERE d.parent_id = ANY (p_completed) AND d.satisfied_at IS NULL
            RETURNING d.child_id
        ), counted AS (
            SELECT s.child_id, count(*)::integer AS n FROM satisfied AS s GROUP BY s.child_id
        ), ready AS (
            DELETE FROM awa.job_dependency_waits AS w
            USING counted AS c
            WHERE w.child_id = c.child_id AND w.pending <= c.n
            RETURNING w.child_id
        ), left_waiting AS (
            UPDATE awa.job_dependency_waits AS w SET pending = w.pending - c.n
            FROM counted AS c
            WHERE w.child_id = c.child_id AND w.pending > c.n
        )
        SELECT r.child_id, 'released'::text FROM ready AS r;
    END IF;

    IF cardinality(p_failed) > 0 THEN
        WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM awa.job_dependencies AS d
            WHERE d.parent_id = ANY (p_failed) AND d.satisfied_at IS NULL
            UNION
            SELECT d.child_id FROM awa.job_dependencies AS d
            JOIN doomed ON d.parent_id = doomed.id
            WHERE d.satisfied_at IS NULL
        )
        SELECT coalesce(array_agg(DISTINCT doomed.id), '{}') INTO v_doomed FROM doomed;
        PERFORM 1 FROM awa.job_dependency_waits AS w
        WHERE w.child_id = ANY (v_doomed) ORDER BY w.child_id FOR UPDATE;
        RETURN QUERY
        DELETE FROM awa.job_dependency_waits AS w
        WHERE w.child_id = ANY (v_doomed)
        RETURNING w.child_id, 'doomed'::text;
    END IF;
END
$$;
