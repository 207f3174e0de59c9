-- Which plane holds a job the view returned: 'canonical', a queue-storage schema, or NULL.
CREATE OR REPLACE FUNCTION awa.job_plane(p_id bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_extra text := awa.queue_storage_extra_schema();
    v_found boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM awa.canonical_jobs WHERE id = p_id) THEN
        RETURN 'canonical';
    END IF;
    IF EXISTS (SELECT 1 FROM awa.jobs_resolved WHERE id = p_id) THEN
        RETURN 'awa';
    END IF;
    IF v_extra IS NOT NULL THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s.jobs_resolved WHERE id = $1)',
                       quote_ident(v_extra))
            INTO v_found USING p_id;
        IF v_found THEN
            RETURN v_extra;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
