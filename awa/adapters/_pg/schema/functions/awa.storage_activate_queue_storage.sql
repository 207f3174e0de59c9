-- `install_queue_storage(schema)` installs and activates (ADR 0020): queue storage in
-- p_schema becomes the active engine at once, without the staged transition, when nothing
-- would be left behind: no canonical job that still needs a worker, no live runtime that
-- can only run canonical storage, and, when another queue-storage schema is active, no job
-- or DLQ entry in it. Terminal canonical history stays readable. Already active on
-- p_schema: nothing changes. Refusals name their gate like the transition steps'.
CREATE OR REPLACE FUNCTION awa.storage_activate_queue_storage(p_schema text DEFAULT 'awa')
RETURNS SETOF awa.storage_status_row
LANGUAGE plpgsql AS $$
DECLARE
    v awa.storage_transition_state := awa.storage_lock_for_transition();
    v_schema text := coalesce(nullif(p_schema, ''), 'awa');
    v_current text := coalesce(nullif(v.details ->> 'schema', ''), 'awa');
    v_backlog bigint;
    v_canonical_only bigint;
    v_dlq boolean;
BEGIN
    IF v.state = 'active' AND v_current = v_schema THEN
        RETURN QUERY SELECT * FROM awa.storage_status();
        RETURN;
    END IF;
    IF v.state = 'mixed_transition' THEN
        PERFORM awa.storage_refuse('transition_in_progress',
            format('a staged transition to schema %s is under way: finish it with '
                   '`awa storage finalize` first', v_current));
    END IF;
    IF NOT awa.queue_storage_installed(v_schema) THEN
        PERFORM awa.storage_refuse('queue_storage_schema_installed',
            format('schema %s has no queue-storage tables', v_schema));
    END IF;
    -- Read after the exclusive lock: every producer that routed to canonical has committed.
    v_backlog := awa.canonical_live_backlog();
    IF v_backlog > 0 THEN
        PERFORM awa.storage_refuse('canonical_backlog_drained',
            format('%s canonical job(s) are not finished yet; move them with the staged '
                   'transition: `awa storage prepare --engine queue_storage --details '
                   '''{"schema": "%s"}''`, then `awa storage enter-mixed-transition` and '
                   '`awa storage finalize`', v_backlog, v_schema));
    END IF;
    SELECT count(*) INTO v_canonical_only
    FROM awa.runtime_instances
    WHERE storage_capability = 'canonical'
      AND awa.runtime_is_live(last_seen_at, snapshot_interval_ms, shutting_down);
    IF v_canonical_only > 0 THEN
        PERFORM awa.storage_refuse('no_live_canonical_only_runtime',
            format('%s live runtime(s) can only run canonical storage; '
                   'upgrade or stop them first', v_canonical_only));
    END IF;
    IF v.state = 'active' THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s.dlq_entries)', quote_ident(v_current))
            INTO v_dlq;
        IF v_dlq OR awa.queue_storage_has_rows(v_current) THEN
            PERFORM awa.storage_refuse('no_queue_storage_rows',
                format('queue storage is active in schema %s, which holds jobs; they would '
                       'be left behind in a move to schema %s', v_current, v_schema));
        END IF;
    END IF;
    UPDATE awa.storage_transition_state SET
        current_engine = 'queue_storage',
        active_engine = 'queue_storage',
        prepared_engine = NULL,
        state = 'active',
        details = coalesce(details, '{}'::jsonb) || jsonb_build_object('schema', v_schema),
        transition_epoch = transition_epoch + 1,
        entered_at = now(),
        updated_at = now(),
        finalized_at = now();
    RETURN QUERY SELECT * FROM awa.storage_status();
END
$$;
