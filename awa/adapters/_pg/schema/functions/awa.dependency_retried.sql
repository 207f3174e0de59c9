-- One step of bringing back the jobs a retried parent's failure held (ADR 0032).
-- p_restored: jobs the engine just brought back to waiting (the previous step's answer
-- it applied): their wait rows are written, counting their unsatisfied edges, after
-- taking their parents' dependency keys shared (so a parent finishing meanwhile either
-- committed first and is counted satisfied, or finds the wait row).
-- p_ids: jobs retried (first step) or restored (later steps): their edges' failure marks
-- are cleared, and the children left with no marked edge are answered, in id order; the
-- engine restores those of them that are cancelled and calls again with them.
-- requires: awa.dependency_lock_key
CREATE OR REPLACE FUNCTION awa.dependency_retried(p_ids bigint[], p_restored bigint[])
RETURNS TABLE (child_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_cleared bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(awa.dependency_lock_key(f.id))
    FROM (SELECT DISTINCT unnest(p_ids) AS id) AS f
    ORDER BY f.id;
    IF cardinality(p_restored) > 0 THEN
        PERFORM pg_advisory_xact_lock_shared(awa.dependency_lock_key(p.id))
        FROM (
            SELECT DISTINCT d.parent_id AS id FROM awa.job_dependencies AS d
            WHERE d.child_id = ANY (p_restored) AND NOT d.parent_id = ANY (p_ids)
        ) AS p
        ORDER BY p.id;
        INSERT INTO awa.job_dependency_waits (child_id, pending)
        SELECT d.child_id, count(*)::integer FROM awa.job_dependencies AS d
        WHERE d.child_id = ANY (p_restored) AND d.satisfied_at IS NULL
        GROUP BY d.child_id
        ON CONFLICT ON CONSTRAINT job_dependency_waits_pkey DO NOTHING;
    END IF;
    WITH cleared AS (
        UPDATE awa.job_dependencies AS d SET failed_at = NULL
        WHERE d.parent_id = ANY (p_ids) AND d.failed_at IS NOT NULL
        RETURNING d.child_id
    )
    SELECT coalesce(array_agg(DISTINCT cleared.child_id), '{}') INTO v_cleared FROM cleared;
    RETURN QUERY
    SELECT c.id FROM unnest(v_cleared) AS c(id)
    WHERE NOT EXISTS (
        SELECT 1 FROM awa.job_dependencies AS o WHERE o.child_id = c.id AND o.failed_at IS NOT NULL
    )
    ORDER BY c.id;
END
$$;
