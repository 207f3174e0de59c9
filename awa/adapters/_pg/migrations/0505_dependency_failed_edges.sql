-- Retrying a failed parent lets its children go on (ADR 0032): an edge through which a
-- parent's failure doomed its child (policy cancel or dlq) is marked with the instant;
-- an operator retry of the parent (or retry_from_dlq) clears the marks of its edges, and
-- a child left with none waits again (awa.dependency_retried).

ALTER TABLE awa.job_dependencies ADD COLUMN failed_at timestamptz;

CREATE INDEX job_dependencies_failed_idx ON awa.job_dependencies (child_id)
    WHERE failed_at IS NOT NULL;

COMMENT ON COLUMN awa.job_dependencies.failed_at IS
    'When the parent failing or being cancelled doomed the child through this edge; cleared when the parent is retried.';
