-- `awa storage finalize`: queue storage becomes the only engine once canonical storage
-- holds no live backlog (ADR 0007).
CREATE OR REPLACE FUNCTION awa.storage_finalize() RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_backlog bigint;
BEGIN
    IF v.state <> 'mixed_transition' THEN
        PERFORM awa.storage_refuse('state_is_mixed_transition',
            format('finalize needs state mixed_transition, the cluster is %s', v.state));
    END IF;
    -- Read after the exclusive lock: every producer that routed to canonical has committed.
    v_backlog := awa.canonical_live_backlog();
    IF v_backlog > 0 THEN
        PERFORM awa.storage_refuse('canonical_backlog_drained',
            format('%s canonical job(s) are not finished yet', v_backlog));
    END IF;
    UPDATE awa.storage_transition_state SET
        current_engine = 'queue_storage',
        active_engine = 'queue_storage',
        prepared_engine = NULL,
        state = 'active',
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now(),
        finalized_at = now();
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;
