-- The resolution views of a queue-storage schema, in their current definitions:
--
-- * job_facts: a ready row, its claim, closure, tombstone and lease give one snapshot; a
--   deferred row and a done fact are snapshots of their own.
-- * jobs_resolved: the job's snapshot is its fact with the highest fact_id; state NULL
--   means "gone".
-- * terminal_jobs: the terminal history in the awa.jobs column layout (SQL_SURFACE.md).
--
-- Called by awa.install_queue_storage after every table step. A view whose definition
-- already matches (same deparsed query as a temporary copy) is left alone, so a repeated
-- install takes no lock on it. The replacement keeps each view's columns, so the views
-- built on these (awa.jobs over awa.jobs_resolved, an operator's own) stay valid; a
-- change that removes, renames or retypes a column needs a step that drops the view first.
CREATE OR REPLACE FUNCTION awa.queue_storage_install_views(p_schema text) RETURNS void
LANGUAGE plpgsql AS $views$
DECLARE
    s       text := quote_ident(p_schema);
    v_names text[] := ARRAY['job_facts', 'jobs_resolved', 'terminal_jobs'];
    v_bodies text[];
    v_view  text;
    v_same  boolean;
    i       int;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    v_bodies := ARRAY[
        format($q$
    SELECT
        r.job_id AS id, r.kind, r.queue, r.args,
        (CASE
            WHEN t.ready_fact IS NOT NULL THEN NULL
            WHEN c.claim_id IS NULL THEN 'available'
            WHEN x.claim_id IS NULL THEN
                CASE WHEN l.waiting THEN 'waiting_external' ELSE 'running' END
            WHEN x.outcome = 'completed' THEN 'completed'
            ELSE NULL
        END)::awa.job_state AS state,
        r.priority,
        (r.attempt + CASE WHEN c.claim_id IS NULL THEN 0 ELSE 1 END)::smallint AS attempt,
        r.max_attempts, r.run_at,
        CASE WHEN c.claim_id IS NULL THEN r.heartbeat_at
             WHEN l.job_id IS NULL THEN c.attempted_at ELSE l.heartbeat_at END AS heartbeat_at,
        CASE WHEN c.claim_id IS NULL THEN r.deadline_at
             WHEN l.job_id IS NULL THEN c.deadline_at ELSE l.deadline_at END AS deadline_at,
        CASE WHEN c.claim_id IS NULL THEN r.attempted_at ELSE c.attempted_at END AS attempted_at,
        CASE WHEN x.outcome = 'completed' THEN x.finalized_at ELSE r.finalized_at END
            AS finalized_at,
        r.created_at, r.errors,
        CASE WHEN l.job_id IS NULL THEN r.metadata ELSE l.metadata END AS metadata,
        r.tags, r.unique_key, r.unique_states,
        CASE WHEN l.job_id IS NULL THEN r.callback_id ELSE l.callback_id END AS callback_id,
        CASE WHEN l.job_id IS NULL THEN r.callback_timeout_at
             ELSE l.callback_timeout_at END AS callback_timeout_at,
        r.run_lease + CASE WHEN c.claim_id IS NULL THEN 0 ELSE 1 END AS run_lease,
        CASE WHEN x.outcome = 'completed' THEN NULL
             WHEN l.job_id IS NULL THEN r.progress ELSE l.progress END AS progress,
        r.ordering_key,
        greatest(r.fact_id, c.claim_id, x.fact_id, t.fact_id) AS fact_id,
        r.slot AS ready_slot, r.fact_id AS ready_fact, c.claim_id,
        (c.claim_id IS NOT NULL AND x.claim_id IS NULL) AS open_claim
    FROM %1$s.ready_entries r
    LEFT JOIN %1$s.tombstones t ON t.slot = r.slot AND t.ready_fact = r.fact_id
    LEFT JOIN %1$s.claims c ON c.slot = r.slot AND c.ready_fact = r.fact_id
    LEFT JOIN %1$s.closures x ON x.slot = c.slot AND x.claim_id = c.claim_id
    LEFT JOIN %1$s.leases l
        ON l.job_id = c.job_id AND l.run_lease = c.run_lease AND l.claim_id = c.claim_id
        AND x.claim_id IS NULL
    UNION ALL
    SELECT
        d.job_id, d.kind, d.queue, d.args, d.state, d.priority, d.attempt, d.max_attempts,
        d.run_at, d.heartbeat_at, d.deadline_at, d.attempted_at, d.finalized_at,
        d.created_at, d.errors, d.metadata, d.tags, d.unique_key, d.unique_states,
        d.callback_id, d.callback_timeout_at, d.run_lease, d.progress, d.ordering_key,
        d.fact_id, NULL::int, NULL::bigint, NULL::bigint, false
    FROM %1$s.deferred_jobs d
    UNION ALL
    SELECT
        w.job_id, w.kind, w.queue, w.args, w.state, w.priority, w.attempt, w.max_attempts,
        w.run_at, w.heartbeat_at, w.deadline_at, w.attempted_at, w.finalized_at,
        w.created_at, w.errors, w.metadata, w.tags, w.unique_key, w.unique_states,
        w.callback_id, w.callback_timeout_at, w.run_lease, w.progress, w.ordering_key,
        w.fact_id, NULL::int, NULL::bigint, NULL::bigint, false
    FROM %1$s.done_entries w$q$, s),
        format($q$
    SELECT * FROM (
        SELECT DISTINCT ON (id) * FROM %1$s.job_facts ORDER BY id, fact_id DESC
    ) heads
    WHERE state IS NOT NULL$q$, s),
        format($q$
    SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
           heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
           metadata, tags, unique_key, unique_states,
           awa.callback_id_as_uuid(callback_id) AS callback_id, callback_timeout_at,
           NULL::text AS callback_filter, NULL::text AS callback_on_complete,
           NULL::text AS callback_on_fail, NULL::text AS callback_transform,
           run_lease, progress
    FROM %1$s.jobs_resolved
    WHERE state IN ('completed', 'failed', 'cancelled')$q$, s)];
    FOR i IN 1 .. array_length(v_names, 1) LOOP
        v_view := format('%s.%I', s, v_names[i]);
        IF to_regclass(v_view) IS NOT NULL THEN
            EXECUTE 'CREATE TEMPORARY VIEW awa_install_probe AS ' || v_bodies[i];
            EXECUTE 'SELECT pg_get_viewdef(to_regclass(''pg_temp.awa_install_probe''))'
                    ' = pg_get_viewdef(to_regclass($1))'
                INTO v_same USING v_view;
            DROP VIEW pg_temp.awa_install_probe;
            CONTINUE WHEN v_same;
        END IF;
        EXECUTE format('CREATE OR REPLACE VIEW %s AS %s', v_view, v_bodies[i]);
    END LOOP;
END
$views$;
