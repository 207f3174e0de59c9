-- awa.jobs covers every plane (SQL_SURFACE.md, ADR 0006): the canonical rows, the
-- queue-storage jobs of schema awa, and those of a non-default queue-storage schema that
-- producers currently write to. UPDATE and DELETE through the view work on queue-storage
-- jobs by appending facts (tombstones, closures, new snapshots, deletion markers); no
-- immutable row is ever rewritten. INSERT through the view stays canonical-only.

-- A non-default queue-storage schema named by the storage transition, or NULL.
CREATE FUNCTION awa.queue_storage_extra_schema() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT t.s FROM (
        SELECT CASE WHEN state IN ('mixed_transition', 'active')
                    THEN nullif(details ->> 'schema', '') END AS s
        FROM awa.storage_transition_state
    ) t
    WHERE t.s IS NOT NULL AND t.s <> 'awa'
      AND to_regclass(quote_ident(t.s) || '.jobs_resolved') IS NOT NULL
$$;

-- The queue-storage jobs of p_schema in the awa.jobs column layout (none for NULL).
CREATE FUNCTION awa.queue_storage_jobs(p_schema text) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt smallint, max_attempts smallint, run_at timestamptz, heartbeat_at timestamptz,
    deadline_at timestamptz, attempted_at timestamptz, finalized_at timestamptz,
    created_at timestamptz, errors jsonb[], metadata jsonb, tags text[], unique_key bytea,
    unique_states bit(8), callback_id uuid, callback_timeout_at timestamptz,
    callback_filter text, callback_on_complete text, callback_on_fail text,
    callback_transform text, run_lease bigint, progress jsonb
)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_schema IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($q$
        SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
               heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
               metadata, tags, unique_key, unique_states,
               awa.callback_id_as_uuid(callback_id), callback_timeout_at,
               NULL::text, NULL::text, NULL::text, NULL::text, run_lease, progress
        FROM %s.jobs_resolved$q$, quote_ident(p_schema));
END
$$;

CREATE OR REPLACE VIEW awa.jobs AS
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, awa.callback_id_as_uuid(callback_id) AS callback_id, callback_timeout_at,
    callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
    progress
FROM awa.canonical_jobs
UNION ALL
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states::bit(8), awa.callback_id_as_uuid(callback_id), callback_timeout_at,
    NULL::text, NULL::text, NULL::text, NULL::text, run_lease, progress
FROM awa.jobs_resolved
UNION ALL
-- Typmods do not survive a set-returning function; the casts keep the view's column types.
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states::bit(8), callback_id, callback_timeout_at, callback_filter,
    callback_on_complete, callback_on_fail, callback_transform, run_lease, progress
FROM awa.queue_storage_jobs(awa.queue_storage_extra_schema());

