-- Operator repair of a queue-storage job through awa.jobs (the view's UPDATE and DELETE
-- triggers). Returns false, writing nothing, when the job changed since the statement
-- read it (a claim or a finalizer won the race), like the canonical view trigger.
--
-- A live attempt that stays live (e.g. a new deadline_at) is edited in its lease row,
-- written through the lease ring (awa.queue_storage_save_lease). Every other change
-- retires the head fact (a tombstone for an unclaimed ready row, under its lane's claim
-- head marked by awa.queue_storage_retire_lanes; a 'moved' closure for a live attempt;
-- the deferred row) and appends the new snapshot where its state lives; a delete of
-- terminal history appends a deletion marker. Closing an attempt leaves its lease row to
-- the slot's TRUNCATE.
--
-- Lock order (ADR 0006): a new ready snapshot's lane is locked before the old row's claim
-- head is marked, as every appender takes lanes before claim heads; the other way round,
-- two edits of one job, or an edit and an enqueue of that lane, deadlocked. A claim head is
-- inserted only for a lane that has none.
-- requires: awa.jobs
CREATE OR REPLACE FUNCTION awa.queue_storage_edit(
    p_schema text, p_old awa.jobs, p_new awa.jobs, p_delete boolean
) RETURNS boolean
LANGUAGE plpgsql
-- The statements below name the storage tables without their schema: the function sets
-- search_path to p_schema for its own run (restored when it returns, by this clause), so
-- they are planned once per session and schema rather than at every call (the read by id
-- over the whole ring took milliseconds to plan).
SET search_path = pg_catalog, pg_temp
AS $edit$
DECLARE
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
    v_saved  boolean;
    v_history boolean;
