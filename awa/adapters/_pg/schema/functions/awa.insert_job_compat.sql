-- The SQL producer contract (SQL_SURFACE.md): insert one job in the caller's transaction,
-- with the database clock, into the storage the transition state routes producers to
-- (awa.insert_job_append writes it).
--
-- A unique key with a conflict mode in the metadata ('awa:unique_conflict', ADR 0034)
-- first merges into a waiting holder (awa.unique_conflict_merge) and returns that job; a
-- debounce that finds none is inserted to run its window from now (unless p_run_at
-- says when); an insert that loses the race to a concurrent insert of the key merges
-- into the winner. Only such inserts pay for the subtransaction the retry needs.
-- requires: awa.jobs, awa.unique_conflict_merge, awa.insert_job_append
CREATE OR REPLACE FUNCTION awa.insert_job_compat(
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
    v_now    timestamptz := now();
    v_row    awa.jobs;
    v_run_at timestamptz := p_run_at;
    v_tries  int := 0;
BEGIN
    IF p_unique_key IS NULL OR NOT coalesce(p_metadata ? 'awa:unique_conflict', false) THEN
        RETURN awa.insert_job_append(p_kind, p_queue, p_args, p_state, p_priority,
            p_max_attempts, p_run_at, p_metadata, p_tags, p_unique_key, p_unique_states,
            p_ordering_key);
    END IF;
    LOOP
        -- Validates the mode, then merges into a waiting holder if there is one.
        SELECT * INTO v_row FROM awa.unique_conflict_merge(p_unique_key, p_args, p_run_at,
            p_priority, p_tags, p_metadata, v_now);
        IF FOUND THEN
            RETURN v_row;
        END IF;
        IF v_run_at IS NULL
            AND p_metadata #>> '{awa:unique_conflict,on_conflict}' = 'debounce' THEN
            v_run_at := v_now + make_interval(
                secs => (p_metadata #>> '{awa:unique_conflict,window}')::double precision);
        END IF;
        v_tries := v_tries + 1;
        BEGIN
            RETURN awa.insert_job_append(p_kind, p_queue, p_args, p_state, p_priority,
                p_max_attempts, v_run_at, p_metadata, p_tags, p_unique_key, p_unique_states,
                p_ordering_key);
        EXCEPTION WHEN unique_violation THEN
            -- A concurrent insert of the key committed first; the next round merges into
            -- it, or, when it is no longer waiting, finds no holder to merge and clashes
            -- again: after three rounds the clash is the caller's, as without a mode.
            IF v_tries >= 3 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$$;
