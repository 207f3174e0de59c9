-- Completion of the queue-storage engine (finalize.py): the short completion, completion
-- by receipt (counted or arbitrated), and closing claims.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: complete_short
-- The live attempts among (job_id, run_lease) pairs, and when none of them has a lease or
-- a unique key (the common short attempt), their `completed` closures in the same
-- statement; otherwise nothing is closed here and the caller reads the snapshots first.
WITH open AS (
    SELECT c.slot, c.claim_id, c.job_id, c.run_lease, c.queue,
        (l.job_id IS NOT NULL) AS has_lease, coalesce(l.waiting, false) AS waiting,
        r.unique_key, r.unique_states
    FROM (SELECT DISTINCT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[])
          AS i(job_id, run_lease)) i
    -- A claim's attempt is its ready row's plus one: found through ready_entries (job_id)
    -- and the claim probe (claims has no index by job id).
    JOIN {s}.ready_entries r ON r.job_id = i.job_id AND r.run_lease = i.run_lease - 1
    JOIN {s}.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
    LEFT JOIN {s}.leases l
        ON l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id
    WHERE NOT EXISTS (
        SELECT 1 FROM {s}.closures x WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
), closed AS (
    INSERT INTO {s}.closures (slot, claim_id, fact_id, queue, outcome, finalized_at)
    SELECT slot, claim_id, nextval('{s}.fact_seq'), queue, 'completed', %(now)s
    FROM open
    WHERE NOT EXISTS (SELECT 1 FROM open w WHERE w.has_lease OR w.unique_key IS NOT NULL)
    ORDER BY slot, claim_id
    ON CONFLICT DO NOTHING
    RETURNING claim_id
)
SELECT o.*, (o.claim_id IN (SELECT claim_id FROM closed)) AS closed,
    NOT EXISTS (SELECT 1 FROM open w WHERE w.has_lease OR w.unique_key IS NOT NULL)
        AS short
FROM open o

-- name: complete_receipts_counted
-- Completion of attempts whose receipt (slot, claim_id) this process took itself and
-- that carry no unique key: no lookup by job id. An attempt with a lease row is left to
-- the general path (reported in `leased`). The receipt must still exist (a slot pruned
-- after a rescue never takes a closure), and the closure key arbitrates racing
-- finalisers exactly as in close_claims. One statement on its own (autocommit), with the
-- counters and completion buckets of the attempts it closed (counters last, key order)
-- and their dependency edges (awa.satisfy_dependencies; in a transaction, with the
-- children it releases in `released`, when one would be).
-- The engine runs it first without its ON CONFLICT clause: a speculative
-- insertion writes a second WAL record per row (its confirmation), and closures already
-- committed are filtered out by NOT EXISTS. A closure racing in from another finaliser
-- then fails the statement with a unique violation (nothing written), and the engine
-- runs it again with ON CONFLICT DO NOTHING, where the key arbitrates as before.
{complete_receipts_body claims=ring_claims closures=ring_closures on_conflict=nothing}

-- name: complete_receipts_arbitrated
-- complete_receipts_counted again after a racing finaliser's closure failed it: the
-- closure key decides.
{complete_receipts_body claims=ring_claims closures=ring_closures
    on_conflict=on_conflict_do_nothing}

-- name: complete_in_slot_counted
-- complete_receipts_counted for receipts that all name one ring slot: it reads that
-- slot's claims and writes its closures by name, never through the partitioned parents,
-- so it neither plans nor locks the other slots' partitions, and prune's swap of another
-- slot does not make it plan again (as claim_in_slot). A receipt whose claim was swapped
-- out or carried forward closes nothing here and is looked up by job id, as with the
-- ring-wide form.
{complete_receipts_body claims=slot_claims closures=slot_closures on_conflict=nothing}

-- name: complete_in_slot_arbitrated
-- complete_in_slot_counted after a racing finaliser's closure failed it.
{complete_receipts_body claims=slot_claims closures=slot_closures
    on_conflict=on_conflict_do_nothing}

-- name: ring_closures
{s}.closures

-- name: slot_closures
{closures_k}

-- name: complete_receipts_body
-- The receipt completion; its claims and closures tables are filled in by the ring-wide
-- and the in-slot forms.
WITH i AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(slots)s::int[],
        %(claims)s::bigint[], %(queues)s::text[]) AS i(job_id, run_lease, slot, claim_id, queue)
), leased AS (
    SELECT i.job_id FROM i
    WHERE EXISTS (SELECT 1 FROM {s}.leases l
                  WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease
                    AND l.claim_id = i.claim_id OFFSET 0)
), closed AS (
    INSERT INTO {closures} (slot, claim_id, fact_id, queue, outcome, finalized_at)
    SELECT i.slot, i.claim_id, nextval('{s}.fact_seq'), i.queue, 'completed', %(now)s
    FROM i
    WHERE i.job_id NOT IN (SELECT job_id FROM leased)
      AND EXISTS (SELECT 1 FROM {claims} c
                  WHERE c.slot = i.slot AND c.claim_id = i.claim_id
                    AND c.job_id = i.job_id AND c.run_lease = i.run_lease OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM {closures} x
                      WHERE x.slot = i.slot AND x.claim_id = i.claim_id OFFSET 0)
    ORDER BY i.slot, i.claim_id
    {on_conflict}
    RETURNING slot, claim_id, queue
), per_queue AS (
    SELECT queue, count(*) AS n FROM closed GROUP BY queue
), counted AS (
    INSERT INTO {s}.queue_counts AS q (queue, state, bucket, n)
    SELECT p.queue, v.st::awa.job_state, (24 + pg_backend_pid() %% 8)::smallint, v.d
    FROM per_queue p
    CROSS JOIN LATERAL (VALUES ('completed', p.n), ('running', -p.n)) AS v(st, d)
    ORDER BY p.queue, v.st
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = q.n + EXCLUDED.n
), recent AS (
    INSERT INTO {s}.completions AS c (queue, minute, bucket, n)
    SELECT p.queue, %(minute)s, (8 + pg_backend_pid() %% 8)::smallint, p.n
    FROM per_queue p
    ORDER BY p.queue
    ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n
), settled AS (
    -- The edges of the jobs it completed (ADR 0032): satisfied here when no waiting job
    -- is released (the release parameter false: the statement commits on its own, and a
    -- release raises AWD01 so that the engine runs it again in a transaction, true).
    SELECT s.child_id, s.outcome FROM awa.satisfy_dependencies(
        ARRAY(SELECT i.job_id FROM i JOIN closed c ON c.slot = i.slot AND c.claim_id = i.claim_id),
        %(now)s, %(release)s) AS s
)
SELECT claim_id, NULL::bigint AS leased, NULL::bigint AS released FROM closed
UNION ALL
SELECT NULL, job_id, NULL FROM leased
UNION ALL
SELECT NULL, NULL, child_id FROM settled

-- name: on_conflict_do_nothing
ON CONFLICT DO NOTHING

-- name: close_claims
-- The closure key (slot, claim_id) is the arbiter: of two racing finalisers exactly one
-- inserts, the other gets no row back and reports stale.
INSERT INTO {s}.closures (slot, claim_id, fact_id, queue, outcome, finalized_at)
SELECT slot, claim_id, nextval('{s}.fact_seq'), queue, outcome, %(now)s
FROM unnest(%(slots)s::int[], %(claims)s::bigint[], %(queues)s::text[], %(outcomes)s::text[])
    AS i(slot, claim_id, queue, outcome)
ORDER BY slot, claim_id
ON CONFLICT DO NOTHING
RETURNING claim_id
