-- Stored results of the tasks that opt in (store_result=True), kept apart from the job
-- rows: a result outlives its job's row (queue storage reclaims finished history on its
-- own schedule) until expires_at, after which the maintenance leader deletes it
-- (awa.domain.results).

CREATE TABLE awa.job_results (
    job_id bigint NOT NULL,
    result jsonb NOT NULL,
    stored_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT job_results_pkey PRIMARY KEY (job_id)
);

CREATE INDEX job_results_expires_at_idx ON awa.job_results (expires_at);

COMMENT ON TABLE awa.job_results IS
    'The handler return values of tasks that store results, by job id, kept until expires_at (default seven days after they were stored) whatever happens to the job row.';
