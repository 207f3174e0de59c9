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
    v_saved  boolean;
    v_history boolean;
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
            EXECUTE format($q$
                INSERT INTO %s.lanes AS l (queue, priority, shard, next_seq, tail_run_at,
                    tail_job_id, disorder_seq)
                VALUES ($1, $2, $3, 0, NULL, NULL, -1)
                ON CONFLICT (queue, priority, shard) DO UPDATE SET next_seq = l.next_seq
                WHERE false$q$, s)
                USING p_new.queue, p_new.priority, v_shard;
        END IF;
    END IF;

    -- Retire the head fact.
    IF h.state = 'available' THEN
        EXECUTE format('SELECT queue, priority, shard FROM %s.ready_entries '
                       'WHERE slot = $1 AND fact_id = $2', s)
            INTO v_lane USING h.ready_slot, h.ready_fact;
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
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$s.claims '
                       'WHERE slot = $1 AND ready_fact = $2) '
                       'OR EXISTS (SELECT 1 FROM %1$s.tombstones '
                       'WHERE slot = $1 AND ready_fact = $2) '
                       'OR NOT EXISTS (SELECT 1 FROM %1$s.ready_entries '
                       'WHERE slot = $1 AND fact_id = $2)', s)
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
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s.done_entries WHERE job_id = $1)', s)
                INTO v_history USING h.id;
        END IF;
        IF v_history THEN
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
        -- The claim head exists unless this lane was just made (under the lane lock
        -- held now); inserting over an existing head would wait for whoever is marking it.
        EXECUTE format('INSERT INTO %1$s.claim_heads (queue, priority, shard, claim_seq) '
                       'SELECT $1, $2, $3, 0 WHERE NOT EXISTS (SELECT 1 FROM %1$s.claim_heads '
                       'WHERE queue = $1 AND priority = $2 AND shard = $3) '
                       'ON CONFLICT DO NOTHING', s)
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
        PERFORM pg_notify(awa.wake_channel(v_job.queue), '');
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
