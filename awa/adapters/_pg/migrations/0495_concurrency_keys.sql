-- Per-key concurrency (ADR 0029): a job's concurrency key is its metadata's
-- 'awa:concurrency_key'. The canonical claim of a queue with max_running_per_key walks the
-- keys with available work, counts each key's live attempts and takes the keyless jobs
-- apart; these partial indexes serve the three reads. The queue's limit is also a live
-- override (awa queue overrides), beside the other overrides in awa.queue_meta.

CREATE INDEX canonical_jobs_key_ready_idx ON awa.canonical_jobs
    (queue, (metadata ->> 'awa:concurrency_key'), priority, run_at, id)
    WHERE state = 'available' AND metadata ? 'awa:concurrency_key';

CREATE INDEX canonical_jobs_key_live_idx ON awa.canonical_jobs
    (queue, (metadata ->> 'awa:concurrency_key'))
    WHERE state IN ('running', 'waiting_external') AND metadata ? 'awa:concurrency_key';

CREATE INDEX canonical_jobs_keyless_ready_idx ON awa.canonical_jobs (queue, priority, run_at, id)
    WHERE state = 'available' AND NOT metadata ? 'awa:concurrency_key';

ALTER TABLE awa.queue_meta ADD COLUMN override_max_running_per_key integer,
    ADD CONSTRAINT queue_meta_override_max_running_per_key_check
        CHECK (override_max_running_per_key IS NULL
            OR override_max_running_per_key BETWEEN 1 AND 1000000);
