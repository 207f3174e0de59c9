-- `awa storage abort`: back from prepared or mixed_transition to canonical (ADR 0007);
-- a no-op on a canonical cluster.
CREATE OR REPLACE FUNCTION awa.storage_abort() RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_schema text := coalesce(nullif(v.details ->> 'schema', ''), 'awa');
BEGIN
    -- Already canonical: nothing to go back from, a no-op (domain/transition.check_abort).
    IF v.state = 'canonical' THEN
        RETURN QUERY SELECT * FROM awa.storage_status();
        RETURN;
    END IF;
    IF v.state NOT IN ('prepared', 'mixed_transition') THEN
        PERFORM awa.storage_refuse('transition_in_progress',
            format('abort needs state prepared or mixed_transition, the cluster is %s',
                v.state));
    END IF;
    -- Read after the exclusive lock: every producer that routed to queue storage committed.
    IF v.state = 'mixed_transition' AND awa.queue_storage_has_rows(v_schema) THEN
        PERFORM awa.storage_refuse('no_queue_storage_rows',
            format('schema %s already holds queue-storage jobs; finish the transition '
                   'with `awa storage finalize`', v_schema));
    END IF;
    UPDATE awa.storage_transition_state SET
        current_engine = 'canonical',
        active_engine = 'canonical',
        prepared_engine = NULL,
        state = 'canonical',
        details = '{}'::jsonb,
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now(),
        finalized_at = NULL;
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;
