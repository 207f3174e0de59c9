-- A runtime counts as live while its snapshot is younger than max(3 x its snapshot
-- interval, 30 s) and it has not announced its shutdown.
CREATE OR REPLACE FUNCTION awa.runtime_is_live(
    p_last_seen_at timestamptz, p_snapshot_interval_ms bigint, p_shutting_down boolean
) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT coalesce(p_shutting_down, false)
        AND p_last_seen_at > now() - make_interval(
            secs => greatest(coalesce(p_snapshot_interval_ms, 10000) * 3, 30000) / 1000.0)
$$;
