-- DELETE through awa.jobs: a canonical row is deleted, a queue-storage job gets a deletion
-- marker (awa.queue_storage_edit); nothing happens for a job that no plane holds. A job
-- deleted while jobs still wait on it (awa.dependency_waited_on, whatever state it was
-- deleted in) is recorded in awa.dependency_vanished_parents, and the maintenance leader's
-- dependency_cleanup answers its children as for a cancel, by the rule the engines'
-- delete_jobs applies (ADR 0032, "A parent that vanishes").
-- requires: awa.dependency_waited_on
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
    ELSE
        DELETE FROM awa.canonical_jobs WHERE id = OLD.id;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM awa.dependency_waited_on(ARRAY[OLD.id])) THEN
        INSERT INTO awa.dependency_vanished_parents (parent_id, seen_at, deleted)
        VALUES (OLD.id, now(), true)
        ON CONFLICT (parent_id) DO UPDATE SET deleted = true;
    END IF;
    RETURN OLD;
END
$$;
