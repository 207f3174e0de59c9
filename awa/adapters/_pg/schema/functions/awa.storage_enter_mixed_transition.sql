-- `awa storage enter-mixed-transition`: producers move to queue storage once every live
-- runtime can serve it (ADR 0007). `--quiesced` (p_quiesced): the fleet is stopped, so
-- instead no runtime may be live (domain/transition.enter_mixed_refusals).
CREATE OR REPLACE FUNCTION awa.storage_enter_mixed_transition(p_quiesced boolean DEFAULT false)
RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_schema text := coalesce(nullif(v.details ->> 'schema', ''), 'awa');
    v_canonical_only bigint;
    v_capable bigint;
    v_live bigint;
BEGIN
    IF v.state <> 'prepared' THEN
        PERFORM awa.storage_refuse('state_is_prepared',
            format('enter-mixed-transition needs state prepared, the cluster is %s', v.state));
    END IF;
    IF v.prepared_engine IS DISTINCT FROM 'queue_storage' THEN
        PERFORM awa.storage_refuse('engine_is_queue_storage',
            'the prepared engine is not queue_storage');
    END IF;
    IF NOT awa.queue_storage_installed(v_schema) THEN
        PERFORM awa.storage_refuse('queue_storage_schema_installed',
            format('schema %s has no queue-storage tables: run '
                   '`awa storage prepare-queue-storage-schema --schema %s`', v_schema, v_schema));
    END IF;
    SELECT count(*) FILTER (WHERE storage_capability = 'canonical'),
           count(*) FILTER (WHERE storage_capability = 'queue_storage')
    INTO v_canonical_only, v_capable
    FROM awa.runtime_instances
    WHERE awa.runtime_is_live(last_seen_at, snapshot_interval_ms, shutting_down);
    SELECT count(*) INTO v_live FROM awa.runtime_instances
    WHERE awa.runtime_is_live(last_seen_at, snapshot_interval_ms, shutting_down);
    IF p_quiesced AND v_live > 0 THEN
        PERFORM awa.storage_refuse('no_live_runtime',
            format('%s runtime(s) still heartbeat; a quiesced flip needs every worker '
                   'stopped', v_live));
    END IF;
    IF NOT p_quiesced AND v_canonical_only > 0 THEN
        PERFORM awa.storage_refuse('no_live_canonical_only_runtime',
            format('%s live runtime(s) can only run canonical storage; '
                   'upgrade or stop them first', v_canonical_only));
    END IF;
    IF NOT p_quiesced AND v_capable = 0 THEN
        PERFORM awa.storage_refuse('live_queue_storage_runtime',
            'no live runtime can execute queue storage; start one first');
    END IF;
    UPDATE awa.storage_transition_state SET
        state = 'mixed_transition',
        active_engine = 'queue_storage',
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now();
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;