-- Add signed deltas to a queue-storage schema's counters (last locks, in key order).
CREATE FUNCTION awa.queue_storage_count(
    p_schema text, p_queues text[], p_states awa.job_state[], p_deltas bigint[],
    p_completed_queues text[], p_completed_at timestamptz[], p_completed_deltas bigint[]
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    s text := quote_ident(p_schema);
BEGIN
    EXECUTE format($q$
        INSERT INTO %s.queue_counts AS c (queue, state, bucket, n)
        SELECT q, st, (pg_backend_pid() %% 8)::smallint, sum(d)
        FROM unnest($1, $2, $3) AS i(q, st, d)
        GROUP BY q, st HAVING sum(d) <> 0
        ORDER BY q, st
        ON CONFLICT (queue, state, bucket) DO UPDATE SET n = c.n + EXCLUDED.n$q$, s)
        USING p_queues, p_states, p_deltas;
    EXECUTE format($q$
        INSERT INTO %s.completions AS c (queue, minute, bucket, n)
        SELECT q, date_trunc('minute', fin AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
               (pg_backend_pid() %% 8)::smallint, sum(d)
        FROM unnest($1, $2, $3) AS i(q, fin, d)
        WHERE fin IS NOT NULL
        GROUP BY 1, 2 HAVING sum(d) <> 0
        ORDER BY 1, 2
        ON CONFLICT (queue, minute, bucket) DO UPDATE SET n = c.n + EXCLUDED.n$q$, s)
        USING p_completed_queues, p_completed_at, p_completed_deltas;
END
$$;

-- Operator repair (p_new) or removal (p_delete) of one queue-storage job. Returns
-- false, writing nothing, when the job is gone or its head changed since the statement
-- read it (a claim or a finalizer won the race), like the canonical view trigger.
--
-- A live attempt that stays live (e.g. a new deadline_at) is edited in its lease row, the
-- engine's mutable per-attempt state. Every other change retires the head fact (a
-- tombstone for an unclaimed ready row under its lane's claim-head lock, a 'moved'
-- closure for a live attempt, the deferred row) and appends the new snapshot where its
-- state lives; a delete of terminal history appends a deletion marker.
CREATE FUNCTION awa.queue_storage_edit(
    p_schema text, p_old awa.jobs, p_new awa.jobs, p_delete boolean
) RETURNS boolean
LANGUAGE plpgsql AS $edit$
DECLARE
    s        text := quote_ident(p_schema);
    seq      text := quote_ident(p_schema) || '.fact_seq';
    h        record;
    v_job    awa.canonical_jobs;
    v_rows   bigint;
    v_taken  boolean;
    v_lane   record;
    v_shards int;
    v_shard  int;
    v_seq    bigint;
    v_now    timestamptz := now();
    v_live   awa.job_state[] := ARRAY['running', 'waiting_external']::awa.job_state[];
    v_cb     text;
    old_holds boolean;
    new_holds boolean;
BEGIN
    EXECUTE format('SELECT * FROM %s.jobs_resolved WHERE id = $1', s) INTO h USING p_old.id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows = 0 OR h.state IS DISTINCT FROM p_old.state
        OR h.run_lease IS DISTINCT FROM p_old.run_lease THEN
        RETURN false;
    END IF;
    v_cb := CASE WHEN p_new.callback_id IS DISTINCT FROM p_old.callback_id
                 THEN p_new.callback_id::text ELSE h.callback_id END;

    -- A live attempt staying live: only its lease-held fields may change.
    IF NOT p_delete AND h.state = ANY(v_live) AND p_new.state = ANY(v_live) THEN
        IF (p_new.id, p_new.kind, p_new.queue, p_new.args, p_new.priority, p_new.attempt,
            p_new.max_attempts, p_new.run_at, p_new.attempted_at, p_new.finalized_at,
            p_new.created_at, p_new.errors, p_new.tags, p_new.unique_key,
            p_new.unique_states, p_new.run_lease)
           IS DISTINCT FROM
           (p_old.id, p_old.kind, p_old.queue, p_old.args, p_old.priority, p_old.attempt,
            p_old.max_attempts, p_old.run_at, p_old.attempted_at, p_old.finalized_at,
            p_old.created_at, p_old.errors, p_old.tags, p_old.unique_key,
            p_old.unique_states, p_old.run_lease) THEN
            RAISE EXCEPTION 'a live queue-storage attempt can only change its state, '
                'deadline_at, heartbeat_at, metadata, progress and callback fields'
                USING ERRCODE = 'feature_not_supported';
        END IF;
        EXECUTE format($q$
            INSERT INTO %1$s.leases AS l (job_id, run_lease, claim_slot, claim_id, queue,
                waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
                deadline_at)
            SELECT c.job_id, c.run_lease, c.slot, c.claim_id, c.queue, $3, $4, $5, $6, $7,
                $8, $9
            FROM %1$s.claims c
            WHERE c.slot = $1 AND c.claim_id = $2
              AND NOT EXISTS (SELECT 1 FROM %1$s.closures x
                              WHERE x.slot = c.slot AND x.claim_id = c.claim_id)
            ON CONFLICT (job_id, run_lease) DO UPDATE SET
                waiting = EXCLUDED.waiting, heartbeat_at = EXCLUDED.heartbeat_at,
                progress = EXCLUDED.progress, metadata = EXCLUDED.metadata,
                callback_id = EXCLUDED.callback_id,
                callback_timeout_at = EXCLUDED.callback_timeout_at,
                deadline_at = EXCLUDED.deadline_at$q$, s)
            USING h.ready_slot, h.claim_id, p_new.state = 'waiting_external',
                coalesce(p_new.heartbeat_at, h.attempted_at), p_new.progress,
                p_new.metadata, v_cb, p_new.callback_timeout_at, p_new.deadline_at;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows > 0 AND p_new.state <> h.state THEN
            PERFORM awa.queue_storage_count(p_schema,
                ARRAY[h.queue, h.queue], ARRAY[h.state, p_new.state], ARRAY[-1, 1]::bigint[],
                '{}', '{}', '{}');
        END IF;
        RETURN v_rows > 0;
    END IF;
    IF NOT p_delete AND p_new.state = ANY(v_live) THEN
        RAISE EXCEPTION 'only a worker claim starts a queue-storage attempt'
            USING ERRCODE = 'feature_not_supported';
    END IF;

    -- Retire the head fact.
    IF h.state = 'available' THEN
        EXECUTE format('SELECT queue, priority, shard FROM %s.ready_entries '
                       'WHERE slot = $1 AND fact_id = $2', s)
            INTO v_lane USING h.ready_slot, h.ready_fact;
        -- Under the lane's claim-head lock no claimer is inside the lane.
        EXECUTE format('SELECT 1 FROM %s.claim_heads WHERE queue = $1 AND priority = $2 '
                       'AND shard = $3 FOR UPDATE', s)
            USING v_lane.queue, v_lane.priority, v_lane.shard;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$s.claims '
                       'WHERE slot = $1 AND ready_fact = $2) '
                       'OR EXISTS (SELECT 1 FROM %1$s.tombstones '
                       'WHERE slot = $1 AND ready_fact = $2)', s)
            INTO v_taken USING h.ready_slot, h.ready_fact;
        IF v_taken THEN
            RETURN false;
        END IF;
        EXECUTE format('INSERT INTO %s.tombstones (slot, ready_fact, fact_id) '
                       'VALUES ($1, $2, nextval(%L))', s, seq)
            USING h.ready_slot, h.ready_fact;
    ELSIF h.state IN ('scheduled', 'retryable') THEN
        EXECUTE format('DELETE FROM %s.deferred_jobs WHERE job_id = $1 AND fact_id = $2', s)
            USING h.id, h.fact_id;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 0 THEN
            RETURN false;
        END IF;
    ELSIF h.state = ANY(v_live) THEN
        EXECUTE format('INSERT INTO %s.closures (slot, claim_id, fact_id, queue, outcome, '
                       'finalized_at) VALUES ($1, $2, nextval(%L), $3, ''moved'', $4) '
                       'ON CONFLICT DO NOTHING', s, seq)
            USING h.ready_slot, h.claim_id, h.queue, v_now;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 0 THEN
            RETURN false;
        END IF;
        EXECUTE format('DELETE FROM %s.leases WHERE job_id = $1 AND run_lease = $2', s)
            USING h.id, h.run_lease;
        -- The worker still running it must stop; its own finalization will be stale.
        PERFORM pg_notify('awa:cancel',
            json_build_object('job_id', h.id, 'run_lease', h.run_lease)::text);
    END IF;

    old_holds := h.unique_key IS NOT NULL AND awa.job_state_in_bitmask(h.unique_states, h.state);

    IF p_delete THEN
        IF h.state IN ('completed', 'failed', 'cancelled') THEN
            EXECUTE format('INSERT INTO %1$s.done_entries (slot, fact_id, state, job_id) '
                           'SELECT current_slot, nextval(%2$L), NULL, $1 '
                           'FROM %1$s.ring_state', s, seq)
                USING h.id;
        END IF;
        IF old_holds THEN
            DELETE FROM awa.job_unique_claims WHERE unique_key = h.unique_key AND job_id = h.id;
        END IF;
        PERFORM awa.queue_storage_count(p_schema,
            ARRAY[h.queue], ARRAY[h.state], ARRAY[-1]::bigint[],
            CASE WHEN h.state = 'completed' THEN ARRAY[h.queue] ELSE '{}' END,
            CASE WHEN h.state = 'completed' THEN ARRAY[h.finalized_at] ELSE '{}' END,
            CASE WHEN h.state = 'completed' THEN ARRAY[-1]::bigint[] ELSE '{}' END);
        RETURN true;
    END IF;

    -- The new snapshot, appended where its state lives.
    v_job.id := h.id;
    v_job.kind := p_new.kind;
    v_job.queue := p_new.queue;
    v_job.args := p_new.args;
    v_job.state := p_new.state;
    v_job.priority := p_new.priority;
    v_job.attempt := p_new.attempt;
    v_job.max_attempts := p_new.max_attempts;
    v_job.run_at := p_new.run_at;
    v_job.heartbeat_at := p_new.heartbeat_at;
    v_job.deadline_at := p_new.deadline_at;
    v_job.attempted_at := p_new.attempted_at;
    v_job.finalized_at := p_new.finalized_at;
    v_job.created_at := p_new.created_at;
    v_job.errors := p_new.errors;
    v_job.metadata := p_new.metadata;
    v_job.tags := p_new.tags;
    v_job.unique_key := p_new.unique_key;
    v_job.unique_states := p_new.unique_states;
    v_job.callback_id := v_cb;
    v_job.callback_timeout_at := p_new.callback_timeout_at;
    v_job.run_lease := p_new.run_lease;
    v_job.progress := p_new.progress;
    v_job.ordering_key := h.ordering_key;

    IF v_job.state = 'available' THEN
        SELECT enqueue_shards INTO v_shards FROM awa.queue_meta WHERE queue = v_job.queue;
        v_shards := coalesce(v_shards, 1);
        IF v_shards <= 1 THEN
            v_shard := 0;
        ELSIF v_job.ordering_key IS NOT NULL THEN
            v_shard := awa.ordering_key_shard(v_job.ordering_key, v_shards);
        ELSE
            v_shard := (v_job.id % v_shards)::int;
        END IF;
        -- Reserve one lane position and keep the lane's order key, as the engine does.
        EXECUTE format($q$
            INSERT INTO %s.lanes AS l (queue, priority, shard, next_seq, tail_run_at,
                tail_job_id, disorder_seq)
            VALUES ($1, $2, $3, 1, $4, $5, -1)
            ON CONFLICT (queue, priority, shard) DO UPDATE SET
                next_seq = l.next_seq + 1,
                tail_run_at = CASE WHEN l.tail_run_at IS NULL
                    OR ($4, $5) > (l.tail_run_at, l.tail_job_id)
                    THEN $4 ELSE l.tail_run_at END,
                tail_job_id = CASE WHEN l.tail_run_at IS NULL
                    OR ($4, $5) > (l.tail_run_at, l.tail_job_id)
                    THEN $5 ELSE l.tail_job_id END,
                disorder_seq = CASE WHEN (l.tail_run_at IS NULL AND l.next_seq > 0)
                    OR ($4, $5) < (l.tail_run_at, l.tail_job_id)
                    THEN l.next_seq ELSE l.disorder_seq END
            RETURNING next_seq$q$, s)
            INTO v_seq USING v_job.queue, v_job.priority, v_shard, v_job.run_at, v_job.id;
        EXECUTE format('INSERT INTO %s.claim_heads (queue, priority, shard, claim_seq) '
                       'VALUES ($1, $2, $3, 0) ON CONFLICT DO NOTHING', s)
            USING v_job.queue, v_job.priority, v_shard;
        EXECUTE format($q$
            INSERT INTO %1$s.ready_entries (slot, fact_id, shard, lane_seq, job_id, kind,
                queue, args, priority, attempt, max_attempts, run_at, heartbeat_at,
                deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
                unique_key, unique_states, callback_id, callback_timeout_at, run_lease,
                progress, ordering_key)
            SELECT r.current_slot, nextval(%2$L), $2, $3, ($1).id, ($1).kind, ($1).queue,
                ($1).args, ($1).priority, ($1).attempt, ($1).max_attempts, ($1).run_at,
                ($1).heartbeat_at, ($1).deadline_at, ($1).attempted_at, ($1).finalized_at,
                ($1).created_at, ($1).errors, ($1).metadata, ($1).tags, ($1).unique_key,
                ($1).unique_states, ($1).callback_id, ($1).callback_timeout_at,
                ($1).run_lease, ($1).progress, ($1).ordering_key
            FROM %1$s.ring_state r$q$, s, seq)
            USING v_job, v_shard, v_seq - 1;
        PERFORM pg_notify('awa:' || v_job.queue, '');
    ELSIF v_job.state IN ('scheduled', 'retryable') THEN
        EXECUTE format($q$
            INSERT INTO %1$s.deferred_jobs (fact_id, state, job_id, kind, queue, args,
                priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at,
                attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
                unique_states, callback_id, callback_timeout_at, run_lease, progress,
                ordering_key)
            SELECT nextval(%2$L), ($1).state, ($1).id, ($1).kind, ($1).queue, ($1).args,
                ($1).priority, ($1).attempt, ($1).max_attempts, ($1).run_at,
                ($1).heartbeat_at, ($1).deadline_at, ($1).attempted_at, ($1).finalized_at,
                ($1).created_at, ($1).errors, ($1).metadata, ($1).tags, ($1).unique_key,
                ($1).unique_states, ($1).callback_id, ($1).callback_timeout_at,
                ($1).run_lease, ($1).progress, ($1).ordering_key$q$, s, seq)
            USING v_job;
    ELSE
        EXECUTE format($q$
            INSERT INTO %1$s.done_entries (slot, fact_id, state, job_id, kind, queue, args,
                priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at,
                attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
                unique_states, callback_id, callback_timeout_at, run_lease, progress,
                ordering_key)
            SELECT r.current_slot, nextval(%2$L), ($1).state, ($1).id, ($1).kind,
                ($1).queue, ($1).args, ($1).priority, ($1).attempt, ($1).max_attempts,
                ($1).run_at, ($1).heartbeat_at, ($1).deadline_at, ($1).attempted_at,
                ($1).finalized_at, ($1).created_at, ($1).errors, ($1).metadata, ($1).tags,
                ($1).unique_key, ($1).unique_states, ($1).callback_id,
                ($1).callback_timeout_at, ($1).run_lease, ($1).progress, ($1).ordering_key
            FROM %1$s.ring_state r$q$, s, seq)
            USING v_job;
    END IF;

    new_holds := v_job.unique_key IS NOT NULL
        AND awa.job_state_in_bitmask(v_job.unique_states, v_job.state);
    IF old_holds AND NOT (new_holds AND v_job.unique_key = h.unique_key) THEN
        DELETE FROM awa.job_unique_claims WHERE unique_key = h.unique_key AND job_id = h.id;
    END IF;
    IF new_holds AND NOT (old_holds AND v_job.unique_key = h.unique_key) THEN
        INSERT INTO awa.job_unique_claims (unique_key, job_id) VALUES (v_job.unique_key, v_job.id);
    END IF;
    PERFORM awa.queue_storage_count(p_schema,
        ARRAY[h.queue, v_job.queue], ARRAY[h.state, v_job.state], ARRAY[-1, 1]::bigint[],
        ARRAY[h.queue, v_job.queue],
        ARRAY[CASE WHEN h.state = 'completed' THEN h.finalized_at END,
              CASE WHEN v_job.state = 'completed' THEN v_job.finalized_at END],
        ARRAY[-1, 1]::bigint[]);
    RETURN true;
