-- Write the whole lease of an open attempt (claim p_claim_slot / p_claim_id) into the
-- current lease slot: in place when it is already there, otherwise moving it out of an
-- older slot (or materialising it). Returns false, writing nothing, when the claim is
-- closed.
CREATE OR REPLACE FUNCTION awa.queue_storage_save_lease(
    p_schema text, p_job_id bigint, p_claim_slot int, p_claim_id bigint, p_waiting boolean,
    p_heartbeat_at timestamptz, p_progress jsonb, p_metadata jsonb, p_callback_id text,
    p_callback_timeout_at timestamptz, p_deadline_at timestamptz
) RETURNS boolean
LANGUAGE plpgsql AS $save$
DECLARE
    s      text := quote_ident(p_schema);
    v_slot int;
    v_live bigint;
BEGIN
    v_slot := awa.queue_storage_lock_leases(p_schema, ARRAY[p_job_id]);
    EXECUTE format($q$
        WITH live AS (
            SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue FROM %1$s.claims c
            WHERE c.slot = $1 AND c.claim_id = $2 AND c.job_id = $3
              AND NOT EXISTS (SELECT 1 FROM %1$s.closures x
                              WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
        ), moved AS (
            DELETE FROM %1$s.leases l USING live
            WHERE l.job_id = live.job_id AND l.run_lease = live.run_lease
              AND l.claim_id = live.claim_id AND l.lease_slot <> $4
            RETURNING l.job_id
        ), refreshed AS (
            UPDATE %1$s.leases l SET waiting = $5, heartbeat_at = $6, progress = $7,
                metadata = $8, callback_id = $9, callback_timeout_at = $10, deadline_at = $11
            FROM live
            WHERE l.lease_slot = $4 AND l.job_id = live.job_id
              AND l.run_lease = live.run_lease AND l.claim_id = live.claim_id
            RETURNING l.job_id
        ), placed AS (
            INSERT INTO %1$s.leases (lease_slot, job_id, run_lease, claim_slot, claim_id,
                queue, waiting, heartbeat_at, progress, metadata, callback_id,
                callback_timeout_at, deadline_at)
            SELECT $4, live.job_id, live.run_lease, live.slot, live.claim_id, live.queue,
                $5, $6, $7, $8, $9, $10, $11
            FROM live
            WHERE NOT EXISTS (SELECT 1 FROM refreshed)
            RETURNING job_id
        )
        SELECT (SELECT count(*) FROM live) + 0 * (SELECT count(*) FROM moved)$q$, s)
        INTO v_live
        USING p_claim_slot, p_claim_id, p_job_id, v_slot, p_waiting, p_heartbeat_at,
            p_progress, p_metadata, p_callback_id, p_callback_timeout_at, p_deadline_at;
    RETURN v_live > 0;
END
$save$;
