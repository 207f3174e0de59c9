-- Queue samples (awa.queue_samples), shared by every Postgres engine.

-- name: record_queue_samples
INSERT INTO awa.queue_samples AS s (
    sampled_at, queue, available, scheduled, retryable, running, waiting_external, lag_seconds
)
SELECT * FROM unnest(
    %(at)s::timestamptz[], %(queues)s::text[], %(available)s::bigint[], %(scheduled)s::bigint[],
    %(retryable)s::bigint[], %(running)s::bigint[], %(waiting)s::bigint[],
    %(lag)s::double precision[]
)
ON CONFLICT (sampled_at, queue) DO UPDATE SET
    available = EXCLUDED.available,
    scheduled = EXCLUDED.scheduled,
    retryable = EXCLUDED.retryable,
    running = EXCLUDED.running,
    waiting_external = EXCLUDED.waiting_external,
    lag_seconds = EXCLUDED.lag_seconds

-- name: queue_samples
SELECT sampled_at, queue, available, scheduled, retryable, running, waiting_external, lag_seconds
FROM awa.queue_samples
WHERE sampled_at >= %(since)s::timestamptz
ORDER BY sampled_at, queue

-- name: prune_queue_samples
DELETE FROM awa.queue_samples WHERE sampled_at < %(before)s::timestamptz
