-- The retention of dependency edges (ADR 0032) reads only the edges that can be due: an
-- edge is due once it was resolved (its parent completed, or failed and resolved or
-- doomed the child) before the retention's cutoff, so the maintenance leader walks this
-- index from its oldest resolution up to the cutoff, a bounded page per statement,
-- instead of grouping every edge of the table on each run. Unresolved edges (a child
-- still waiting) are not in it.

CREATE INDEX job_dependencies_resolved_idx
    ON awa.job_dependencies ((coalesce(satisfied_at, failed_at)), child_id)
    WHERE coalesce(satisfied_at, failed_at) IS NOT NULL;
