-- The count-down of waiting jobs (ADR 0032): p_satisfied names the child of each edge
-- just satisfied (a child once per edge). Each child's wait row counts down by its
-- edges; a row that reaches zero goes, and its child is returned: the caller answers it
-- 'released' and the engine applies the lifecycle's release in the same transaction.
-- The callers (awa.satisfy_dependencies, awa.resolve_dependencies) have locked the wait
-- rows in id order before.
CREATE OR REPLACE FUNCTION awa.count_down_dependency_waits(p_satisfied bigint[])
RETURNS TABLE (child_id bigint)
LANGUAGE sql AS $$
    WITH counted AS (
        SELECT s.child_id, count(*)::integer AS n
        FROM unnest(p_satisfied) AS s(child_id)
        GROUP BY s.child_id
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
    SELECT r.child_id FROM ready AS r
$$;
