-- Ring maintenance of the queue-storage engine: rotation, prune by partition swap (or
-- TRUNCATE), and the lease ring. Placeholders are listed in statements.py.

-- name: maintenance_hold
-- An expression the first statement of every ring maintenance transaction evaluates (and
-- the one emptying stand-ins): the server ends the session once the transaction sits idle
-- for 2 s, waiting for its client. Prune holds ACCESS EXCLUSIVE on ring tables that every
-- claim and read of awa.jobs touches; a leader stopped (SIGSTOP, a partition, a blocked
-- loop) between its lock and its COMMIT would otherwise keep them locked, and stall the
-- fleet, until it resumes. The transaction rolls back and the duty runs again (ADR 0014:
-- the bound is well inside the lease, 6 s by default). Local to the transaction, so it
-- passes a pooler in transaction mode.
set_config('idle_in_transaction_session_timeout', '2s', true)

-- name: lock_ring_state
-- First in a rotation's or a prune's transaction: the ring-state row, a commit that
-- does not wait for the WAL flush (quiet_commit), so the claims and completions sharing
-- the cores are not held behind it, and the bound on a stopped client (maintenance_hold).
-- A rotation lost in a crash did not happen (nothing durable written after it was
-- flushed either), and the next tick rotates again.
SELECT current_slot, slot_count, rotated_at, {quiet_commit} AS quiet,
    {maintenance_hold} AS held
FROM {s}.ring_state FOR UPDATE SKIP LOCKED

-- name: advance_ring
UPDATE {s}.ring_state SET current_slot = %(slot)s, generation = generation + 1,
    rotated_at = %(now)s

-- name: lock_lease_ring_state
-- First in a lease rotation's or a lease prune's transaction (maintenance_hold).
SELECT current_lease_slot, lease_slot_count, {maintenance_hold} AS held
FROM {s}.ring_state FOR UPDATE SKIP LOCKED

-- name: advance_lease_ring
UPDATE {s}.ring_state SET current_lease_slot = %(slot)s,
    lease_generation = lease_generation + 1, lease_rotated_at = %(now)s

-- name: slot_has_rows
-- Does queue slot k hold any row?
SELECT EXISTS (SELECT 1 FROM {ready_entries_k}) OR EXISTS (SELECT 1 FROM {claims_k})
    OR EXISTS (SELECT 1 FROM {closures_k}) OR EXISTS (SELECT 1 FROM {tombstones_k})
    OR EXISTS (SELECT 1 FROM {done_entries_k}) AS busy

-- name: slot_holds_rows
-- One slot's part of a question about several (joined with UNION ALL): its number, and
-- whether it holds any row (slot_has_rows, by name).
SELECT {k} AS slot, busy FROM ({query}
) AS s

-- name: slot_fill
-- The bytes queue slot %(k)s's partitions of %(tables)s take: their main forks, one stat
-- each, no scan. Whether the ring turns (RingSeal) depends on it.
SELECT coalesce(sum(pg_relation_size(
    format('%%s.%%I', %(s)s::text, t || '_' || %(k)s)::regclass)), 0)::bigint AS bytes
FROM unnest(%(tables)s::text[]) AS t

-- name: slot_row_counts
-- The rows of each of queue slot k's partitions (columns named after the tables).
SELECT (SELECT count(*) FROM {ready_entries_k}) AS ready_entries,
    (SELECT count(*) FROM {claims_k}) AS claims,
    (SELECT count(*) FROM {closures_k}) AS closures,
    (SELECT count(*) FROM {tombstones_k}) AS tombstones,
    (SELECT count(*) FROM {done_entries_k}) AS done_entries

-- name: try_prune_gate
-- The prune gate, exclusive and without waiting (see prune_gate_shared).
SELECT pg_try_advisory_xact_lock(%(gate)s, hashtext(%(schema)s)) AS ok

-- name: heads_in_slot_where
-- Jobs whose current snapshot is a fact stored in slot %(slot)s.
j.id IN (
    SELECT job_id FROM {s}.ready_entries WHERE slot = %(slot)s
    UNION SELECT job_id FROM {s}.done_entries WHERE slot = %(slot)s)
AND (j.ready_slot = %(slot)s OR j.fact_id IN (
    SELECT fact_id FROM {s}.done_entries WHERE slot = %(slot)s))

