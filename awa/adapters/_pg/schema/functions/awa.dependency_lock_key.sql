-- The advisory-lock key of job p_job_id's dependents (ADR 0032): an insert naming the job
-- as a parent holds it shared, the transaction that finishes the job holds it exclusively,
-- so an edge is either seen by the finishing transaction or sees the job finished.
CREATE OR REPLACE FUNCTION awa.dependency_lock_key(p_job_id bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended('awa.job_dependencies:' || p_job_id::text, 0)
$$;
