-- The public SQL surface over canonical storage: unique-claim and wake-up triggers, the
-- awa.jobs view with INSTEAD OF triggers, and awa.insert_job_compat.

-- A job holds its unique key exactly while its state is in its mask.
CREATE FUNCTION awa.canonical_jobs_sync_unique_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_holds boolean := false;
    new_holds boolean := false;
    same_key  boolean := false;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        old_holds := OLD.unique_key IS NOT NULL
            AND awa.job_state_in_bitmask(OLD.unique_states, OLD.state);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        new_holds := NEW.unique_key IS NOT NULL
            AND awa.job_state_in_bitmask(NEW.unique_states, NEW.state);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        same_key := OLD.unique_key IS NOT DISTINCT FROM NEW.unique_key AND OLD.id = NEW.id;
    END IF;
    IF old_holds AND NOT (new_holds AND same_key) THEN
        DELETE FROM awa.job_unique_claims
        WHERE unique_key = OLD.unique_key AND job_id = OLD.id;
    END IF;
    IF new_holds AND NOT (old_holds AND same_key) THEN
        -- A clash raises unique_violation on job_unique_claims_pkey, which callers map to
        -- a unique conflict; the whole statement (and so the whole batch) is undone.
        INSERT INTO awa.job_unique_claims (unique_key, job_id) VALUES (NEW.unique_key, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER canonical_jobs_unique_claim_insert
    AFTER INSERT ON awa.canonical_jobs
    FOR EACH ROW WHEN (NEW.unique_key IS NOT NULL)
    EXECUTE FUNCTION awa.canonical_jobs_sync_unique_claim();

CREATE TRIGGER canonical_jobs_unique_claim_update
    AFTER UPDATE OF state, unique_key, unique_states ON awa.canonical_jobs
    FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL OR NEW.unique_key IS NOT NULL)
    EXECUTE FUNCTION awa.canonical_jobs_sync_unique_claim();

CREATE TRIGGER canonical_jobs_unique_claim_delete
    AFTER DELETE ON awa.canonical_jobs
    FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL)
    EXECUTE FUNCTION awa.canonical_jobs_sync_unique_claim();

-- New ready work wakes the queue's dispatchers. NOTIFY is delivered at commit and
-- duplicates within one transaction collapse, so a batch insert sends one per queue.
CREATE FUNCTION awa.canonical_jobs_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awa:' || NEW.queue, '');
    RETURN NULL;
END
$$;

CREATE TRIGGER canonical_jobs_notify_ready_insert
    AFTER INSERT ON awa.canonical_jobs
    FOR EACH ROW WHEN (NEW.state = 'available')
    EXECUTE FUNCTION awa.canonical_jobs_notify_ready();

CREATE TRIGGER canonical_jobs_notify_ready_update
    AFTER UPDATE OF state, queue ON awa.canonical_jobs
    FOR EACH ROW WHEN (
        NEW.state = 'available'
        AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.queue IS DISTINCT FROM NEW.queue)
    )
    EXECUTE FUNCTION awa.canonical_jobs_notify_ready();

-- The public job view. Later engines redefine it as a union; the column list is a contract.
CREATE VIEW awa.jobs AS
SELECT
    id,
    kind,
    queue,
    args,
    state,
    priority,
    attempt,
    max_attempts,
    run_at,
    heartbeat_at,
    deadline_at,
    attempted_at,
    finalized_at,
    created_at,
    errors,
    metadata,
    tags,
    unique_key,
    unique_states,
    awa.callback_id_as_uuid(callback_id) AS callback_id,
    callback_timeout_at,
    callback_filter,
    callback_on_complete,
    callback_on_fail,
    callback_transform,
    run_lease,
    progress
FROM awa.canonical_jobs;

