-- The edges of jobs that completed in the calling statement or transaction (ADR 0032):
-- each is satisfied, and a child whose last unsatisfied edge it was is answered
-- 'released' (its wait row goes; the engine applies the lifecycle's release in the same
-- transaction). Locks: the completed jobs' dependency keys exclusively (so an insert
-- naming one either committed its edge before, and is seen here, or reads the job
-- finished), then the affected wait rows, each in id order.
--
-- p_release false is for a completion that commits on its own statement (queue
-- storage's receipt path, ADR 0032 "The drain"): it has no transaction in which to
-- apply a release, so a completion that would release a child raises SQLSTATE AWD01
-- (the statement writes nothing) and the engine completes those jobs again in a
-- transaction with p_release true. A job that no child waits on costs its lock and one
-- probe of the parent index (the update that finds no unsatisfied edge); edges of other
-- children are satisfied and their counts decremented in the statement itself.
--
-- Three statements after the locks, each set-wise over the whole batch (ADR 0032, "The
-- fan-in's costs"): the edges are satisfied by one probe of the parent index, which
-- answers their children; those children's wait rows are locked by key, in id order;
-- the count-down runs in a statement of its own after that lock, so it reads every
-- count committed before it.
-- requires: awa.dependency_lock_key, awa.count_down_dependency_waits
CREATE OR REPLACE FUNCTION awa.satisfy_dependencies(
    p_completed bigint[], p_now timestamptz, p_release boolean
)
RETURNS TABLE (child_id bigint, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    v_satisfied bigint[];
    v_released bigint[];
BEGIN
    IF coalesce(cardinality(p_completed), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(awa.dependency_lock_key(f.id))
    FROM (SELECT DISTINCT unnest(p_completed) AS id) AS f
    ORDER BY f.id;
    -- A statement of its own, after the locks: it sees every edge committed before them.
    WITH satisfied AS (
        UPDATE awa.job_dependencies AS d SET satisfied_at = p_now
        WHERE d.parent_id = ANY (p_completed) AND d.satisfied_at IS NULL
        RETURNING d.child_id
    )
    SELECT array_agg(s.child_id) INTO v_satisfied FROM satisfied AS s;
    IF v_satisfied IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM awa.job_dependency_waits AS w
    WHERE w.child_id = ANY (v_satisfied)
    ORDER BY w.child_id
    FOR UPDATE;
    SELECT array_agg(r.child_id) INTO v_released
    FROM awa.count_down_dependency_waits(v_satisfied) AS r;
    IF v_released IS NULL THEN
        RETURN;
    END IF;
    IF NOT p_release THEN
        RAISE EXCEPTION 'a completion releases a waiting job and needs a transaction'
            USING ERRCODE = 'AWD01',
                HINT = 'the engine completes these jobs again in a transaction';
    END IF;
    RETURN QUERY SELECT r.id, 'released'::text FROM unnest(v_released) AS r(id);
END
$$;
