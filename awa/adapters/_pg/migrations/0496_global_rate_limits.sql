-- Fleet-wide rate limits (ADR 0029, "Rate limits"): one GCRA limiter per queue (name '')
-- and per concurrency key of a queue (its lane shard). A claim locks the rows it needs,
-- reads their theoretical arrival time, claims at most what they admit and moves them
-- forward, all in its own transaction. rate and burst are the limit in force at the last
-- claim, so an operator (and queue_stats) can tell whether a limiter is holding work back.

CREATE TABLE awa.rate_limiters (
    queue text NOT NULL,
    limiter text NOT NULL,
    tat timestamptz NOT NULL,
    rate double precision NOT NULL CHECK (rate > 0),
    burst integer NOT NULL CHECK (burst >= 1),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (queue, limiter)
);

COMMENT ON TABLE awa.rate_limiters IS
    'Fleet-wide rate limiters (GCRA): limiter '''' is the queue''s global_rate_limit, '
    'others a concurrency key''s global_rate_limit_per_key (by its lane shard).';

-- Live overrides of both limits, beside the other overrides in awa.queue_meta.
ALTER TABLE awa.queue_meta
    ADD COLUMN override_global_rate_per_second double precision,
    ADD COLUMN override_global_rate_burst integer,
    ADD COLUMN override_global_rate_per_key_per_second double precision,
    ADD COLUMN override_global_rate_per_key_burst integer,
    ADD CONSTRAINT queue_meta_override_global_rate_check
        CHECK ((override_global_rate_per_second IS NULL
                OR override_global_rate_per_second BETWEEN 1.0 / 86400 AND 1000000)
           AND (override_global_rate_burst IS NULL
                OR override_global_rate_burst BETWEEN 1 AND 1000000)
           AND (override_global_rate_per_key_per_second IS NULL
                OR override_global_rate_per_key_per_second BETWEEN 1.0 / 86400 AND 1000000)
           AND (override_global_rate_per_key_burst IS NULL
                OR override_global_rate_per_key_burst BETWEEN 1 AND 1000000));
