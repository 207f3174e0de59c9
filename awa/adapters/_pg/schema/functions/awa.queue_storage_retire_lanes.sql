-- Lock the claim heads of these lanes (sorted, waiting) and mark each with this
-- transaction's id, unless this transaction marked it already (a drain retires many
-- rows of one lane: one new row version, not one per row). Every writer that retires an
-- unclaimed ready row calls this before its re-check and its tombstone, in the same
-- transaction. Returns how many heads it marked.
CREATE OR REPLACE FUNCTION awa.queue_storage_retire_lanes(
    p_schema text, p_queues text[], p_priorities smallint[], p_shards int[]
) RETURNS int
LANGUAGE plpgsql AS $retire$
DECLARE
    v_rows int;
BEGIN
    EXECUTE format($q$
        WITH want AS (
            SELECT DISTINCT q, p, sh FROM unnest($1::text[], $2::smallint[], $3::int[])
                AS i(q, p, sh)
        ), locked AS (
            SELECT h.queue, h.priority, h.shard, h.retired_xid
            FROM %1$s.claim_heads h
            JOIN want w ON w.q = h.queue AND w.p = h.priority AND w.sh = h.shard
            ORDER BY h.queue, h.priority, h.shard
            FOR UPDATE OF h
        )
        UPDATE %1$s.claim_heads h SET retired_xid = pg_current_xact_id()
        FROM locked l
        WHERE h.queue = l.queue AND h.priority = l.priority AND h.shard = l.shard
          AND l.retired_xid IS DISTINCT FROM pg_current_xact_id()$q$, quote_ident(p_schema))
        USING p_queues, p_priorities, p_shards;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$retire$;
