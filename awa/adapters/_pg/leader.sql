-- The maintenance leader's lease (awa.leader_leases, ADR 0014). Every statement runs in a
-- transaction of its own and reads the server's clock, so holders on hosts with skewed
-- clocks agree on who holds the lease, and no session state is involved.

-- name: acquire
-- Take the lease if it is free or ended, or renew it if the asker holds it; a follower
-- gets the holder's remaining seconds instead. A renewal keeps the term; a lease that
-- changed hands (or lapsed before its holder renewed it) starts the next one.
WITH clock AS (
    SELECT clock_timestamp() AS at
), attempt AS (
    INSERT INTO awa.leader_leases AS l (name, holder, term, acquired_at, renewed_at, expires_at)
    SELECT %(name)s, %(holder)s, 1, clock.at, clock.at, clock.at + make_interval(secs => %(ttl)s)
    FROM clock
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder,
        term = CASE
            WHEN l.holder = EXCLUDED.holder AND l.expires_at > EXCLUDED.renewed_at THEN l.term
            ELSE l.term + 1
        END,
        acquired_at = CASE
            WHEN l.holder = EXCLUDED.holder AND l.expires_at > EXCLUDED.renewed_at
            THEN l.acquired_at
            ELSE EXCLUDED.acquired_at
        END,
        renewed_at = EXCLUDED.renewed_at,
        expires_at = EXCLUDED.expires_at
    WHERE l.holder = EXCLUDED.holder OR l.expires_at <= EXCLUDED.renewed_at
    RETURNING l.term, l.holder, l.renewed_at, l.expires_at
)
SELECT true AS held, a.term, a.holder,
       extract(epoch FROM a.expires_at - a.renewed_at)::float8 AS expires_in
FROM attempt AS a
UNION ALL
SELECT false AS held, l.term, l.holder,
       greatest(0, extract(epoch FROM l.expires_at - clock.at))::float8 AS expires_in
FROM awa.leader_leases AS l, clock
WHERE l.name = %(name)s AND NOT EXISTS (SELECT 1 FROM attempt)

-- name: held
SELECT EXISTS (
    SELECT 1 FROM awa.leader_leases
    WHERE name = %(name)s AND holder = %(holder)s AND expires_at > clock_timestamp()
) AS held

-- name: release
-- Ends the lease now; the row stays, so the next holder's term follows this one.
UPDATE awa.leader_leases
SET expires_at = clock_timestamp()
WHERE name = %(name)s AND holder = %(holder)s AND expires_at > clock_timestamp()

-- name: current
SELECT holder, term, acquired_at, renewed_at, expires_at,
       expires_at > clock_timestamp() AS live,
       greatest(0, extract(epoch FROM expires_at - clock_timestamp()))::float8 AS expires_in
FROM awa.leader_leases
WHERE name = %(name)s
