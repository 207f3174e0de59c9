-- Move the canonical backlog that is not running (available, scheduled, retryable) into
-- queue storage under the same ids, oldest first. Runs while producers route to queue
-- storage, so canonical retries and operator retries continue there and finalize only
-- waits for attempts already running on canonical. Rows locked by a claimer are skipped.
CREATE OR REPLACE FUNCTION awa.storage_move_canonical_backlog(p_limit int DEFAULT 1000) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_schema text := awa.active_queue_storage_schema();
    v_job    awa.canonical_jobs;
    v_moved  int := 0;
BEGIN
    IF v_schema IS NULL OR NOT awa.queue_storage_installed(v_schema) THEN
        RETURN 0;
    END IF;
    FOR v_job IN
        DELETE FROM awa.canonical_jobs c
        WHERE c.id IN (
            SELECT id FROM awa.canonical_jobs
            WHERE state IN ('available', 'scheduled', 'retryable')
            ORDER BY run_at, id
            LIMIT greatest(p_limit, 0)
            FOR UPDATE SKIP LOCKED
        )
          AND c.state IN ('available', 'scheduled', 'retryable')
        RETURNING c.*
    LOOP
        -- The delete trigger released the key; the same job takes it back in the new engine.
        IF v_job.unique_key IS NOT NULL
            AND awa.job_state_in_bitmask(v_job.unique_states, v_job.state) THEN
            INSERT INTO awa.job_unique_claims (unique_key, job_id)
            VALUES (v_job.unique_key, v_job.id);
        END IF;
        PERFORM awa.queue_storage_append(v_schema, v_job);
        v_moved := v_moved + 1;
    END LOOP;
    RETURN v_moved;
END
$$;
