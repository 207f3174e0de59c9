-- `awa storage prepare`: name the queue-storage schema the cluster will move to (ADR 0007).
CREATE OR REPLACE FUNCTION awa.storage_prepare(p_engine text, p_details jsonb DEFAULT '{}')
RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_details jsonb := coalesce(p_details, '{}'::jsonb);
BEGIN
    IF v.state NOT IN ('canonical', 'prepared') THEN
        PERFORM awa.storage_refuse('prepare_from_canonical',
            format('prepare needs state canonical or prepared, the cluster is %s', v.state));
    END IF;
    IF p_engine IS DISTINCT FROM 'queue_storage' THEN
        PERFORM awa.storage_refuse('engine_is_queue_storage',
            format('the only engine to prepare is queue_storage, got %s',
                coalesce(p_engine, 'null')));
    END IF;
    IF p_engine = v.current_engine THEN
        PERFORM awa.storage_refuse('engine_differs_from_current',
            format('the cluster already runs %s', p_engine));
    END IF;
    IF jsonb_typeof(v_details) <> 'object' THEN
        PERFORM awa.storage_refuse('details_is_object', 'details must be a JSON object');
    END IF;
    IF coalesce(nullif(v_details ->> 'schema', ''), 'awa') !~ '^[A-Za-z_][A-Za-z0-9_]*$' THEN
        PERFORM awa.storage_refuse('schema_is_identifier',
            format('schema %s is not a plain SQL identifier', v_details ->> 'schema'));
    END IF;
    v_details := v_details || jsonb_build_object(
        'schema', coalesce(nullif(v_details ->> 'schema', ''), 'awa'));
    UPDATE awa.storage_transition_state SET
        prepared_engine = p_engine,
        state = 'prepared',
        details = v_details,
        transition_epoch = transition_epoch + CASE WHEN state = 'prepared' THEN 0 ELSE 1 END,
        entered_at = CASE WHEN state = 'prepared' THEN entered_at ELSE now() END,
        updated_at = now(),
        finalized_at = NULL;
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;
