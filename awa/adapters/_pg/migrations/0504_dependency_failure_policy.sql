-- Per-edge policy on a parent's failure (ADR 0032): 'cancel' cancels the waiting child
-- (the default, as before), 'run' counts the failed parent as done, 'dlq' fails the
-- child into the DLQ. The engines decide through awa.resolve_dependencies.

ALTER TABLE awa.job_dependencies
    ADD COLUMN on_failure text NOT NULL DEFAULT 'cancel',
    ADD CONSTRAINT job_dependencies_on_failure_check
        CHECK (on_failure IN ('cancel', 'run', 'dlq'));

COMMENT ON COLUMN awa.job_dependencies.on_failure IS
    'What the parent failing or being cancelled for good does to the child: cancel, run or dlq.';