-- name: heads_in_slot
-- Those of %(ids)s whose current snapshot is a fact in slot %(slot)s, whole.
SELECT j.* FROM {s}.jobs_resolved j WHERE {heads_in_slot_where}
AND j.id = ANY(%(ids)s::bigint[])
ORDER BY j.id

-- name: head_states_in_slot
-- The same, only what prune needs to drop one: id, queue, state (its SQL name),
-- finalized_at and the unique key with its state mask (bit(8) text).
SELECT j.id, j.queue, j.state::text AS state, j.finalized_at, j.unique_key,
    j.unique_states::text AS unique_states
FROM {s}.jobs_resolved j WHERE {heads_in_slot_where}
AND j.id = ANY(%(ids)s::bigint[])
ORDER BY j.id

-- name: facts_elsewhere
-- Those of %(ids)s with a fact outside slot %(slot)s (an operator's retry or deletion
-- marker, a deferred retry).
SELECT job_id FROM {s}.ready_entries WHERE slot <> %(slot)s
    AND job_id = ANY(%(ids)s::bigint[])
UNION SELECT job_id FROM {s}.done_entries WHERE slot <> %(slot)s
    AND job_id = ANY(%(ids)s::bigint[])
UNION SELECT job_id FROM {s}.deferred_jobs
    WHERE job_id = ANY(%(ids)s::bigint[])

-- name: slot_heads
-- The latest fact of every job with a fact in slot k, among the slot's own facts,
-- resolved exactly as the job_facts view does (a claim, its closure and a tombstone live in
-- the slot of the ready row they refer to). ``state`` is NULL where the view resolves none
-- (tombstoned, or closed other than completed).
SELECT DISTINCT ON (id) id, queue, state, finalized_at, unique_key, unique_states
FROM (
    SELECT r.job_id AS id, r.queue, r.unique_key, r.unique_states::text,
        CASE WHEN t.ready_fact IS NOT NULL THEN NULL
             WHEN c.claim_id IS NULL THEN 'available'
             WHEN x.claim_id IS NULL THEN 'running'
             WHEN x.outcome = 'completed' THEN 'completed' END AS state,
        CASE WHEN x.outcome = 'completed' THEN x.finalized_at
             ELSE r.finalized_at END AS finalized_at,
        greatest(r.fact_id, c.claim_id, x.fact_id, t.fact_id) AS fact_id
    FROM {ready_entries_k} r
    LEFT JOIN {tombstones_k} t ON t.ready_fact = r.fact_id
    LEFT JOIN {claims_k} c ON c.ready_fact = r.fact_id
    LEFT JOIN {closures_k} x ON x.claim_id = c.claim_id
    UNION ALL
    SELECT w.job_id, w.queue, w.unique_key, w.unique_states::text, w.state::text,
        w.finalized_at, w.fact_id
    FROM {done_entries_k} w
) f ORDER BY id, fact_id DESC

-- name: add_prune_stats
INSERT INTO {s}.queue_prune_stats AS p (queue, pruned_completed, pruned_cancelled,
    pruned_failed)
VALUES (%(queue)s, %(completed)s, %(cancelled)s, %(failed)s)
ON CONFLICT (queue) DO UPDATE SET
    pruned_completed = p.pruned_completed + EXCLUDED.pruned_completed,
    pruned_cancelled = p.pruned_cancelled + EXCLUDED.pruned_cancelled,
    pruned_failed = p.pruned_failed + EXCLUDED.pruned_failed

-- name: prune_stats
SELECT * FROM {s}.queue_prune_stats ORDER BY queue

-- name: count_changed
-- Under prune's lock: a partition of the slot no longer holds the rows counted before.
-- (Fragments composed into one statement name no placeholder in their comments.)
(SELECT count(*) FROM {child}) <> {n}

-- name: stand_in_in_use
-- A stand-in that could not be emptied yet is never swapped in.
EXISTS (SELECT 1 FROM {stand_in})

-- name: slot_check
-- Under prune's lock: fail (SQLSTATE 55000) when the condition holds.
DO $prune$ BEGIN IF {unless} THEN RAISE EXCEPTION 'slot {k} is in use'
USING ERRCODE = '55000'; END IF; END $prune$

