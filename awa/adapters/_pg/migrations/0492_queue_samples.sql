-- Each queue's depth and lag over time for the admin dashboard's charts: the maintenance
-- leader records one row per queue a minute from queue_depths() (a cheap read it already
-- makes for the metrics) and deletes rows older than a day (awa.domain.admin_views).

CREATE TABLE awa.queue_samples (
    sampled_at timestamptz NOT NULL,
    queue text NOT NULL,
    available bigint NOT NULL,
    scheduled bigint NOT NULL,
    retryable bigint NOT NULL,
    running bigint NOT NULL,
    waiting_external bigint NOT NULL,
    lag_seconds double precision NOT NULL,
    CONSTRAINT queue_samples_pkey PRIMARY KEY (sampled_at, queue)
);

COMMENT ON TABLE awa.queue_samples IS
    'Per queue and minute: jobs available, scheduled, retryable, running and waiting, and the lag, recorded by the maintenance leader for the admin charts; kept a day.';
