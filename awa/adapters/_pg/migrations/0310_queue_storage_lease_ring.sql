-- Queue storage (ADR 0006): the lease ring.
--
-- Leases (the mutable state of attempts that heartbeat, report progress or wait for a
-- callback) move from one plain table into a ring of lease_slot_count LIST partitions on
-- lease_slot, so their churn comes back by TRUNCATE instead of VACUUM:
--
-- * ring_state.current_lease_slot / lease_generation / lease_rotated_at: the slot lease
--   writes go to, advanced by the maintenance leader's lease rotation.
-- * leases is rebuilt as a partitioned table (children leases_<slot>); rows that exist
--   survive in the current lease slot. A lease row matches its attempt by
--   (job_id, run_lease, claim_id) and only while the claim is open, so closing an attempt
--   no longer deletes it: the row dies with its slot.
-- * awa.queue_storage_lock_leases serialises lease writers of one attempt (a partitioned
--   table has no unique key on (job_id, run_lease) alone); awa.queue_storage_save_lease
--   writes a whole lease row into the current slot, moving it out of an older one.
-- * awa.queue_storage_edit (the awa.jobs triggers) writes leases through it.

CREATE FUNCTION awa.queue_storage_lock_leases(p_schema text, p_job_ids bigint[]) RETURNS int
LANGUAGE plpgsql AS $lock$
DECLARE
    v_slot int;
BEGIN
    -- Transaction-scoped, in job id order; the two-key form never meets the one-key
    -- advisory locks used elsewhere.
    PERFORM pg_advisory_xact_lock(hashtext('awa.lease:' || p_schema), (i.id % 2147483647)::int)
    FROM (SELECT DISTINCT id FROM unnest(p_job_ids) AS u(id) ORDER BY id) i;
    -- Read after the locks: a writer that waited sees the slot a rotation moved to.
    EXECUTE format('SELECT current_lease_slot FROM %s.ring_state', quote_ident(p_schema))
        INTO v_slot;
    RETURN v_slot;
END
$lock$;

-- Write the whole lease of an open attempt (claim p_claim_slot / p_claim_id) into the
-- current lease slot: in place when it is already there, otherwise moving it out of an
-- older slot (or materialising it). Returns false, writing nothing, when the claim is
-- closed.
CREATE FUNCTION awa.queue_storage_save_lease(
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

CREATE FUNCTION awa.queue_storage_upgrade_lease_ring(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s         text := quote_ident(p_schema);
    v_count   int;
    v_current int;
    i         int;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));

    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = format('%s.ring_state', s)::regclass
          AND attname = 'current_lease_slot'
    ) THEN
        EXECUTE format($q$
            ALTER TABLE %1$s.ring_state
                ADD COLUMN current_lease_slot int NOT NULL DEFAULT 0,
                ADD COLUMN lease_generation bigint NOT NULL DEFAULT 0,
                ADD COLUMN lease_rotated_at timestamptz$q$, s);
    END IF;

    IF (SELECT relkind FROM pg_class WHERE oid = format('%s.leases', s)::regclass) = 'p' THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT lease_slot_count, current_lease_slot FROM %s.ring_state', s)
        INTO v_count, v_current;

    -- Rebuild: the plain table steps aside, the ring takes its name and its rows, the
    -- resolution view is pointed at the ring, and the plain table goes.
    EXECUTE format('LOCK TABLE %s.leases IN ACCESS EXCLUSIVE MODE', s);
    EXECUTE format('ALTER TABLE %s.leases RENAME TO leases_plain', s);
    EXECUTE format($q$
        CREATE TABLE %1$s.leases (
            lease_slot          int NOT NULL,
            job_id              bigint NOT NULL,
            run_lease           bigint NOT NULL,
            claim_slot          int NOT NULL,
            claim_id            bigint NOT NULL,
            queue               text NOT NULL,
            waiting             boolean NOT NULL DEFAULT false,
            heartbeat_at        timestamptz NOT NULL,
            progress            jsonb,
            metadata            jsonb NOT NULL,
            callback_id         text,
            callback_timeout_at timestamptz,
            deadline_at         timestamptz
        ) PARTITION BY LIST (lease_slot)$q$, s);
    FOR i IN 0 .. v_count - 1 LOOP
        -- Room on the page keeps a heartbeat's in-place update HOT.
        EXECUTE format('CREATE TABLE %1$s.%2$I PARTITION OF %1$s.leases FOR VALUES IN (%3$s) '
                       'WITH (fillfactor = 70)', s, 'leases_' || i, i);
    END LOOP;
    EXECUTE format($q$
        INSERT INTO %1$s.leases (lease_slot, job_id, run_lease, claim_slot, claim_id, queue,
            waiting, heartbeat_at, progress, metadata, callback_id, callback_timeout_at,
            deadline_at)
        SELECT $1, job_id, run_lease, claim_slot, claim_id, queue, waiting, heartbeat_at,
            progress, metadata, callback_id, callback_timeout_at, deadline_at
        FROM %1$s.leases_plain$q$, s) USING v_current;

    -- Same columns as before; a lease matches its attempt by claim as well.
    EXECUTE format($q$
        CREATE OR REPLACE VIEW %1$s.job_facts AS
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
        FROM %1$s.done_entries w$q$, s);
    EXECUTE format('DROP TABLE %s.leases_plain', s);
    -- (job_id, run_lease) first: every lookup names the attempt, never the slot.
    EXECUTE format('ALTER TABLE %s.leases ADD PRIMARY KEY (job_id, run_lease, lease_slot)', s);
    EXECUTE format('CREATE INDEX ON %s.leases (callback_id) WHERE callback_id IS NOT NULL', s);
END
$upgrade$;

CREATE OR REPLACE FUNCTION awa.install_queue_storage(
    p_schema text DEFAULT 'awa',
    p_queue_slot_count int DEFAULT 16,
    p_lease_slot_count int DEFAULT 8,
    p_reset boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql AS $install$
BEGIN
    PERFORM awa.install_queue_storage_tables(
        p_schema, p_queue_slot_count, p_lease_slot_count, p_reset);
    PERFORM awa.queue_storage_upgrade(p_schema);
    PERFORM awa.queue_storage_upgrade_claim_probe(p_schema);
    PERFORM awa.queue_storage_upgrade_lease_ring(p_schema);
END
$install$;

-- Operator edits of a live attempt write its lease through the ring; closing an attempt
-- leaves its lease row to the slot's TRUNCATE. Otherwise as in 0102.
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
        -- The lease row, if any, is left to its slot's TRUNCATE (it no longer resolves).
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


SELECT awa.queue_storage_upgrade_lease_ring(n.nspname)
FROM pg_namespace n
WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') IS NOT NULL
ORDER BY n.nspname;
