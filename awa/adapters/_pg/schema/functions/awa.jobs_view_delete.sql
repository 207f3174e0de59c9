-- DELETE through awa.jobs: a canonical row is deleted, a queue-storage job gets a deletion
-- marker (awa.queue_storage_edit); nothing happens for a job that no plane holds.
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