-- name: swap_partition
-- Swap a slot's partition with its empty stand-in: the partition goes out under the
-- stand-in's name and is emptied later (unclean_stand_ins). Only catalog work: nothing is
-- built, synced or dropped under the lock.
ALTER TABLE {parent} DETACH PARTITION {child};
ALTER TABLE {child} RENAME TO {out_name};
ALTER TABLE {stand_in} RENAME TO {child_name};
ALTER TABLE {out} RENAME TO {stand_in_name};
ALTER TABLE {parent} ATTACH PARTITION {child} FOR VALUES IN ({k})

-- name: truncate_partitions
-- Prune where this role may not swap partitions: empty them under the lock instead.
TRUNCATE {tables}

-- name: release_quietly
-- First under prune's lock: the commit that releases the lock does not wait for the WAL
-- flush, so the claims, enqueues and completions queued behind the lock are not held for
-- it too. A prune lost in a crash did not happen (the slot is pruned again), and any
-- later durable commit flushes it first. A commit that removes files (the TRUNCATE of
-- the fall-back) is flushed by the server regardless.
SET LOCAL synchronous_commit = off

-- name: lock_nowait_then
-- Every table is locked ONLY: a partitioned parent without its partitions. The swap needs
-- the parent and the slot's own partitions; the other slots' partitions stay free for the
-- statements that read them by name (claim_in_slot).
LOCK TABLE ONLY {tables} IN ACCESS EXCLUSIVE MODE NOWAIT; {then}

-- name: lock_then
LOCK TABLE ONLY {tables} IN ACCESS EXCLUSIVE MODE; {then}

-- name: prune_lock_timeout
-- The longest prune queues for its lock once its NOWAIT tries failed.
SET LOCAL lock_timeout = '50ms'

-- name: unclean_stand_ins
-- The stand-ins of %(tables)s that hold rows (of a slot swapped out earlier).
SELECT format('%%s.%%I', %(s)s::text, c.relname) AS stand_in
FROM pg_class c
WHERE c.relnamespace = to_regnamespace(%(s)s) AND c.relkind = 'r'
  AND c.relname ~ ('^(' || array_to_string(%(tables)s::text[], '|') || ')_[0-9]+_spare$')
  AND pg_relation_size(c.oid) > 0

-- name: empty_stand_ins
SELECT {maintenance_hold}; LOCK TABLE {stand_ins} IN ACCESS EXCLUSIVE MODE NOWAIT;
TRUNCATE {stand_ins}

-- name: stand_ins_exist
-- Whether slot %(k)s has a stand-in for every table of %(tables)s.
SELECT bool_and(to_regclass(format('%%s.%%I', %(s)s::text, t || '_' || %(k)s || '_spare'))
    IS NOT NULL) AS ready
FROM unnest(%(tables)s::text[]) AS t

-- name: dirty_lease_slots
-- Lease slots written since their last TRUNCATE.
SELECT i FROM {s}.ring_state r, generate_series(0, r.lease_slot_count - 1) AS g(i)
WHERE pg_relation_size(format('%%s.leases_%%s', %(s)s::text, i)::regclass) > 0

-- name: lease_ring_written
-- Without a lock: is any lease slot written since its last TRUNCATE? The lease ring's
-- duties run four times a second; while no attempt has a lease row (every handler is
-- short), this read is all they do: no row lock on ring_state, so no transaction id, no
-- WAL and no commit to flush. A lease written just after it is seen at the next tick.
SELECT EXISTS ({dirty_lease_slots}) AS written

-- name: lease_slot_live
-- Does lease slot k hold the lease of an attempt whose claim is still open? Rows of closed
-- attempts (or of claims whose queue slot was already reclaimed) are dead.
EXISTS (SELECT 1 FROM {leases_k} l
    JOIN {s}.claims c ON c.slot = l.claim_slot AND c.claim_id = l.claim_id
    WHERE NOT EXISTS (SELECT 1 FROM {s}.closures x
                      WHERE x.slot = c.slot AND x.claim_id = c.claim_id))

-- name: add_completions_in
-- add_completions into one given bucket: prune's, where it counts the completed jobs it
-- drops (snapshots.PRUNED_COMPLETIONS_BUCKET).
INSERT INTO {s}.completions AS c (queue, minute, bucket, n)
SELECT q, m, %(bucket)s::smallint, d
FROM unnest(%(queues)s::text[], %(minutes)s::timestamptz[], %(deltas)s::bigint[]) AS i(q, m, d)
ORDER BY q, m
ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: prune_completions
DELETE FROM {s}.completions WHERE minute < %(before)s
