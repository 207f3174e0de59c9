-- Whether the queue-storage schema holds any job fact (ready, deferred or terminal).
CREATE OR REPLACE FUNCTION awa.queue_storage_has_rows(p_schema text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s text := quote_ident(p_schema);
    found boolean;
BEGIN
    IF NOT awa.queue_storage_installed(p_schema) THEN
        RETURN false;
    END IF;
    EXECUTE format(
        'SELECT EXISTS (SELECT 1 FROM %1$s.ready_entries)
             OR EXISTS (SELECT 1 FROM %1$s.deferred_jobs)
             OR EXISTS (SELECT 1 FROM %1$s.done_entries WHERE state IS NOT NULL)', s)
        INTO found;
    RETURN found;
END
$$;
