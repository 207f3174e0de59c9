-- Serialise the lease writers of these attempts (a partitioned table has no unique key on
-- (job_id, run_lease) alone) and return the current lease slot, read after the locks.
CREATE OR REPLACE FUNCTION awa.queue_storage_lock_leases(p_schema text, p_job_ids bigint[]) RETURNS int
LANGUAGE plpgsql AS $lock$
DECLARE
    v_slot int;
BEGIN
    -- Transaction-scoped, in job id order; the two-key form never meets the one-key
    -- advisory locks used elsewhere.
    PERFORM pg_advisory_xact_lock(hashtext('awa.lease:' || p_schema), (i.id % 2147483647)::int)
    FROM (SELECT DISTINCT id FROM unnest(p_job_ids) AS u(id) ORDER BY id) i;
    -- Read after the locks: a writer that waited sees the slot a rotation moved to.
    EXECUTE format('SELECT current_lease_slot FROM %s.ring_state', quote_ident(p_schema))
        INTO v_slot;
    RETURN v_slot;
END
$lock$;