BEGIN
    PERFORM set_config('search_path', 'pg_catalog, ' || quote_ident(p_schema) || ', pg_temp',
        true);
    SELECT * INTO h FROM jobs_resolved r WHERE r.id = p_old.id;
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
        v_saved := awa.queue_storage_save_lease(p_schema, h.id, h.ready_slot, h.claim_id,
            p_new.state = 'waiting_external', coalesce(p_new.heartbeat_at, h.attempted_at),
            p_new.progress, p_new.metadata, v_cb, p_new.callback_timeout_at,
            p_new.deadline_at);
        v_rows := CASE WHEN v_saved THEN 1 ELSE 0 END;
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

    -- The lane a new ready snapshot goes to is locked before any claim head: the lock
    -- order is lanes, then claim_heads (ADR 0006, "Lock order"). Retiring an unclaimed
    -- head marks its lane's claim head first; taking the new lane after that deadlocked
    -- with a writer that held the lane and waited for the marked head: an enqueue making
    -- sure the head exists, or another edit of the same job (the second editor re-reads
    -- the job already moved into this lane, marks it, and then asks for the lane). The
    -- lane row is made if missing and locked without being changed (nothing is written
    -- to it when the edit then finds the head gone). A deferred or live head keeps its
    -- order (the deferred row or the closure first, the lane after), as promotion and the
    -- engine's retries take them; nobody waits for those while holding a lane.
    IF NOT p_delete AND p_new.state = 'available' THEN
        SELECT enqueue_shards INTO v_shards FROM awa.queue_meta WHERE queue = p_new.queue;
        v_shards := coalesce(v_shards, 1);
        IF v_shards <= 1 THEN
            v_shard := 0;
        ELSIF h.ordering_key IS NOT NULL THEN
            v_shard := awa.ordering_key_shard(h.ordering_key, v_shards);
        ELSE
            v_shard := (h.id % v_shards)::int;
        END IF;
        IF h.state = 'available' THEN
            INSERT INTO lanes AS l (queue, priority, shard, next_seq, tail_run_at,
                tail_job_id, disorder_seq)
            VALUES (p_new.queue, p_new.priority, v_shard, 0, NULL, NULL, -1)
            ON CONFLICT (queue, priority, shard) DO UPDATE SET next_seq = l.next_seq
            WHERE false;
        END IF;
    END IF;

    -- Retire the head fact.
    IF h.state = 'available' THEN
        SELECT e.queue, e.priority, e.shard INTO v_lane FROM ready_entries e
        WHERE e.slot = h.ready_slot AND e.fact_id = h.ready_fact;
        -- Gone from its slot since the read: prune moved it ahead into the current slot
        -- (ADR 0006, "Carry-forward of live rows", *A step at a time*).
        IF v_lane.queue IS NULL THEN
            RETURN false;
        END IF;
        -- Under the lane's claim-head lock no claimer is inside the lane, and the mark
        -- turns away a claimer whose snapshot predates this commit. A row that prune
        -- moved ahead while this waited for the lock is no longer in its slot.
        PERFORM awa.queue_storage_retire_lanes(p_schema, ARRAY[v_lane.queue],
            ARRAY[v_lane.priority], ARRAY[v_lane.shard]);
        SELECT EXISTS (SELECT 1 FROM claims c
                       WHERE c.slot = h.ready_slot AND c.ready_fact = h.ready_fact)
            OR EXISTS (SELECT 1 FROM tombstones t
                       WHERE t.slot = h.ready_slot AND t.ready_fact = h.ready_fact)
            OR NOT EXISTS (SELECT 1 FROM ready_entries e
                           WHERE e.slot = h.ready_slot AND e.fact_id = h.ready_fact)
        INTO v_taken;
        IF v_taken THEN
            RETURN false;
        END IF;
        INSERT INTO tombstones (slot, ready_fact, fact_id)
        VALUES (h.ready_slot, h.ready_fact, nextval('fact_seq'));
    ELSIF h.state IN ('scheduled', 'retryable') THEN
        DELETE FROM deferred_jobs d WHERE d.job_id = h.id AND d.fact_id = h.fact_id;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 0 THEN
            RETURN false;
        END IF;
    ELSIF h.state = ANY(v_live) THEN
        INSERT INTO closures (slot, claim_id, fact_id, queue, outcome, finalized_at)
        VALUES (h.ready_slot, h.claim_id, nextval('fact_seq'), h.queue, 'moved', v_now)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 0 THEN
            RETURN false;
        END IF;
        -- The lease row, if any, is left to its slot's TRUNCATE (it no longer resolves).
        -- The worker still running it must stop; its own finalization will be stale.
        PERFORM pg_notify('awa:cancel',
            json_build_object('job_id', h.id, 'run_lease', h.run_lease)::text);
    END IF;

    old_holds := h.unique_key IS NOT NULL AND awa.job_state_in_bitmask(h.unique_states, h.state);

    IF p_delete THEN
        -- A deferred job may keep a terminal fact below its deferred row (a child its
        -- parent's failure cancelled and the parent's retry brought back): without a
        -- marker it would be the job's head again.
        v_history := h.state IN ('completed', 'failed', 'cancelled');
        IF h.state IN ('scheduled', 'retryable') THEN
            SELECT EXISTS (SELECT 1 FROM done_entries e WHERE e.job_id = h.id) INTO v_history;
        END IF;
        IF v_history THEN
            INSERT INTO done_entries (slot, fact_id, state, job_id)
            SELECT r.current_slot, nextval('fact_seq'), NULL, h.id FROM ring_state r;
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
        -- Reserve one lane position and keep the lane's order key, as the engine does.
        INSERT INTO lanes AS l (queue, priority, shard, next_seq, tail_run_at,
            tail_job_id, disorder_seq)
        VALUES (v_job.queue, v_job.priority, v_shard, 1, v_job.run_at, v_job.id, -1)
        ON CONFLICT (queue, priority, shard) DO UPDATE SET
            next_seq = l.next_seq + 1,
            tail_run_at = CASE WHEN l.tail_run_at IS NULL
                OR (v_job.run_at, v_job.id) > (l.tail_run_at, l.tail_job_id)
                THEN v_job.run_at ELSE l.tail_run_at END,
            tail_job_id = CASE WHEN l.tail_run_at IS NULL
                OR (v_job.run_at, v_job.id) > (l.tail_run_at, l.tail_job_id)
                THEN v_job.id ELSE l.tail_job_id END,
            disorder_seq = CASE WHEN (l.tail_run_at IS NULL AND l.next_seq > 0)
                OR (v_job.run_at, v_job.id) < (l.tail_run_at, l.tail_job_id)
                THEN l.next_seq ELSE l.disorder_seq END
        RETURNING l.next_seq INTO v_seq;
        -- The claim head exists unless this lane was just made (under the lane lock
        -- held now); inserting over an existing head would wait for whoever is marking it.
        INSERT INTO claim_heads (queue, priority, shard, claim_seq)
        SELECT v_job.queue, v_job.priority, v_shard, 0
        WHERE NOT EXISTS (SELECT 1 FROM claim_heads c
                          WHERE c.queue = v_job.queue AND c.priority = v_job.priority
                            AND c.shard = v_shard)
        ON CONFLICT DO NOTHING;
        INSERT INTO ready_entries (slot, fact_id, shard, lane_seq, job_id, kind, queue, args, priority, attempt, max_attempts, run_at, heartbeat_at,
                deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
                unique_key, unique_states, callback_id, callback_timeout_at, run_lease,
                progress, ordering_key)
        SELECT r.current_slot, nextval('fact_seq'), v_shard, v_seq - 1,
                v_job.id, v_job.kind, v_job.queue, v_job.args, v_job.priority, v_job.attempt,
                v_job.max_attempts, v_job.run_at, v_job.heartbeat_at, v_job.deadline_at,
                v_job.attempted_at, v_job.finalized_at, v_job.created_at, v_job.errors,
                v_job.metadata, v_job.tags, v_job.unique_key, v_job.unique_states,
                v_job.callback_id, v_job.callback_timeout_at, v_job.run_lease, v_job.progress,
                v_job.ordering_key
        FROM ring_state r;
        PERFORM pg_notify(awa.wake_channel(v_job.queue), '');
    ELSIF v_job.state IN ('scheduled', 'retryable') THEN
        INSERT INTO deferred_jobs (fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at, heartbeat_at,
                deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
                unique_key, unique_states, callback_id, callback_timeout_at, run_lease,
                progress, ordering_key)
        SELECT nextval('fact_seq'), v_job.state,
                v_job.id, v_job.kind, v_job.queue, v_job.args, v_job.priority, v_job.attempt,
                v_job.max_attempts, v_job.run_at, v_job.heartbeat_at, v_job.deadline_at,
                v_job.attempted_at, v_job.finalized_at, v_job.created_at, v_job.errors,
                v_job.metadata, v_job.tags, v_job.unique_key, v_job.unique_states,
                v_job.callback_id, v_job.callback_timeout_at, v_job.run_lease, v_job.progress,
                v_job.ordering_key;
    ELSE
        INSERT INTO done_entries (slot, fact_id, state, job_id, kind, queue, args, priority, attempt, max_attempts, run_at, heartbeat_at,
                deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags,
                unique_key, unique_states, callback_id, callback_timeout_at, run_lease,
                progress, ordering_key)
        SELECT r.current_slot, nextval('fact_seq'), v_job.state,
                v_job.id, v_job.kind, v_job.queue, v_job.args, v_job.priority, v_job.attempt,
                v_job.max_attempts, v_job.run_at, v_job.heartbeat_at, v_job.deadline_at,
                v_job.attempted_at, v_job.finalized_at, v_job.created_at, v_job.errors,
                v_job.metadata, v_job.tags, v_job.unique_key, v_job.unique_states,
                v_job.callback_id, v_job.callback_timeout_at, v_job.run_lease, v_job.progress,
                v_job.ordering_key
        FROM ring_state r;
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
