-- `awa storage rebuild-terminal-counters`: recount a queue-storage schema's per-queue state
-- counters from its resolved jobs (after an incident or drift). The counters table is
-- locked first: a producer or worker that counted already has committed, one that has not
-- counts after this commits, on top of a recount that does not see its uncommitted jobs.
-- Returns how many (queue, state) counters it wrote. Best run on a quiesced fleet.
CREATE OR REPLACE FUNCTION awa.queue_storage_rebuild_counters(p_schema text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    s text := quote_ident(p_schema);
    v_written bigint;
BEGIN
    IF NOT awa.queue_storage_installed(p_schema) THEN
        RAISE EXCEPTION 'schema % has no queue-storage tables', p_schema
            USING ERRCODE = '55000';
    END IF;
    EXECUTE format('LOCK TABLE %s.queue_counts IN EXCLUSIVE MODE', s);
    EXECUTE format('DELETE FROM %s.queue_counts', s);
    EXECUTE format($q$
        INSERT INTO %s.queue_counts (queue, state, bucket, n)
        SELECT queue, state, 0::smallint, count(*) FROM %s.jobs_resolved
        GROUP BY queue, state$q$, s, s);
    GET DIAGNOSTICS v_written = ROW_COUNT;
    RETURN v_written;
END
$$;
