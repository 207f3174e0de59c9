-- Job dependencies (ADR 0032): a job inserted with depends_on waits, scheduled at the
-- waiting instant, until every parent has completed. Both tables live in schema awa
-- whatever engine holds the jobs, so a parent on canonical storage and a child on queue
-- storage share them.
--
-- job_dependencies: one row per edge; satisfied_at is set when the parent completed.
-- job_dependency_waits: one row per waiting child, its count of unsatisfied edges; the
-- row lock serialises parents of one child finishing at once, and the row goes when the
-- count reaches zero (the child is released in that transaction).

CREATE TABLE awa.job_dependencies (
    child_id bigint NOT NULL,
    parent_id bigint NOT NULL,
    satisfied_at timestamptz,
    CONSTRAINT job_dependencies_pkey PRIMARY KEY (child_id, parent_id),
    CONSTRAINT job_dependencies_not_self CHECK (child_id <> parent_id)
);

CREATE INDEX job_dependencies_parent_idx ON awa.job_dependencies (parent_id);

CREATE TABLE awa.job_dependency_waits (
    child_id bigint NOT NULL,
    pending integer NOT NULL,
    CONSTRAINT job_dependency_waits_pkey PRIMARY KEY (child_id),
    CONSTRAINT job_dependency_waits_pending_check CHECK (pending > 0)
);

COMMENT ON TABLE awa.job_dependencies IS
    'Job dependency edges: the child runs once every parent completed (satisfied_at set when it did).';
COMMENT ON TABLE awa.job_dependency_waits IS
    'Per waiting child, how many of its parents have not completed yet; the row goes when none are left.';
