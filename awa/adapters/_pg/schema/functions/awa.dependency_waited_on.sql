-- The jobs of p_ids that a child still waits on: an unresolved edge (neither satisfied
-- nor failed) names each as its parent. A job deleted while one does counts as cancelled
-- for those children, whatever state it was deleted in (ADR 0032, "A parent that
-- vanishes"): the engines' delete_jobs answer them in the delete's transaction
-- (awa.domain.dependencies.deleted_parents), awa.jobs_view_delete records the job for the
-- maintenance leader. A job that finished through its own attempt or an operator answered
-- its children then; one cancelled by another job's kind rule (an effect's transition
-- carries no further effects, ADR 0028) did not, and is named here.
CREATE OR REPLACE FUNCTION awa.dependency_waited_on(p_ids bigint[]) RETURNS SETOF bigint
LANGUAGE sql STABLE AS $$
    SELECT p.id FROM unnest(p_ids) AS p(id)
    WHERE EXISTS (
        SELECT 1 FROM awa.job_dependencies AS d
        WHERE d.parent_id = p.id AND d.satisfied_at IS NULL AND d.failed_at IS NULL
    )
$$;
