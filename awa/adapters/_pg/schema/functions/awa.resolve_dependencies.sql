-- The dependents of jobs that finished in the calling transaction (ADR 0032).
-- p_completed: jobs that completed; their edges are satisfied, and a child whose last
-- unsatisfied edge that was is answered 'released' (its wait row goes), as
-- awa.satisfy_dependencies answers.
-- p_failed: jobs that failed or were cancelled for good. Each unsatisfied edge from one
-- applies its policy (awa.job_dependencies.on_failure): 'cancel' answers the child
-- 'doomed', 'dlq' answers it 'dead_lettered' (both: its wait row goes, and the jobs
-- waiting on it are reached in turn, transitively); 'run' satisfies the edge, and a
-- child left with no unsatisfied edge is answered 'released'. A child answered both
-- 'doomed' and 'dead_lettered' is decided by the domain (awa.domain.dependencies).
-- p_cancelled: those of p_failed that were cancelled. A 'run' edge resolved by a failure
-- records how its parent ended (parent_outcome: 'cancelled' for those, 'failed' for the
-- rest; a parent doomed in this call ended as its policy takes it, 'failed' for the DLQ),
-- from which a batch counts its members (ADR 0035).
-- The engine applies the lifecycle's transition to each answered child in the same
-- transaction. Locks: the finished jobs' dependency keys (exclusive, against an insert
-- naming them), then the affected wait rows, each in id order.
-- requires: awa.dependency_lock_key, awa.satisfy_dependencies, awa.count_down_dependency_waits
CREATE OR REPLACE FUNCTION awa.resolve_dependencies(
    p_completed bigint[], p_failed bigint[], p_now timestamptz,
    p_cancelled bigint[] DEFAULT '{}'
)
RETURNS TABLE (child_id bigint, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    v_children bigint[];
    v_parents bigint[];
    v_policies text[];
    v_doomed bigint[];
    v_resolved bigint[];
    v_dead bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(awa.dependency_lock_key(f.id))
    FROM (SELECT DISTINCT unnest(p_completed || p_failed) AS id) AS f
    ORDER BY f.id;

    RETURN QUERY
    SELECT s.child_id, s.outcome FROM awa.satisfy_dependencies(p_completed, p_now, true) AS s;

    IF cardinality(p_failed) > 0 THEN
        -- The unresolved edges the failures reach: from each failed job, and on through
        -- every child an edge dooms (policy cancel or dlq), transitively. A 'run' edge
        -- stops there: its child goes on without that parent. An edge that doomed its
        -- child before (failed_at) is not walked again: that child and the jobs below it
        -- were answered then, and counting it doomed here would leave its 'run' edges
        -- from these failures unresolved for ever.
        WITH RECURSIVE hit(child_id, parent_id, on_failure) AS (
            SELECT d.child_id, d.parent_id, d.on_failure FROM awa.job_dependencies AS d
            WHERE d.parent_id = ANY (p_failed) AND d.satisfied_at IS NULL
              AND d.failed_at IS NULL
            UNION
            SELECT d.child_id, d.parent_id, d.on_failure FROM awa.job_dependencies AS d
            JOIN hit ON d.parent_id = hit.child_id
            WHERE hit.on_failure <> 'run' AND d.satisfied_at IS NULL AND d.failed_at IS NULL
        )
        SELECT coalesce(array_agg(hit.child_id), '{}'), coalesce(array_agg(hit.parent_id), '{}'),
               coalesce(array_agg(hit.on_failure), '{}')
        INTO v_children, v_parents, v_policies FROM hit;
        SELECT coalesce(array_agg(DISTINCT e.c), '{}') INTO v_doomed
        FROM unnest(v_children, v_policies) AS e(c, p) WHERE e.p <> 'run';
        SELECT coalesce(array_agg(DISTINCT e.c), '{}') INTO v_dead
        FROM unnest(v_children, v_policies) AS e(c, p) WHERE e.p = 'dlq';
        PERFORM 1 FROM awa.job_dependency_waits AS w
        WHERE w.child_id = ANY (v_children) ORDER BY w.child_id FOR UPDATE;
        -- The edges that doomed a child are marked, so a retry of the parent brings it back
        -- (awa.dependency_retried).
        UPDATE awa.job_dependencies AS d SET failed_at = p_now
        FROM unnest(v_children, v_parents, v_policies) AS e(c, pa, p)
        WHERE e.p <> 'run' AND d.child_id = e.c AND d.parent_id = e.pa AND d.failed_at IS NULL;
        RETURN QUERY
        WITH gone AS (
            DELETE FROM awa.job_dependency_waits AS w
            WHERE w.child_id = ANY (v_doomed)
            RETURNING w.child_id
        )
        SELECT DISTINCT gone.child_id,
               CASE e.p WHEN 'dlq' THEN 'dead_lettered' ELSE 'doomed' END
        FROM gone JOIN unnest(v_children, v_policies) AS e(c, p) ON e.c = gone.child_id
        WHERE e.p <> 'run';
        -- 'run' edges count as done, those of children doomed here too: each edge from a
        -- finished parent is resolved, and a child an operator brings back later does not
        -- wait on them (left unresolved, such an edge outlived its parent and was answered
        -- again by the search for vanished parents). Only a child not doomed counts down.
        WITH resolved AS (
            UPDATE awa.job_dependencies AS d
            SET satisfied_at = p_now,
                parent_outcome = CASE
                    WHEN e.pa = ANY (p_cancelled) THEN 'cancelled'
                    WHEN e.pa = ANY (p_failed) OR e.pa = ANY (v_dead) THEN 'failed'
                    ELSE 'cancelled'
                END
            FROM unnest(v_children, v_parents, v_policies) AS e(c, pa, p)
            WHERE e.p = 'run'
              AND d.child_id = e.c AND d.parent_id = e.pa AND d.satisfied_at IS NULL
            RETURNING d.child_id
        )
        SELECT array_agg(r.child_id) INTO v_resolved FROM resolved AS r
        WHERE NOT r.child_id = ANY (v_doomed);
        RETURN QUERY
        SELECT c.child_id, 'released'::text FROM awa.count_down_dependency_waits(v_resolved) AS c;
    END IF;
END
$$;