END
$edit$;

-- Which plane holds a job the view returned: 'canonical', a queue-storage schema, or NULL.
CREATE FUNCTION awa.job_plane(p_id bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_extra text := awa.queue_storage_extra_schema();
    v_found boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM awa.canonical_jobs WHERE id = p_id) THEN
        RETURN 'canonical';
    END IF;
    IF EXISTS (SELECT 1 FROM awa.jobs_resolved WHERE id = p_id) THEN
        RETURN 'awa';
    END IF;
    IF v_extra IS NOT NULL THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s.jobs_resolved WHERE id = $1)',
                       quote_ident(v_extra))
            INTO v_found USING p_id;
        IF v_found THEN
            RETURN v_extra;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- Operator repair through the view: canonical rows as before (rewritten only if the
-- attempt identity the statement read is still current), queue-storage jobs by facts.
CREATE OR REPLACE FUNCTION awa.jobs_view_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_plane text := awa.job_plane(OLD.id);
BEGIN
    IF v_plane IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_plane <> 'canonical' THEN
        IF NOT awa.queue_storage_edit(v_plane, OLD, NEW, false) THEN
            RETURN NULL;
        END IF;
        RETURN NEW;
    END IF;
    UPDATE awa.canonical_jobs AS j SET
        kind = NEW.kind,
        queue = NEW.queue,
        args = NEW.args,
        state = NEW.state,
        priority = NEW.priority,
        attempt = NEW.attempt,
        max_attempts = NEW.max_attempts,
        run_at = NEW.run_at,
        heartbeat_at = NEW.heartbeat_at,
        deadline_at = NEW.deadline_at,
        attempted_at = NEW.attempted_at,
        finalized_at = NEW.finalized_at,
        created_at = NEW.created_at,
        errors = NEW.errors,
        metadata = NEW.metadata,
        tags = NEW.tags,
        unique_key = NEW.unique_key,
        unique_states = NEW.unique_states,
        callback_id = CASE
            WHEN NEW.callback_id IS DISTINCT FROM OLD.callback_id THEN NEW.callback_id::text
            ELSE j.callback_id
        END,
        callback_timeout_at = NEW.callback_timeout_at,
        callback_filter = NEW.callback_filter,
        callback_on_complete = NEW.callback_on_complete,
        callback_on_fail = NEW.callback_on_fail,
        callback_transform = NEW.callback_transform,
        run_lease = NEW.run_lease,
        progress = NEW.progress
    WHERE j.id = OLD.id
      AND j.state = OLD.state
      AND j.run_lease = OLD.run_lease
      AND awa.callback_id_as_uuid(j.callback_id) IS NOT DISTINCT FROM OLD.callback_id
    RETURNING
        j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt, j.max_attempts,
        j.run_at, j.heartbeat_at, j.deadline_at, j.attempted_at, j.finalized_at,
        j.created_at, j.errors, j.metadata, j.tags, j.unique_key, j.unique_states,
        awa.callback_id_as_uuid(j.callback_id), j.callback_timeout_at, j.callback_filter,
        j.callback_on_complete, j.callback_on_fail, j.callback_transform, j.run_lease,
        j.progress
    INTO NEW;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- An operator cancelling a live attempt tells its worker, as the Python API does.
    IF NEW.state = 'cancelled' AND OLD.state IN ('running', 'waiting_external') THEN
        PERFORM pg_notify(
            'awa:cancel',
            json_build_object('job_id', NEW.id, 'run_lease', NEW.run_lease)::text
        );
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION awa.jobs_view_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_plane text := awa.job_plane(OLD.id);
BEGIN
    IF v_plane IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_plane <> 'canonical' THEN
        IF NOT awa.queue_storage_edit(v_plane, OLD, OLD, true) THEN
            RETURN NULL;
        END IF;
        RETURN OLD;
    END IF;
    DELETE FROM awa.canonical_jobs WHERE id = OLD.id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END
$$;
