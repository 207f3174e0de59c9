-- A job holds its unique key exactly while its state is in its mask.
CREATE OR REPLACE FUNCTION awa.canonical_jobs_sync_unique_claim() RETURNS trigger
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
