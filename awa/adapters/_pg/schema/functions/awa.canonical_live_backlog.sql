-- Canonical jobs that still need a worker: everything not terminal, including scheduled,
-- retryable and waiting_external jobs.
CREATE OR REPLACE FUNCTION awa.canonical_live_backlog() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*)::bigint FROM awa.canonical_jobs
    WHERE state NOT IN ('completed', 'failed', 'cancelled')
$$;
