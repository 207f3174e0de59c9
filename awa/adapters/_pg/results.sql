-- Stored results (awa.job_results), shared by every Postgres engine.

-- name: store_result
INSERT INTO awa.job_results AS r (job_id, result, stored_at, expires_at, kind)
VALUES (
    %(job_id)s, %(result)s::jsonb, %(now)s::timestamptz, %(expires_at)s::timestamptz,
    %(kind)s::text
)
ON CONFLICT (job_id) DO UPDATE SET
    result = EXCLUDED.result,
    kind = EXCLUDED.kind,
    stored_at = EXCLUDED.stored_at,
    expires_at = EXCLUDED.expires_at

-- name: get_results
-- The results of every read asked for while the previous one was in flight.
SELECT job_id, result::text AS result, stored_at, expires_at, kind
FROM awa.job_results
WHERE job_id = ANY (%(job_ids)s::bigint[]) AND expires_at > %(now)s::timestamptz

-- name: announce_finished
SELECT pg_notify(%(channel)s, %(job_id)s)

-- name: prune_results
DELETE FROM awa.job_results WHERE expires_at < %(before)s::timestamptz