CREATE FUNCTION awa.jobs_view_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
BEGIN
    INSERT INTO awa.canonical_jobs (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
        heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
        metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at,
        callback_filter, callback_on_complete, callback_on_fail, callback_transform,
        run_lease, progress
    ) VALUES (
        coalesce(NEW.id, nextval('awa.jobs_id_seq')),
        NEW.kind,
        coalesce(NEW.queue, 'default'),
        coalesce(NEW.args, '{}'::jsonb),
        coalesce(NEW.state, 'available'),
        coalesce(NEW.priority, 2),
        coalesce(NEW.attempt, 0),
        coalesce(NEW.max_attempts, 25),
        coalesce(NEW.run_at, v_now),
        NEW.heartbeat_at,
        NEW.deadline_at,
        NEW.attempted_at,
        NEW.finalized_at,
        coalesce(NEW.created_at, v_now),
        coalesce(NEW.errors, '{}'::jsonb[]),
        coalesce(NEW.metadata, '{}'::jsonb),
        coalesce(NEW.tags, '{}'::text[]),
        NEW.unique_key,
        coalesce(NEW.unique_states, B'11111000'),
        NEW.callback_id::text,
        NEW.callback_timeout_at,
        NEW.callback_filter,
        NEW.callback_on_complete,
        NEW.callback_on_fail,
        NEW.callback_transform,
        coalesce(NEW.run_lease, 0),
        NEW.progress
    )
    RETURNING
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
        heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
        metadata, tags, unique_key, unique_states, awa.callback_id_as_uuid(callback_id),
        callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
        callback_transform, run_lease, progress
    INTO NEW;
    RETURN NEW;
END
$$;

-- Operator repair through the view. The row is rewritten only if the attempt identity the
-- statement read (state, run_lease, callback_id) is still current, so a repair racing a
-- claim or a finalization changes nothing instead of clobbering the newer attempt.
CREATE FUNCTION awa.jobs_view_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
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

CREATE FUNCTION awa.jobs_view_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM awa.canonical_jobs WHERE id = OLD.id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER jobs_view_insert
    INSTEAD OF INSERT ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.jobs_view_insert();

CREATE TRIGGER jobs_view_update
    INSTEAD OF UPDATE ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.jobs_view_update();

CREATE TRIGGER jobs_view_delete
    INSTEAD OF DELETE ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.jobs_view_delete();

-- The SQL producer contract. Runs in the caller's transaction and uses the database clock.
CREATE FUNCTION awa.insert_job_compat(
    p_kind text,
    p_queue text DEFAULT 'default',
    p_args jsonb DEFAULT '{}',
    p_state awa.job_state DEFAULT 'available',
    p_priority smallint DEFAULT 2,
    p_max_attempts smallint DEFAULT 25,
    p_run_at timestamptz DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_tags text[] DEFAULT '{}',
    p_unique_key bytea DEFAULT NULL,
    p_unique_states bit(8) DEFAULT NULL,
    p_ordering_key bytea DEFAULT NULL
) RETURNS awa.jobs
LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := now();
    v_state awa.job_state := coalesce(p_state, 'available');
    v_row   awa.jobs;
BEGIN
    IF v_state = 'available' AND p_run_at IS NOT NULL AND p_run_at > v_now THEN
        v_state := 'scheduled';
    END IF;
    INSERT INTO awa.canonical_jobs (
        kind, queue, args, state, priority, max_attempts, run_at, finalized_at,
        created_at, metadata, tags, unique_key, unique_states, ordering_key
    ) VALUES (
        p_kind,
        coalesce(p_queue, 'default'),
        coalesce(p_args, '{}'::jsonb),
        v_state,
        coalesce(p_priority, 2),
        coalesce(p_max_attempts, 25),
        coalesce(p_run_at, v_now),
        CASE WHEN v_state IN ('completed', 'failed', 'cancelled') THEN v_now END,
        v_now,
        coalesce(p_metadata, '{}'::jsonb),
        coalesce(p_tags, '{}'::text[]),
        p_unique_key,
        coalesce(p_unique_states, B'11111000'),
        p_ordering_key
    )
    RETURNING
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
        heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors,
        metadata, tags, unique_key, unique_states, awa.callback_id_as_uuid(callback_id),
        callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
        callback_transform, run_lease, progress
    INTO v_row;
    RETURN v_row;
END
$$;
