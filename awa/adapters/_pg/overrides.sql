-- Live queue overrides: the override_* columns of awa.queue_meta, shared by every
-- Postgres engine.

-- name: get_queue_overrides
SELECT queue, override_poll_interval_ms, override_claim_batch_size,
       override_rate_limit_per_second, override_rate_limit_burst, override_deadline_ms,
       override_max_running_per_key, override_global_rate_per_second,
       override_global_rate_burst, override_global_rate_per_key_per_second,
       override_global_rate_per_key_burst
FROM awa.queue_meta
WHERE queue = %(queue)s

-- name: list_queue_overrides
SELECT queue, override_poll_interval_ms, override_claim_batch_size,
       override_rate_limit_per_second, override_rate_limit_burst, override_deadline_ms,
       override_max_running_per_key, override_global_rate_per_second,
       override_global_rate_burst, override_global_rate_per_key_per_second,
       override_global_rate_per_key_burst
FROM awa.queue_meta
WHERE num_nonnulls(override_poll_interval_ms, override_claim_batch_size,
                   override_rate_limit_per_second, override_rate_limit_burst,
                   override_deadline_ms, override_max_running_per_key,
                   override_global_rate_per_second, override_global_rate_burst,
                   override_global_rate_per_key_per_second,
                   override_global_rate_per_key_burst) > 0
ORDER BY queue

-- name: set_queue_overrides
INSERT INTO awa.queue_meta (
    queue, override_poll_interval_ms, override_claim_batch_size,
    override_rate_limit_per_second, override_rate_limit_burst, override_deadline_ms,
    override_max_running_per_key, override_global_rate_per_second,
    override_global_rate_burst, override_global_rate_per_key_per_second,
    override_global_rate_per_key_burst, overrides_updated_at, updated_at
) VALUES (
    %(queue)s, %(poll_interval_ms)s, %(claim_batch_size)s, %(rate_limit_per_second)s,
    %(rate_limit_burst)s, %(deadline_ms)s, %(max_running_per_key)s,
    %(global_rate_per_second)s, %(global_rate_burst)s, %(global_rate_per_key_per_second)s,
    %(global_rate_per_key_burst)s, %(now)s::timestamptz, %(now)s::timestamptz
)
ON CONFLICT (queue) DO UPDATE SET
    override_poll_interval_ms = EXCLUDED.override_poll_interval_ms,
    override_claim_batch_size = EXCLUDED.override_claim_batch_size,
    override_rate_limit_per_second = EXCLUDED.override_rate_limit_per_second,
    override_rate_limit_burst = EXCLUDED.override_rate_limit_burst,
    override_deadline_ms = EXCLUDED.override_deadline_ms,
    override_max_running_per_key = EXCLUDED.override_max_running_per_key,
    override_global_rate_per_second = EXCLUDED.override_global_rate_per_second,
    override_global_rate_burst = EXCLUDED.override_global_rate_burst,
    override_global_rate_per_key_per_second = EXCLUDED.override_global_rate_per_key_per_second,
    override_global_rate_per_key_burst = EXCLUDED.override_global_rate_per_key_burst,
    overrides_updated_at = EXCLUDED.overrides_updated_at,
    updated_at = EXCLUDED.updated_at

-- name: clear_queue_overrides
UPDATE awa.queue_meta
SET override_poll_interval_ms = NULL, override_claim_batch_size = NULL,
    override_rate_limit_per_second = NULL, override_rate_limit_burst = NULL,
    override_deadline_ms = NULL, override_max_running_per_key = NULL,
    override_global_rate_per_second = NULL, override_global_rate_burst = NULL,
    override_global_rate_per_key_per_second = NULL, override_global_rate_per_key_burst = NULL,
    overrides_updated_at = %(now)s::timestamptz,
    updated_at = %(now)s::timestamptz
WHERE queue = %(queue)s
  AND num_nonnulls(override_poll_interval_ms, override_claim_batch_size,
                   override_rate_limit_per_second, override_rate_limit_burst,
                   override_deadline_ms, override_max_running_per_key,
                   override_global_rate_per_second, override_global_rate_burst,
                   override_global_rate_per_key_per_second,
                   override_global_rate_per_key_burst) > 0
RETURNING queue
