-- Fleet-wide rate limiters (ADR 0029, "Rate limits"), shared by every Postgres engine and
-- run inside the claim's own transaction.

-- name: lock_rate_limiters
-- Lock the limiters a claim consults (created on first use), in the order given (the
-- queue's own first, then the keys' sorted, so claimers never deadlock), and read their
-- theoretical arrival time. The upsert locks an existing row like FOR UPDATE would.
INSERT INTO awa.rate_limiters AS r (queue, limiter, tat, rate, burst, updated_at)
SELECT %(queue)s, l.name, %(now)s::timestamptz, l.rate, l.burst, %(now)s::timestamptz
FROM unnest(%(names)s::text[], %(rates)s::float8[], %(bursts)s::int[])
    WITH ORDINALITY AS l(name, rate, burst, n)
ORDER BY l.n
ON CONFLICT (queue, limiter) DO UPDATE SET rate = EXCLUDED.rate, burst = EXCLUDED.burst
RETURNING r.limiter, r.tat

-- name: read_rate_limiters
-- The theoretical arrival time of some of a queue's limiters, without locking them: a
-- claim choosing which keys to offer its places to (lock_rate_limiters reads them again
-- under lock before anything is taken).
SELECT limiter, tat FROM awa.rate_limiters
WHERE queue = %(queue)s AND limiter = ANY(%(names)s::text[])

-- name: store_rate_limiters
-- The limiters' new theoretical arrival time after the claim took its jobs.
UPDATE awa.rate_limiters r SET tat = s.tat, updated_at = %(now)s::timestamptz
FROM unnest(%(names)s::text[], %(tats)s::timestamptz[]) AS s(name, tat)
WHERE r.queue = %(queue)s AND r.limiter = s.name

-- name: list_rate_limiters
-- Every limiter a claim has used, for operator surfaces.
SELECT queue, limiter, tat, rate, burst FROM awa.rate_limiters ORDER BY queue, limiter

-- name: prune_idle_rate_limiters
-- The maintenance leader deletes limiters refilled to their whole burst (tat not ahead of
-- now: awa.domain.rate_limits.idle), a batch at a time, passing over the rows a claim
-- holds locked (it moves them forward anyway). The batch is picked once, MATERIALIZED: as
-- an IN (subquery) the planner may rescan it per row (a nested-loop semi join), and each
-- rescan's SKIP LOCKED passes over the rows this statement already deleted and picks the
-- next ones, so the batch would grow past its limit.
WITH idle AS MATERIALIZED (
    SELECT queue, limiter FROM awa.rate_limiters
    WHERE tat <= %(now)s::timestamptz
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM awa.rate_limiters r
USING idle
WHERE r.queue = idle.queue AND r.limiter = idle.limiter
