-- The kind of the job that stored a result (ADR 0033): a child reading its parents'
-- results (job.parent_results) rebuilds each with the type the parent's task returns,
-- even after the parent's row is gone.

ALTER TABLE awa.job_results ADD COLUMN kind text;

COMMENT ON COLUMN awa.job_results.kind IS
    'The kind of the job whose handler returned the result (null when not recorded).';
