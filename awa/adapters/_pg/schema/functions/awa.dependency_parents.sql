-- The parents an insert names, locked against finishing (ADR 0032): each one's state as
-- awa.jobs shows it, or 'failed' for a job held in the DLQ. An id of no job is absent
-- from the answer. The locks are taken before the read, and a PL/pgSQL statement reads
-- with a snapshot of its own, so a parent whose finishing transaction committed meanwhile
-- is read finished.
-- requires: awa.dependency_lock_key, awa.jobs
CREATE OR REPLACE FUNCTION awa.dependency_parents(p_ids bigint[])
RETURNS TABLE (id bigint, state awa.job_state)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(awa.dependency_lock_key(p.id))
    FROM (SELECT DISTINCT unnest(p_ids) AS id) AS p
    ORDER BY p.id;
    RETURN QUERY
    SELECT j.id, j.state FROM awa.jobs AS j WHERE j.id = ANY (p_ids)
    UNION ALL
    SELECT d.job_id, 'failed'::awa.job_state FROM awa.dlq_entries AS d WHERE d.job_id = ANY (p_ids);
END
$$;
