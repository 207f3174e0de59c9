-- Batches (ADR 0035): a batch's callback waits on its members through 'run' edges, and
-- counts how they ended from those edges, which outlive the members' rows. A completed
-- parent's edge is satisfied with no outcome written (the completion's hot path writes
-- nothing more); a parent that failed or was cancelled for good records which on the
-- 'run' edges its failure resolves (awa.resolve_dependencies).

ALTER TABLE awa.job_dependencies
    ADD COLUMN parent_outcome text,
    ADD CONSTRAINT job_dependencies_parent_outcome_check
        CHECK (parent_outcome IN ('failed', 'cancelled'));

COMMENT ON COLUMN awa.job_dependencies.parent_outcome IS
    'How the parent ended when its failure resolved this run edge: failed or cancelled; null while the parent has not finished, or when it completed (satisfied_at set).';
